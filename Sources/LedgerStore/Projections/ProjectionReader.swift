import Foundation
import LedgerCore
import Logging
import NIOCore
import PostgresNIO

/// Where an as-of read stops: the events recorded at or before a position or a recorded time.
public enum AsOf: Sendable, Hashable {
    case position(Int64)
    case recordedAt(Timestamp)
}

/// Reads what the ledger says about one subscriber: from the projection (now), or by folding the log up to
/// an as-of point (what the ledger said then).
public struct ProjectionReader: Sendable {
    let database: Database
    /// Ledgers kept in memory between reads (see `LedgerCache` for why they are never stale).
    let cache: LedgerCache?

    public init(database: Database, cache: LedgerCache? = nil) {
        self.database = database
        self.cache = cache
    }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    /// The subscriber's ledger: the kept projection, or, with `asOf`, the fold of the events recorded by then.
    public func ledger(subscriberID: String, asOf: AsOf? = nil) async throws -> SubscriberLedger {
        if let asOf { return try await fold(subscriberID: subscriberID, asOf: asOf) }
        guard let cache else { return try await projected(subscriberID: subscriberID) }
        let (cached, ticket) = cache.lookup(subscriberID)
        if let cached { return cached }
        let ledger = try await projected(subscriberID: subscriberID)
        cache.store(subscriberID, ledger, ticket: ticket)
        return ledger
    }

    /// The kept projection, read from PostgreSQL.
    private func projected(subscriberID: String) async throws -> SubscriberLedger {
        let logger = database.logger
        // One round trip: the state row first (if any), then every window. The state is sent once, not
        // joined onto each window row: a subscriber with many windows and a large state would otherwise
        // multiply it by the window count (issue 13: gigabytes of temporary files for one read).
        return try await database.withConnection { connection in
            var windows: [Window] = []
            var state: (String, String, String)?
            let rows = try await connection.query(
                """
                SELECT s.auto_renew::text, s.lapsed::text, s.unmatched_refunds::text,
                       NULL::text, NULL::int8, NULL::int8, NULL::text, NULL::text, NULL::text, NULL::uuid, NULL::int8,
                       NULL::text, NULL::int8, NULL::uuid, NULL::text, 0 AS part, 0 AS seq
                FROM subscriber_state s WHERE s.subscriber_id = \(subscriberID)
                UNION ALL
                SELECT NULL, NULL, NULL,
                       w.entitlement, (extract(epoch FROM w.start_at) * 1000000)::int8,
                       (extract(epoch FROM w.granted_end) * 1000000)::int8, w.kind, w.product_id, w.transaction_id,
                       w.source_event_id, w.source_position, w.environment,
                       (extract(epoch FROM w.cut_at) * 1000000)::int8, w.cut_by, w.cut_cause, 1, w.seq
                FROM windows w WHERE w.subscriber_id = \(subscriberID)
                ORDER BY part, seq
                """, logger: logger)
            for try await row in rows {
                guard var c = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let (autoRenew, lapsed, unmatched) = (try c.optionalString(), try c.optionalString(), try c.optionalString())
                let (e, start, granted, kind) = (try c.optionalString(), try c.optionalInt64(), try c.optionalInt64(), try c.optionalString())
                let (product, txn, source) = (try c.optionalString(), try c.optionalString(), try c.optionalUUID())
                let (position, env, cutAt) = (try c.optionalInt64(), try c.optionalString(), try c.optionalInt64())
                let (cutBy, cause) = (try c.optionalUUID(), try c.optionalString())
                if state == nil, let autoRenew, let lapsed, let unmatched { state = (autoRenew, lapsed, unmatched) }
                guard let e, let start, let kind, let source, let position, let env else { continue }
                var cuts: [Window.Cut] = []
                if let cutAt, let cutBy, let cause = cause.flatMap(Window.Cut.Cause.init(rawValue:)) {
                    cuts = [Window.Cut(at: Timestamp(microseconds: cutAt), eventID: cutBy, cause: cause)]
                }
                windows.append(
                    Window(
                        entitlement: e, start: Timestamp(microseconds: start), grantedEnd: granted.map(Timestamp.init(microseconds:)),
                        kind: Window.Kind(rawValue: kind) ?? .paid, productID: product, transactionID: txn, sourceEventID: source,
                        sourcePosition: position, environment: LedgerEnvironment(rawValue: env) ?? .production, cuts: cuts))
            }
            // An exact-size copy: appending left up to twice the capacity, which a cached ledger would keep.
            let exact = windows.withUnsafeBufferPointer { Array($0) }
            var ledger = SubscriberLedger(windows: exact, autoRenew: [:], lapsed: [], unmatchedRefunds: [])
            if let (autoRenew, lapsed, unmatched) = state {
                if case .object(let o) = try JSONParser.parse(autoRenew) { ledger.autoRenew = o.compactMapValues(\.boolValue) }
                ledger.lapsed = Set(try JSONParser.parse(lapsed).arrayValue?.compactMap(\.stringValue) ?? [])
                ledger.unmatchedRefunds = try JSONParser.parse(unmatched).arrayValue?.compactMap {
                    $0.stringValue.flatMap(UUID.init(uuidString:))
                } ?? []
            }
            return ledger
        }
    }

    /// A page of every window of every subscriber, in `(subscriber_id, seq)` order, for exports.
    public func windowsPage(after cursor: (subscriber: String, seq: Int32)?, limit: Int) async throws -> [(String, Int32, Window)] {
        let logger = database.logger
        let (afterSubscriber, afterSeq) = cursor ?? ("", -1)
        return try await database.withConnection { connection in
            var out: [(String, Int32, Window)] = []
            let rows = try await connection.query(
                """
                SELECT subscriber_id, seq, entitlement, (extract(epoch FROM start_at) * 1000000)::int8,
                       (extract(epoch FROM granted_end) * 1000000)::int8, kind, product_id, transaction_id,
                       source_event_id, source_position, environment,
                       (extract(epoch FROM cut_at) * 1000000)::int8, cut_by, cut_cause
                FROM windows WHERE (subscriber_id, seq) > (\(afterSubscriber), \(afterSeq))
                ORDER BY subscriber_id, seq LIMIT \(Int64(limit))
                """, logger: logger)
            for try await (s, q, e, start, granted, kind, product, txn, source, position, env, cutAt, cutBy, cause) in rows.decode(
                (String, Int32, String, Int64, Int64?, String, String?, String?, UUID, Int64, String, Int64?, UUID?, String?).self)
            {
                var cuts: [Window.Cut] = []
                if let cutAt, let cutBy, let cause = cause.flatMap(Window.Cut.Cause.init(rawValue:)) {
                    cuts = [Window.Cut(at: Timestamp(microseconds: cutAt), eventID: cutBy, cause: cause)]
                }
                out.append(
                    (s, q, Window(
                        entitlement: e, start: Timestamp(microseconds: start), grantedEnd: granted.map(Timestamp.init(microseconds:)),
                        kind: Window.Kind(rawValue: kind) ?? .paid, productID: product, transactionID: txn, sourceEventID: source,
                        sourcePosition: position, environment: LedgerEnvironment(rawValue: env) ?? .production, cuts: cuts)))
            }
            return out
        }
    }

    private func fold(subscriberID: String, asOf: AsOf) async throws -> SubscriberLedger {
        let logger = database.logger
        let query: PostgresQuery =
            switch asOf {
            case .position(let p):
                "SELECT \(unescaped: EventRow.columns) FROM events WHERE subscriber_id = \(subscriberID) AND position <= \(p) ORDER BY version"
            case .recordedAt(let t):
                "SELECT \(unescaped: EventRow.columns) FROM events WHERE subscriber_id = \(subscriberID) AND recorded_at <= \(t.rfc3339)::timestamptz ORDER BY version"
            }
        return try await database.withConnection { connection in
            var events: [RecordedEvent] = []
            for try await row in try await connection.query(query, logger: logger) { events.append(try EventRow.decode(row)) }
            return Fold.fold(events)
        }
    }
}
