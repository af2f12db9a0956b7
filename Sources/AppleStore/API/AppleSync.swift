import LedgerCore
import LedgerStore
import Logging
import StoreAdapters

/// Brings one subscription's history from the App Store Server API into the ledger: every transaction of
/// Get Transaction History v2 becomes the purchase or renewal (and, when revoked, the refund) the
/// notifications would have brought, under the same idempotency keys (`apple:txn:…`, `apple:refund:…`), so
/// a sync after notifications, or twice, appends only what is missing.
public struct AppleSync: Sendable {
    let client: AppStoreServerAPIClient
    let verifier: AppleJWSVerifier
    let intake: EventIntake
    let logger: Logger
    /// When set, transactions of another app are refused.
    let bundleID: String?

    /// Most pages of one subscription's transaction history (up to 20 transactions each): far beyond any
    /// real history, and the end of an API that answers `hasMore` forever.
    public static let maxPages = 1_000

    public init(client: AppStoreServerAPIClient, verifier: AppleJWSVerifier, intake: EventIntake, bundleID: String?, logger: Logger) {
        self.client = client
        self.verifier = verifier
        self.intake = intake
        self.bundleID = bundleID
        self.logger = logger
    }

    public struct Summary: Sendable, Equatable, CustomStringConvertible {
        public var subscriber: String
        public var transactions = 0
        /// Events appended now.
        public var appended = 0
        /// Events the ledger already had.
        public var known = 0

        public var description: String {
            "subscriber \(subscriber): \(transactions) transactions, \(appended) events appended, \(known) already known"
        }
    }

    public struct UnknownSubscriber: Error, CustomStringConvertible, Sendable {
        public var originalTransactionID: String
        public var description: String {
            "original transaction \(originalTransactionID) is linked to no subscriber and carries no appAccountToken: pass --subscriber"
        }
    }

    /// Syncs the subscription of `originalTransactionID`. `subscriber`, when given, is linked to it (a
    /// conflict with another subscriber is refused); otherwise the link or the `appAccountToken` decides.
    public func sync(originalTransactionID: String, subscriber given: String?, now: Timestamp) async throws -> Summary {
        var transactions: [[String: JSONValue]] = []
        var revision: String?
        var cursor = PageCursor("transaction history of \(originalTransactionID)", maxPages: Self.maxPages)
        repeat {
            let page = try await client.transactionHistory(transactionID: originalTransactionID, revision: revision)
            for signed in page.signedTransactions {
                let t = try await verifier.verify(signed, now: now)
                if let bundleID, let b = t["bundleId"]?.stringValue, b != bundleID {
                    throw AppleSignatureError("transaction for bundle \"\(b)\", not \"\(bundleID)\"")
                }
                transactions.append(t)
            }
            revision = try cursor.next(hasMore: page.hasMore, token: page.revision)
        } while revision != nil

        let subscriber: String
        if let given {
            // The operator's claim, under the transfer policy (docs/identity.md): a purchase another subscriber
            // keeps is refused.
            subscriber = try await intake.claim(
                store: AppleNotificationMapper.store, accounts: [originalTransactionID], for: given, by: "sync", kind: .app,
                at: EventIntake.now(), logger: logger)
        } else if let linked = try await intake.links.subscriber(store: AppleNotificationMapper.store, accountID: originalTransactionID) {
            subscriber = linked
        } else if let token = transactions.lazy.compactMap({ $0["appAccountToken"]?.stringValue?.lowercased() }).first,
            Identifiers.isValidSubscriberID(token)
        {
            try await intake.links.link(store: AppleNotificationMapper.store, [originalTransactionID], to: token, by: "app_account_token")
            subscriber = token
        } else {
            throw UnknownSubscriber(originalTransactionID: originalTransactionID)
        }

        var drafts: [EventDraft] = []
        for t in transactions {
            let meta: [String: JSONValue] = ["store": "apple", "origin": "server_api", "raw": .object(t)]
            let environment: LedgerEnvironment = t["environment"]?.stringValue == "Production" ? .production : .sandbox
            drafts.append(try AppleNotificationMapper.transactionDraft(t, environment: environment, meta: meta))
            if t["revocationDate"] != nil {
                // Refunded, or revoked from Family Sharing (no money moves, access ends): never dropped.
                drafts.append(try AppleNotificationMapper.revokedDraft(t, environment: environment, meta: meta))
            }
        }
        var summary = Summary(subscriber: subscriber, transactions: transactions.count)
        // Appended in slices, so a long history stays within the request limits of one append.
        for start in stride(from: 0, to: drafts.count, by: 500) {
            let slice = Array(drafts[start..<min(start + 500, drafts.count)])
            let result = try await intake.append(drafts: slice, subscriber: subscriber, source: AppleNotificationMapper.store)
            summary.appended += result.createdCount
            summary.known += result.events.count - result.createdCount
        }
        // Notifications that waited for this subscription's subscriber apply now.
        _ = try await intake.linkApple(originalTransactionIDs: [originalTransactionID], to: subscriber, by: "sync", logger: logger)
        logger.info("apple sync", metadata: ["apple.original_transaction_id": "\(originalTransactionID)", "ledger.subscriber_id": "\(subscriber)"])
        return summary
    }
}
