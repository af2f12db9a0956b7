import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// Every store's inbox (`store_inbox`): each verified message, deduplicated by the store's own id (Apple's
/// `notificationUUID`, Pub/Sub's `messageId`, Stripe's event id), recorded before anything is derived from it
/// and kept whatever happens next, so that nothing a store delivered is lost when the subscriber is not
/// known yet, the store's API is down, or the database refuses an append.
public struct StoreInbox: Sendable {
    public enum Status: String, Sendable, CaseIterable {
        /// Recorded; not yet resolved (a store's API must be asked first).
        case received
        /// Its events are in the ledger.
        case applied
        /// Waiting for a link from the store's account id to a subscriber.
        case pending
        /// Nothing to append (a test notification, a fact the ledger keeps only here).
        case notice
        /// Verified, but not for this ledger (another app's package or bundle).
        case ignored
        /// Could not be resolved after its retries; kept for an operator.
        case failed
    }

    /// One message as recorded.
    public struct Message: Sendable {
        public var store: String
        public var messageID: String
        public var kind: String
        public var subtype: String?
        public var environment: LedgerEnvironment
        public var accountID: String?
        public var subscriberID: String?
        public var status: Status
        public var attempts: Int
        public var raw: String
        public var payload: [String: JSONValue]
        /// Why it waits (`pending`: what would link it), recorded with it.
        public var reason: String?

        public init(
            store: String, messageID: String, kind: String, subtype: String? = nil, environment: LedgerEnvironment,
            accountID: String? = nil, subscriberID: String? = nil, status: Status, attempts: Int = 0, raw: String,
            payload: [String: JSONValue], reason: String? = nil
        ) {
            self.reason = reason
            self.store = store
            self.messageID = messageID
            self.kind = kind
            self.subtype = subtype
            self.environment = environment
            self.accountID = accountID
            self.subscriberID = subscriberID
            self.status = status
            self.attempts = attempts
            self.raw = raw
            self.payload = payload
        }
    }

    let database: Database

    public init(database: Database) {
        self.database = database
    }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    public func status(store: String, messageID: String) async throws -> Status? {
        try await run { try await $0.status(store: store, messageID: messageID) }
    }

    /// Records a message, or moves a recorded one to a new status (and reason); the first delivery's payload is kept.
    public func record(_ m: Message) async throws {
        try await run { try await $0.record(m) }
    }

    /// Records a message only if it is new; true when it was. A background resolver takes it up after
    /// `resolveAfter` (the caller resolving it at once meanwhile).
    public func recordIfNew(_ m: Message, resolveAfter: Duration = .zero) async throws -> Bool {
        try await run { try await $0.recordIfNew(m, resolveAfter: resolveAfter) }
    }

    /// The statements of `StoreTransaction`, each on its own lease.
    private func run<T: Sendable>(_ body: @escaping @Sendable (StoreTransaction) async throws -> T) async throws -> T {
        let logger = database.logger
        return try await database.withConnection { try await body(StoreTransaction(connection: $0, logger: logger, appends: nil)) }
    }

    /// The accounts pending messages of a store wait for, those waiting longest first (for a store's look-up
    /// of who an account belongs to).
    public func pendingAccounts(store: String, limit: Int) async throws -> [String] {
        let logger = database.logger
        return try await database.withConnection { c in
            var out: [String] = []
            for try await account in try await c.query(
                """
                SELECT account_id FROM store_inbox
                WHERE store = \(store) AND status = 'pending' AND account_id IS NOT NULL
                GROUP BY account_id ORDER BY min(received_at) LIMIT \(Int64(limit))
                """, logger: logger
            ).decode(String.self) {
                out.append(account)
            }
            return out
        }
    }

    /// Pending messages of these accounts, oldest first.
    public func pending(store: String, accountIDs: [String]) async throws -> [Message] {
        try await run { try await $0.pending(store: store, accountIDs: accountIDs) }
    }

    /// Received messages whose next attempt is due, oldest first (for a store's background resolver).
    public func due(store: String, limit: Int) async throws -> [Message] {
        try await messages(
            """
            SELECT \(unescaped: Self.columns) FROM store_inbox
            WHERE store = \(store) AND status = 'received' AND next_attempt_at <= clock_timestamp()
            ORDER BY next_attempt_at, received_at LIMIT \(Int64(limit))
            """)
    }

    public func mark(store: String, messageID: String, status: Status, subscriberID: String? = nil) async throws {
        try await run { try await $0.mark(store: store, messageID: messageID, status: status, subscriberID: subscriberID) }
    }

    /// Says why a message still waits (a pending one whose link came but whose events still cannot be applied).
    public func explain(store: String, messageID: String, reason: String) async throws {
        try await run { try await $0.explain(store: store, messageID: messageID, reason: reason) }
    }

    /// A failed resolution attempt: retried after `retryAfter`, or marked `failed` when `giveUp`.
    public func attemptFailed(store: String, messageID: String, error: String, retryAfter: Duration, giveUp: Bool) async throws {
        let logger = database.logger
        let ms = retryAfter.components.seconds * 1000 + retryAfter.components.attoseconds / 1_000_000_000_000_000
        try await database.withConnection { c in
            try await c.query(
                """
                UPDATE store_inbox SET attempts = attempts + 1, last_error = \(Self.bounded(error)), reason = \(Self.bounded(error)),
                    updated_at = clock_timestamp(),
                    status = CASE WHEN \(giveUp) THEN 'failed' ELSE status END,
                    next_attempt_at = CASE WHEN \(giveUp) THEN NULL ELSE clock_timestamp() + \(ms) * interval '1 millisecond' END
                WHERE store = \(store) AND message_id = \(messageID)
                """, logger: logger)
        }
    }

    /// Reasons and errors are kept to 1,000 characters: they are read, not parsed.
    static func bounded(_ text: String) -> String { String(text.prefix(1000)) }

    static let columns =
        "store, message_id, kind, subtype, environment, account_id, subscriber_id, status, attempts, raw, payload::text"

    private func messages(_ query: PostgresQuery) async throws -> [Message] {
        try await run { try await $0.messages(query) }
    }
}

/// A store's own account ids (Apple original transaction, Google purchase token, Stripe customer) linked to
/// the subscriber they belong to (`store_links`): how a store message that names only its own ids finds
/// its subscriber.
public struct StoreLinks: Sendable {
    /// An account already belongs to another subscriber.
    public struct Conflict: Error, Sendable, CustomStringConvertible {
        public var store: String
        public var accountID: String
        public var subscriberID: String
        public var description: String { "\(store) account \(accountID) already belongs to subscriber \(subscriberID)" }
    }

    let database: Database

    public init(database: Database) {
        self.database = database
    }

    /// Links accounts to a subscriber; linking to the same subscriber again is a no-op, to another a `Conflict`
    /// (and none is linked).
    public func link(store: String, _ accountIDs: [String], to subscriberID: String, by origin: String) async throws {
        guard !accountIDs.isEmpty else { return }
        try await run { try await $0.link(store: store, accountIDs, to: subscriberID, by: origin) }
    }

    /// The store's account ids linked to a subscriber, in id order.
    public func accounts(store: String, subscriber: String) async throws -> [String] {
        try await run { try await $0.accounts(store: store, subscriber: subscriber) }
    }

    public func subscriber(store: String, accountID: String) async throws -> String? {
        try await run { try await $0.subscriber(store: store, accountID: accountID) }
    }

    private func run<T: Sendable>(_ body: @escaping @Sendable (StoreTransaction) async throws -> T) async throws -> T {
        let logger = database.logger
        return try await database.withConnection { try await body(StoreTransaction(connection: $0, logger: logger, appends: nil)) }
    }
}

/// The high-water marks of periodic store syncs (`store_sync_marks`).
public struct StoreSyncMarks: Sendable {
    let database: Database

    public init(database: Database) {
        self.database = database
    }

    public func mark(store: String, name: String) async throws -> Timestamp? {
        let logger = database.logger
        return try await database.withConnection { c in
            let rows = try await c.query(
                "SELECT mark FROM store_sync_marks WHERE store = \(store) AND name = \(name)",
                logger: logger)
            for try await mark in rows.decode(Timestamp.self) { return mark }
            return nil
        }
    }

    /// Moves the mark forward (never back: two instances may run the same sync).
    public func advance(store: String, name: String, to mark: Timestamp) async throws {
        let logger = database.logger
        try await database.withConnection { c in
            try await c.query(
                """
                INSERT INTO store_sync_marks (store, name, mark) VALUES (\(store), \(name), \(mark))
                ON CONFLICT (store, name) DO UPDATE SET mark = greatest(store_sync_marks.mark, excluded.mark), updated_at = clock_timestamp()
                """, logger: logger)
        }
    }
}
