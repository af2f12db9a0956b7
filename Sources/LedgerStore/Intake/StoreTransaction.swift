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

    // MARK: what a message reads first

    /// What a message's transaction reads before it decides (`StoreSession.ingest`).
    public struct Lookup: Sendable {
        /// The message's inbox status, if it was recorded before.
        public var status: StoreInbox.Status?
        /// The subscriber the message's account is linked to, if any.
        public var linked: String?
        /// Of the subscribers asked and `linked`: where each was merged into, nil when it was not.
        public var merged: [String: String?]
        /// The catalog's latest revision of each product asked for that it has.
        public var products: [String: Product]
    }

    /// What one message asks `lookup`.
    struct LookupRequest: Sendable {
        var store: String
        var messageID: String
        var accountID: String?
        var subscribers: [String]
        var products: Set<String>
    }

    /// The message's inbox status, its account's link, whether those subscribers were merged and the
    /// catalog's products, in one statement: each is a round trip the shared transaction's connection
    /// (`SharedTransaction`) would otherwise make per message, one after the other (docs/data-flow.md). In a
    /// shared transaction, the look-ups of members that ask while another's is running go together in the next
    /// statement (`SharedTransaction.lookup`).
    public func lookup(
        store: String, messageID: String, accountID: String?, subscribers: [String], products ids: Set<String>
    ) async throws -> Lookup {
        let request = LookupRequest(store: store, messageID: messageID, accountID: accountID, subscribers: subscribers, products: ids)
        if let shared = appends?.shared { return try await shared.lookup(request, on: self) }
        return try await Self.lookups([request], on: connection, logger: logger)[0]
    }

    /// The look-ups of several messages in one statement, in their order.
    static func lookups(_ requests: [LookupRequest], on connection: PostgresConnection, logger: Logger) async throws -> [Lookup] {
        var out = [Lookup](repeating: Lookup(status: nil, linked: nil, merged: [:], products: [:]), count: requests.count)
        var products: [String: Product] = [:]
        var merged: [String: String] = [:]
        for try await row in try await connection.query(
            """
            WITH req AS (
                SELECT * FROM unnest(\(requests.map(\.store))::text[], \(requests.map(\.messageID))::text[],
                    \(requests.map { $0.accountID ?? "" })::text[]) WITH ORDINALITY AS r(store, message_id, account_id, i)
            ), link AS (
                SELECT req.i, l.subscriber_id FROM req JOIN store_links l ON l.store = req.store AND l.account_id = req.account_id
                WHERE req.account_id <> ''
            ), merged AS (
                SELECT subscriber_id || chr(10) || coalesce(data->>'into', '') AS pair FROM events
                WHERE type = 'merged'
                  AND subscriber_id = ANY(\(Array(Set(requests.flatMap(\.subscribers))))::text[] || ARRAY(SELECT subscriber_id FROM link))
            ), product AS (
                SELECT DISTINCT ON (product_id) \(unescaped: CatalogStore.columns) FROM products
                WHERE product_id = ANY(\(Array(requests.reduce(into: Set<String>()) { $0.formUnion($1.products) }))::text[])
                ORDER BY product_id, revision DESC
            )
            SELECT 'p', 0::int8, NULL::text, product.* FROM product
            UNION ALL SELECT 's', req.i, ib.status, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
                FROM req JOIN store_inbox ib ON ib.store = req.store AND ib.message_id = req.message_id
            UNION ALL SELECT 'l', i, subscriber_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM link
            UNION ALL SELECT 'm', 0, pair, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM merged
            """, logger: logger
        ).decode(
            (
                String, Int64, String?, String?, Int?, String?, String?, String?, String?, Int64?, String?, String?, Timestamp?
            ).self)
        {
            let (kind, i, value, id, revision, entitlements, productKind, period, duration, price, currency, rate, recorded) = row
            let index = Int(i) - 1
            switch kind {
            case "s" where out.indices.contains(index): out[index].status = value.flatMap(StoreInbox.Status.init(rawValue:))
            case "l" where out.indices.contains(index): out[index].linked = value
            case "m":
                let parts = (value ?? "").split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
                if parts.count == 2 { merged[String(parts[0])] = String(parts[1]) }
            case "p":
                if let id, let revision, let entitlements, let productKind, let price, let currency, let rate, let recorded {
                    products[id] = try CatalogStore.product(
                        (id, revision, entitlements, productKind, period, duration, price, currency, rate, recorded))
                }
            default: break
            }
        }
        for (i, request) in requests.enumerated() {
            for s in request.subscribers + [out[i].linked].compactMap({ $0 }) { out[i].merged[s] = .some(merged[s]) }
            for id in request.products { if let p = products[id] { out[i].products[id] = p } }
        }
        return out
    }

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
        try await connection.query("\(inboxRow: m)", logger: logger)
    }

    /// `record`, and `link` of `accounts` in the same statement: a round trip less for a message that names its
    /// subscriber (`StoreSession.ingest`). A conflict throws `StoreLinks.Conflict` with the row written: the
    /// caller's transaction is then rolled back, as every conflict there is (a claim, then a run again).
    public func record(_ m: StoreInbox.Message, linking accounts: [String], to subscriberID: String, by origin: String) async throws {
        try await link(store: m.store, accounts, to: subscriberID, by: origin, recording: m)
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
        try await link(store: store, accountIDs, to: subscriberID, by: origin, recording: nil)
    }

    /// `link`, with a message's inbox row written by the same statement when `recording` says one.
    private func link(
        store: String, _ accountIDs: [String], to subscriberID: String, by origin: String, recording: StoreInbox.Message?
    ) async throws {
        guard !accountIDs.isEmpty else {
            if let recording { try await record(recording) }
            return
        }
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
            \(inboxRowExpression: recording))
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

extension PostgresQuery.StringInterpolation {
    /// The statement that records a message in the inbox, or moves a recorded one to a new status (and reason);
    /// the first delivery's payload is kept. `applied` also clears what a waiting message carried (its next
    /// attempt, last error and reason), as `mark` does.
    mutating func appendInterpolation(inboxRow m: StoreInbox.Message) {
        let applied = m.status == .applied
        appendLiteral(
            """
            INSERT INTO store_inbox (store, message_id, kind, subtype, environment, account_id, subscriber_id, status,
                raw, payload, reason, updated_at)
            VALUES (
            """)
        appendInterpolation(m.store)
        appendLiteral(", ")
        appendInterpolation(m.messageID)
        appendLiteral(", ")
        appendInterpolation(m.kind)
        appendLiteral(", ")
        appendInterpolation(m.subtype)
        appendLiteral(", ")
        appendInterpolation(m.environment.rawValue)
        appendLiteral(", ")
        appendInterpolation(m.accountID)
        appendLiteral(", ")
        appendInterpolation(m.subscriberID)
        appendLiteral(", ")
        appendInterpolation(m.status.rawValue)
        appendLiteral(", ")
        appendInterpolation(m.raw)
        appendLiteral(", ")
        appendInterpolation(JSONValue.object(m.payload).canonicalString())
        appendLiteral("::jsonb, ")
        appendInterpolation(m.reason.map(StoreInbox.bounded))
        appendLiteral(", CASE WHEN ")
        appendInterpolation(applied)
        appendLiteral(
            """
             THEN clock_timestamp() END)
            ON CONFLICT (store, message_id) DO UPDATE SET status = excluded.status,
                account_id = coalesce(excluded.account_id, store_inbox.account_id),
                subscriber_id = coalesce(excluded.subscriber_id, store_inbox.subscriber_id),
                reason = excluded.reason, updated_at = clock_timestamp(),
                next_attempt_at = CASE WHEN excluded.status = 'applied' THEN NULL ELSE store_inbox.next_attempt_at END,
                last_error = CASE WHEN excluded.status = 'applied' THEN NULL ELSE store_inbox.last_error END
            """)
    }

    /// `inboxRow` as a further common table expression of a statement (`recorded`), or nothing.
    mutating func appendInterpolation(inboxRowExpression m: StoreInbox.Message?) {
        guard let m else { return }
        appendLiteral("), recorded AS (")
        appendInterpolation(inboxRow: m)
        appendLiteral(" RETURNING 1")
    }
}
