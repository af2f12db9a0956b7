import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// The database work of a store message, on the one connection of its transaction (`EventStore.transaction`):
/// its inbox row, the store's links, the catalog and the events it appends. `StoreInbox` and `StoreLinks`
/// run the same statements outside a transaction (each on its own lease).
public struct StoreTransaction: Sendable {
    /// For a store's own tables (e.g. Stripe's invoices), bound through PostgresNIO's interpolation like every statement here.
    public let connection: PostgresConnection
    public let logger: Logger
    let appends: TransactionAppends?
    /// This message's place in a shared transaction (`SharedTransaction`), if it is one.
    var member: SharedTransaction.Member? = nil

    // MARK: inbox

    public func status(store: String, messageID: String) async throws -> StoreInbox.Status? {
        for try await s in try await connection.query(
            "SELECT status FROM store_inbox WHERE store = \(store) AND message_id = \(messageID)", logger: logger
        ).decode(String.self) {
            return StoreInbox.Status(rawValue: s)
        }
        return nil
    }

    /// Records a message, or moves a recorded one to a new status (and reason); the first delivery's payload is kept.
    /// `applied` also clears what a waiting message carried (its next attempt, last error and reason), as `mark` does.
    public func record(_ m: StoreInbox.Message) async throws {
        let applied = m.status == .applied
        try await connection.query(
            """
            INSERT INTO store_inbox (store, message_id, kind, subtype, environment, account_id, subscriber_id, status,
                raw, payload, reason, updated_at)
            VALUES (\(m.store), \(m.messageID), \(m.kind), \(m.subtype), \(m.environment.rawValue), \(m.accountID),
                    \(m.subscriberID), \(m.status.rawValue), \(m.raw), \(JSONValue.object(m.payload).canonicalString())::jsonb,
                    \(m.reason.map(StoreInbox.bounded)), CASE WHEN \(applied) THEN clock_timestamp() END)
            ON CONFLICT (store, message_id) DO UPDATE SET status = excluded.status,
                account_id = coalesce(excluded.account_id, store_inbox.account_id),
                subscriber_id = coalesce(excluded.subscriber_id, store_inbox.subscriber_id),
                reason = excluded.reason, updated_at = clock_timestamp(),
                next_attempt_at = CASE WHEN \(applied) THEN NULL ELSE store_inbox.next_attempt_at END,
                last_error = CASE WHEN \(applied) THEN NULL ELSE store_inbox.last_error END
            """, logger: logger)
    }

    /// Records a message only if it is new; true when it was. A background resolver takes it up after `resolveAfter`.
    public func recordIfNew(_ m: StoreInbox.Message, resolveAfter: Duration = .zero) async throws -> Bool {
        let ms = resolveAfter.components.seconds * 1000 + resolveAfter.components.attoseconds / 1_000_000_000_000_000
        let rows = try await connection.query(
            """
            INSERT INTO store_inbox (store, message_id, kind, subtype, environment, account_id, subscriber_id, status,
                raw, payload, next_attempt_at, reason)
            VALUES (\(m.store), \(m.messageID), \(m.kind), \(m.subtype), \(m.environment.rawValue), \(m.accountID),
                    \(m.subscriberID), \(m.status.rawValue), \(m.raw), \(JSONValue.object(m.payload).canonicalString())::jsonb,
                    clock_timestamp() + \(ms) * interval '1 millisecond', \(m.reason.map(StoreInbox.bounded)))
            ON CONFLICT (store, message_id) DO NOTHING
            RETURNING 1
            """, logger: logger)
        for try await _ in rows.decode(Int.self) { return true }
        return false
    }

    /// Pending messages of these accounts, oldest first; in a transaction they are locked until it ends.
    public func pending(store: String, accountIDs: [String]) async throws -> [StoreInbox.Message] {
        guard !accountIDs.isEmpty else { return [] }
        return try await messages(
            """
            SELECT \(unescaped: StoreInbox.columns) FROM store_inbox
            WHERE store = \(store) AND status = 'pending' AND account_id = ANY(\(accountIDs)::text[])
            ORDER BY received_at FOR UPDATE
            """)
    }

    public func mark(store: String, messageID: String, status: StoreInbox.Status, subscriberID: String? = nil) async throws {
        try await connection.query(
            """
            UPDATE store_inbox SET status = \(status.rawValue), subscriber_id = coalesce(\(subscriberID), subscriber_id),
                next_attempt_at = NULL, last_error = NULL, reason = NULL, updated_at = clock_timestamp()
            WHERE store = \(store) AND message_id = \(messageID)
            """, logger: logger)
    }

    /// Says why a message still waits.
    public func explain(store: String, messageID: String, reason: String) async throws {
        try await connection.query(
            """
            UPDATE store_inbox SET reason = \(StoreInbox.bounded(reason)), updated_at = clock_timestamp()
            WHERE store = \(store) AND message_id = \(messageID)
            """, logger: logger)
    }

    func messages(_ query: PostgresQuery) async throws -> [StoreInbox.Message] {
        var out: [StoreInbox.Message] = []
        for try await (store, id, kind, subtype, env, account, subscriber, status, attempts, raw, payload) in try await connection.query(
            query, logger: logger
        ).decode((String, String, String, String?, String, String?, String?, String, Int32, String, String).self) {
            guard case .object(let o) = try JSONParser.parse(payload, maxDepth: 1000) else { continue }
            out.append(
                StoreInbox.Message(
                    store: store, messageID: id, kind: kind, subtype: subtype,
                    environment: LedgerEnvironment(rawValue: env) ?? .production, accountID: account,
                    subscriberID: subscriber, status: StoreInbox.Status(rawValue: status) ?? .received, attempts: Int(attempts), raw: raw,
                    payload: o))
        }
        return out
    }

    // MARK: links

    /// Links accounts to a subscriber; linking to the same subscriber again is a no-op, to another a
    /// `StoreLinks.Conflict`, and then none of them is linked (one statement: the conflicts are looked for
    /// first, the insert only runs without any; an account linked meanwhile by another transaction is looked
    /// for again after the insert).
    public func link(store: String, _ accountIDs: [String], to subscriberID: String, by origin: String) async throws {
        guard !accountIDs.isEmpty else { return }
        let ids = Array(Set(accountIDs))
        var conflict: StoreLinks.Conflict?
        var inserted = 0
        var already = 0
        for try await (kind, account, owner) in try await connection.query(
            """
            WITH taken AS (
                SELECT account_id, subscriber_id FROM store_links WHERE store = \(store) AND account_id = ANY(\(ids)::text[])
            ), added AS (
                INSERT INTO store_links (store, account_id, subscriber_id, linked_by)
                SELECT \(store), a, \(subscriberID), \(origin) FROM unnest(\(ids)::text[]) AS a
                WHERE NOT EXISTS (SELECT 1 FROM taken WHERE subscriber_id <> \(subscriberID))
                ON CONFLICT (store, account_id) DO NOTHING
                RETURNING account_id
            )
            SELECT 'taken', account_id, subscriber_id FROM taken
            UNION ALL SELECT 'added', account_id, '' FROM added
            """, logger: logger
        ).decode((String, String, String).self) {
            if kind == "added" {
                inserted += 1
            } else if owner == subscriberID {
                already += 1
            } else if conflict == nil {
                conflict = StoreLinks.Conflict(store: store, accountID: account, subscriberID: owner)
            }
        }
        if let conflict { throw conflict }
        guard inserted + already < ids.count else { return }
        // Another transaction linked one of them between the look-up and the insert.
        for try await (account, owner) in try await connection.query(
            """
            SELECT account_id, subscriber_id FROM store_links
            WHERE store = \(store) AND account_id = ANY(\(ids)::text[]) AND subscriber_id <> \(subscriberID)
            """, logger: logger
        ).decode((String, String).self) {
            throw StoreLinks.Conflict(store: store, accountID: account, subscriberID: owner)
        }
    }

    /// The store's account ids linked to a subscriber, in id order.
    public func accounts(store: String, subscriber: String) async throws -> [String] {
        let rows = try await connection.query(
            "SELECT account_id FROM store_links WHERE store = \(store) AND subscriber_id = \(subscriber) ORDER BY account_id",
            logger: logger)
        var ids: [String] = []
        for try await id in rows.decode(String.self) { ids.append(id) }
        return ids
    }

    public func subscriber(store: String, accountID: String) async throws -> String? {
        for try await s in try await connection.query(
            "SELECT subscriber_id FROM store_links WHERE store = \(store) AND account_id = \(accountID)", logger: logger
        ).decode(String.self) {
            return s
        }
        return nil
    }

    // MARK: events and catalog

    /// The event a source stored under an idempotency key, if any (seen by this transaction).
    public func event(source: String, idempotencyKey: String) async throws -> RecordedEvent? {
        for try await row in try await connection.query(
            """
            SELECT \(unescaped: EventRow.columns) FROM events WHERE source = \(source) AND idempotency_key = \(idempotencyKey)
            """, logger: logger)
        {
            return try EventRow.decode(row)
        }
        return nil
    }

    /// The catalog's latest revision of each product named.
    public func products(_ ids: Set<String>) async throws -> [String: Product] {
        try await CatalogStore.latest(ids, on: connection, logger: logger)
    }

    /// Appends inside this transaction, under the append lock (held until it ends, so the caller writes what
    /// it can before: `StoreSession.ingest` records the message first); a fact already stored under its key
    /// stands as stored with `.keepStored`. Only within `EventStore.transaction`.
    public func append(_ events: [NewEvent], replays: EventStore.ReplayPolicy) async throws -> AppendResult {
        guard let appends else { preconditionFailure("StoreTransaction.append outside EventStore.transaction") }
        return try await appends.append(AppendJob(events: events, replays: replays), of: member, on: connection, logger: logger)
    }
}
