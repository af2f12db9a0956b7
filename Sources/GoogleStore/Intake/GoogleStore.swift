import LedgerCore
import LedgerStore
import StoreAdapters

/// Google Play on the intake seam (`StoreAdapter`): a notification resolved with the Play Developer API
/// (outside the transaction, by `GooglePlay`), whose drafts the pure mappers made from Google's state.
public struct GoogleStore: StoreAdapter {
    public struct Message: Sendable {
        public var notification: GoogleNotification
        public var raw: String
        public var drafts: [EventDraft]
        /// What Google's state says (a test purchase is sandbox).
        public var environment: LedgerEnvironment
        /// The obfuscated account id Google's state carries.
        public var subscriberHint: String?
        /// The token this purchase replaces (an upgrade, a top-up, a re-subscription): its subscriber's.
        public var linkedPurchaseToken: String?
    }

    public init() {}

    public var store: String { GooglePlay.store }

    public func record(_ m: Message) -> StoreInbox.Message {
        let n = m.notification
        return StoreInbox.Message(
            store: store, messageID: n.messageID, kind: n.kind, subtype: n.subtype, environment: m.environment,
            accountID: n.purchaseToken, status: .received, raw: m.raw, payload: n.payload)
    }

    public func map(_ m: Message, on tx: StoreTransaction) async throws -> StoreMapping {
        let token = m.notification.purchaseToken
        if let token, let linked = m.linkedPurchaseToken, m.subscriberHint == nil,
            try await tx.subscriber(store: store, accountID: token) == nil,
            let owner = try await tx.subscriber(store: store, accountID: linked)
        {
            try await tx.link(store: store, [token], to: owner, by: "linked_purchase_token")
        }
        return StoreMapping(drafts: m.drafts, accountID: token, subscriberHint: m.subscriberHint, environment: m.environment)
    }

    /// A notification that waited for its token's subscriber: the state the link came with covers it.
    public func remap(_ stored: StoreInbox.Message, on tx: StoreTransaction) async throws -> [EventDraft] { [] }
}
