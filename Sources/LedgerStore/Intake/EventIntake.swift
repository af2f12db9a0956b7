import Foundation
import LedgerCore
import Logging

/// The one way events enter the ledger, whatever their source: a `POST /v1/events` body, an import line,
/// a store's notification. It fills what events leave out from the catalog, validates every payload,
/// resolves the subscriber where a store names only its own account, and appends — or keeps a store's
/// message in its inbox until the subscriber is known. Routes and commands only translate their input
/// and output (docs/data-flow.md).
public struct EventIntake: Sendable {
    public let store: EventStore
    public let catalog: CatalogStore
    public let inbox: StoreInbox
    public let links: StoreLinks
    let database: Database
    /// What happens when a store or an app names another subscriber for a purchase (docs/identity.md).
    public let transferPolicy: TransferPolicy

    public init(store: EventStore, catalog: CatalogStore, database: Database, transferPolicy: TransferPolicy = .transfer) {
        self.store = store
        self.catalog = catalog
        self.database = database
        self.transferPolicy = transferPolicy
        self.inbox = StoreInbox(database: database)
        self.links = StoreLinks(database: database)
    }

    // MARK: complete events (clients, imports)

    /// Fills in from the catalog what `events` leave out and validates every payload; a refusal is an
    /// `EventValidationError` naming the field by its path (`path(i)` is event i's, "" for a lone event).
    public func prepare(_ events: inout [NewEvent], path: (Int) -> String) async throws {
        let needed = CatalogFill.productsNeeded(by: events)
        let products = needed.isEmpty ? [:] : try await catalog.latest(needed)
        for i in events.indices {
            let p = path(i)
            try CatalogFill.apply(&events[i], products: products, path: p)
            try EventDataValidator.validate(
                type: events[i].type, data: events[i].data, occurredAt: events[i].occurredAt, path: p.isEmpty ? "data" : "\(p).data")
        }
    }

    /// `prepare`, then append all or nothing (a reused key with another body is a conflict). The request's
    /// entitlements together are bounded (an import's batches are not: they are projected by the rebuild).
    public func append(_ events: [NewEvent], path: (Int) -> String) async throws -> AppendResult {
        var events = events
        try await prepare(&events, path: path)
        try AppendRequest.checkEntitlements(events)
        try await refuseMerged(events)
        return try await store.append(events)
    }

    /// The time a store message without a date of its own is taken to happen (a restore's transfer).
    public static func now() -> Timestamp { Timestamp(microseconds: Int64((Date().timeIntervalSince1970 * 1_000_000).rounded(.down))) }

    /// A merged subscriber takes no more events (docs/identity.md): 409 `subscriber_merged`, naming where
    /// it went. Its own `merged` event (the merge itself) passes.
    func refuseMerged(_ events: [NewEvent]) async throws {
        var subscribers: [String] = []
        for e in events where !subscribers.contains(e.subscriberID) { subscribers.append(e.subscriberID) }
        let merged = try await IdentityChecks.mergedInto(subscribers, database: database)
        if let e = events.first(where: { merged[$0.subscriberID] != nil }) {
            throw IdentityError.subscriberMerged(subscriber: e.subscriberID, into: merged[e.subscriberID]!)
        }
    }

    // MARK: store drafts

    /// Drafts of a store for a known subscriber: completed from the catalog, validated and appended. A fact
    /// already stored (the same store id, by another path) stands as stored.
    public func append(drafts: [EventDraft], subscriber: String, source: String) async throws -> AppendResult {
        let needed = DraftCompletion.productsNeeded(drafts)
        let products = needed.isEmpty ? [:] : try await catalog.latest(needed)
        let events = try DraftCompletion.complete(drafts, subscriberID: subscriber, source: source, products: products)
        // Two facts of one payload under one key (an adapter's mistake) would be a unique violation in the
        // database: refused here, saying which, so it is never a 500 nor retried for ever.
        var keys: [String: Int] = [:]
        for (i, e) in events.enumerated() {
            if let first = keys[e.idempotencyKey] {
                throw EventValidationError(
                    field: "events[\(i)].idempotency_key",
                    reason: "\(source) mapped two facts to the key \(e.idempotencyKey) (events[\(first)] has it too)")
            }
            keys[e.idempotencyKey] = i
        }
        try await refuseMerged(events)
        return try await store.append(events, replays: .keepStored)
    }

    /// A verified store message and what it says.
    public struct StoreMessage: Sendable {
        /// The store's name, also the events' `source` (`apple`, `google`, `stripe`).
        public var store: String
        /// The store's own id of the message (deduplication).
        public var messageID: String
        public var kind: String
        public var subtype: String?
        public var environment: LedgerEnvironment
        /// The store's own account id the message is about (original transaction, purchase token, customer).
        public var accountID: String?
        /// A subscriber id the message itself carries (Apple's `appAccountToken`, Google's obfuscated account
        /// id, Stripe's `client_reference_id`): it wins, and links the account to it.
        public var subscriberHint: String?
        public var raw: String
        public var payload: [String: JSONValue]
        public var drafts: [EventDraft]

        public init(
            store: String, messageID: String, kind: String, subtype: String? = nil, environment: LedgerEnvironment,
            accountID: String?, subscriberHint: String?, raw: String, payload: [String: JSONValue], drafts: [EventDraft]
        ) {
            self.store = store
            self.messageID = messageID
            self.kind = kind
            self.subtype = subtype
            self.environment = environment
            self.accountID = accountID
            self.subscriberHint = subscriberHint
            self.raw = raw
            self.payload = payload
            self.drafts = drafts
        }

        func record(_ status: StoreInbox.Status, subscriber: String? = nil, reason: String? = nil) -> StoreInbox.Message {
            StoreInbox.Message(
                store: store, messageID: messageID, kind: kind, subtype: subtype, environment: environment, accountID: accountID,
                subscriberID: subscriber, status: status, raw: raw, payload: payload, reason: reason)
        }
    }

    /// What became of a store message.
    public enum Outcome: Sendable {
        /// Seen before (and not waiting): nothing appended.
        case duplicate
        /// Nothing to append; kept in the inbox.
        case notice
        /// Its subscriber is not known yet; kept and applied when a link arrives.
        case pending
        case applied(subscriber: String, events: [RecordedEvent])
    }

    /// Records the message in its store's inbox, then appends its drafts when the subscriber is known;
    /// otherwise it waits there (`pending`) for a link. Recorded first, so a failure after it loses nothing:
    /// the store's retry (or the link) applies it, idempotently.
    public func ingest(_ message: StoreMessage) async throws -> Outcome {
        if let status = try await inbox.status(store: message.store, messageID: message.messageID),
            status != .pending && status != .received
        {
            return .duplicate
        }
        guard !message.drafts.isEmpty else {
            try await inbox.record(message.record(.notice))
            return .notice
        }
        guard let subscriber = try await resolve(message) else {
            try await inbox.record(
                message.record(.pending, reason: StoreInbox.unlinkedReason(store: message.store, accountID: message.accountID)))
            return .pending
        }
        try await inbox.record(message.record(.received, subscriber: subscriber))
        let result: AppendResult
        do {
            result = try await append(drafts: message.drafts, subscriber: subscriber, source: message.store)
        } catch let error as EventValidationError {
            // It stays `received` until the store's retry gets through (a product added to the catalog): say why.
            try? await inbox.explain(store: message.store, messageID: message.messageID, reason: error.description)
            throw error
        }
        try await inbox.mark(store: message.store, messageID: message.messageID, status: .applied, subscriberID: subscriber)
        return .applied(subscriber: subscriber, events: result.events)
    }

    /// The subscriber a message names (linking its account to it), else the one its account is linked to.
    public func resolve(_ message: StoreMessage) async throws -> String? {
        if let hint = message.subscriberHint, Identifiers.isValidSubscriberID(hint) {
            guard let account = message.accountID else { return hint }
            // The store's own fact: never refused; under a policy that keeps the purchase, it goes to its owner.
            return try await claim(
                store: message.store, accounts: [account], for: hint, by: "message", kind: .store,
                at: message.drafts.map(\.occurredAt).min() ?? Self.now(), logger: database.logger)
        }
        guard let account = message.accountID else { return nil }
        return try await links.subscriber(store: message.store, accountID: account)
    }

    /// Links accounts to a subscriber (a client-submitted purchase, a receipt) and applies every message
    /// that waited for them, re-reading each with `drafts` (the store adapter's mapping of a stored payload).
    /// Returns how many were applied; one that still cannot be is left pending and logged.
    public func link(
        store: String, accountIDs: [String], to subscriber: String, by origin: String, logger: Logger, claim kind: ClaimKind = .store,
        drafts: (StoreInbox.Message) async throws -> [EventDraft]
    ) async throws -> Int {
        let owner = try await claim(store: store, accounts: accountIDs, for: subscriber, by: origin, kind: kind, at: Self.now(), logger: logger)
        // A store's fact about a purchase its owner keeps: what waited applies to the owner.
        let subscriber = owner
        var applied = 0
        for pending in try await inbox.pending(store: store, accountIDs: accountIDs) {
            do {
                let d = try await drafts(pending)
                if !d.isEmpty { _ = try await append(drafts: d, subscriber: subscriber, source: store) }
                try await inbox.mark(store: store, messageID: pending.messageID, status: .applied, subscriberID: subscriber)
                applied += 1
            } catch let error as EventValidationError {
                try? await inbox.explain(store: store, messageID: pending.messageID, reason: "linked to \(subscriber), but \(error)")
                logger.warning(
                    "pending store message still cannot be applied",
                    metadata: ["store.name": "\(store)", "store.message_id": "\(pending.messageID)", "error.message": "\(error)"])
            }
        }
        return applied
    }
}
