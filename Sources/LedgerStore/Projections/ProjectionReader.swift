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
    /// Where reads run (the primary, or a replica that has the position a read needs).
    let router: ReadRouter
    /// Ledgers kept in memory between reads (see `LedgerCache` for why they are never stale).
    let cache: LedgerCache?
    var database: Database { router.primary }

    public init(router: ReadRouter, cache: LedgerCache? = nil) {
        self.router = router
        self.cache = cache
    }

    public init(database: Database, cache: LedgerCache? = nil) {
        self.init(router: ReadRouter(primary: database), cache: cache)
    }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    /// The subscriber's ledger: the kept projection, or, with `asOf`, the fold of the events recorded by then.
    public func ledger(subscriberID: String, asOf: AsOf? = nil) async throws -> SubscriberLedger {
        try await read(subscriberID: subscriberID, asOf: asOf).ledger
    }

    /// The subscriber's ledger as of a state that includes position `minimum` (when any source has it), and
    /// the position that state reflects.
    ///
    /// A cached ledger answers only if it reflects `minimum`; a load must also reflect the last change this
    /// server heard of for the subscriber (the cache ticket's floor), so that a replica behind that change
    /// never puts an older ledger back (docs/entitlement-cache.md). As-of reads fold the log on the primary.
    public func read(subscriberID: String, asOf: AsOf? = nil, atLeast minimum: Int64 = 0) async throws -> (ledger: SubscriberLedger, position: Int64)
    {
        if let asOf {
            let (ledger, position) = try await router.read(atLeast: minimum, primaryOnly: true) { database in
                try await Self.fold(subscriberID: subscriberID, asOf: asOf, on: database)
            }
            return (ledger, position)
        }
        guard let cache else {
            let (ledger, position) = try await router.read(atLeast: minimum) { try await Self.projected(subscriberID: subscriberID, on: $0) }
            return (ledger, position)
        }
        let (hit, ticket) = cache.lookup(subscriberID, atLeast: minimum)
        if let hit { return hit }
        let (ledger, position) = try await router.read(atLeast: max(minimum, ticket.floor)) {
            try await Self.projected(subscriberID: subscriberID, on: $0)
        }
        cache.store(subscriberID, ledger, position: position, ticket: ticket)
        return (ledger, position)
    }

    /// The kept projection, read from PostgreSQL.
    private static func projected(subscriberID: String, on database: Database) async throws -> SubscriberLedger {
        let logger = database.logger
        // One round trip: the state row first (if any), then every window. The state is sent once, not
        // joined onto each window row: a subscriber with many windows and a large state would otherwise
        // multiply it by the window count (issue 13: gigabytes of temporary files for one read).
        return try await database.withConnection { connection in
            var windows: [Window] = []
            var state: (String, String)?
            var mergedInto: String?
            let rows = try await connection.query(
                """
                SELECT s.will_renew::text, s.unmatched_refunds::text, s.merged_into, \(unescaped: WindowRow.nulls), 0 AS part, 0 AS seq
                FROM subscriber_state s WHERE s.subscriber_id = \(subscriberID)
                UNION ALL
                SELECT NULL, NULL, NULL, \(unescaped: WindowRow.columns), 1, w.seq
                FROM windows w WHERE w.subscriber_id = \(subscriberID)
                ORDER BY part, seq
                """, logger: logger)
            for try await row in rows {
                guard var c = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let (willRenew, unmatched, merged) = (try c.optionalString(), try c.optionalString(), try c.optionalString())
                if state == nil, let willRenew, let unmatched { (state, mergedInto) = ((willRenew, unmatched), merged) }
                if let window = try WindowRow.decode(&c) { windows.append(window) }
            }
            // An exact-size copy: appending left up to twice the capacity, which a cached ledger would keep.
            let exact = windows.withUnsafeBufferPointer { Array($0) }
            var ledger = SubscriberLedger(windows: exact, renewing: [:], unmatchedRefunds: [], mergedInto: mergedInto)
            if let (willRenew, unmatched) = state {
                // Anything but a list of instants (a row from before schema 0020, not yet rebuilt) is no timeline.
                if case .object(let o) = try JSONParser.parse(willRenew) {
                    ledger.renewing = o.compactMapValues { value in
                        value.arrayValue.map { $0.compactMap { $0.stringValue.flatMap { try? Timestamp(rfc3339: $0) } } }
                    }.filter { !$0.value.isEmpty }
                }
                ledger.unmatchedRefunds =
                    try JSONParser.parse(unmatched).arrayValue?.compactMap {
                        $0.stringValue.flatMap(UUID.init(uuidString:))
                    } ?? []
            }
            return ledger
        }
    }

    /// A page of every window of every subscriber, in `(subscriber_id, seq)` order, for exports.
    public func windowsPage(after cursor: (subscriber: String, seq: Int32)?, limit: Int) async throws -> [(String, Int32, Window)] {
        try await Self.windowsPage(after: cursor, limit: limit, on: database)
    }

    /// `windowsPage` on a given database (the replica an export was routed to).
    public static func windowsPage(
        after cursor: (subscriber: String, seq: Int32)?, limit: Int, on database: Database
    ) async throws -> [(String, Int32, Window)] {
        let logger = database.logger
        let (afterSubscriber, afterSeq) = cursor ?? ("", -1)
        return try await database.withConnection { connection in
            var out: [(String, Int32, Window)] = []
            let rows = try await connection.query(
                """
                SELECT w.subscriber_id, w.seq, \(unescaped: WindowRow.columns)
                FROM windows w WHERE (w.subscriber_id, w.seq) > (\(afterSubscriber), \(afterSeq))
                ORDER BY w.subscriber_id, w.seq LIMIT \(Int64(limit))
                """, logger: logger)
            for try await row in rows {
                guard var c = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let (s, q) = (try c.string(), try c.int32())
                guard let window = try WindowRow.decode(&c) else { throw BinaryCells.Unexpected(column: "windows") }
                out.append((s, q, window))
            }
            return out
        }
    }

    private static func fold(subscriberID: String, asOf: AsOf, on database: Database) async throws -> SubscriberLedger {
        let logger = database.logger
        let query: PostgresQuery =
            switch asOf {
            case .position(let p):
                "SELECT \(unescaped: EventRow.columns) FROM events WHERE subscriber_id = \(subscriberID) AND position <= \(p) ORDER BY version"
            case .recordedAt(let t):
                "SELECT \(unescaped: EventRow.columns) FROM events WHERE subscriber_id = \(subscriberID) AND recorded_at <= \(t) ORDER BY version"
            }
        return try await database.withConnection { connection in
            var events: [RecordedEvent] = []
            for try await row in try await connection.query(query, logger: logger) { events.append(try EventRow.decode(row)) }
            return Fold.fold(events)
        }
    }
}
