import Foundation
import LedgerCore
import Logging
import NIOCore
import PostgresNIO

/// Re-folds subscribers from the log and replaces their rows in `windows` and `subscriber_state`.
///
/// Used inside the append transaction (so a read right after a 201 sees the event, and a failed projection
/// write rolls the event back with it) and by `rebuild`. Re-folding the whole stream makes late events
/// (an earlier `occurred_at` than events already recorded) land at their effective time.
struct ProjectionWriter {
    let logger: Logger

    /// Folds the given subscribers' streams as stored (this transaction's rows included) and writes them;
    /// returns how many events were folded.
    @discardableResult
    func refold(_ subscribers: [String], on connection: PostgresConnection) async throws -> Int {
        guard !subscribers.isEmpty else { return 0 }
        var streams: [String: [RecordedEvent]] = [:]
        let rows = try await connection.query(
            """
            SELECT \(unescaped: EventRow.columns) FROM events
            WHERE subscriber_id = ANY(\(subscribers)::text[]) ORDER BY subscriber_id, version
            """, logger: logger)
        for try await row in rows {
            let event = try EventRow.decode(row)
            streams[event.subscriberID, default: []].append(event)
        }
        let folded = streams.map { subscriber, events in
            let ledger = Fold.fold(events)
            return Folded(
                subscriber: subscriber, version: events.last!.version, ledger: ledger,
                facts: SubscriberFacts.derive(events: events, ledger: ledger))
        }
        try await write(folded, on: connection)
        return streams.values.reduce(0) { $0 + $1.count }
    }

    /// One subscriber's fold and the report facts derived from it.
    struct Folded {
        var subscriber: String
        var version: Int64
        var ledger: SubscriberLedger
        var facts: SubscriberFacts
    }

    /// Replaces the projection rows (windows, state and report facts) of the given subscribers.
    func write(_ folded: [Folded], on connection: PostgresConnection) async throws {
        guard !folded.isEmpty else { return }
        let subscribers = folded.map(\.subscriber)
        try await connection.query("DELETE FROM windows WHERE subscriber_id = ANY(\(subscribers)::text[])", logger: logger)

        var w = WindowColumns()
        for f in folded {
            for (seq, window) in f.ledger.windows.enumerated() { w.append(f.subscriber, Int32(seq), window) }
        }
        if !w.subscriber.isEmpty {
            try await connection.query(
                """
                INSERT INTO windows (subscriber_id, seq, entitlement, start_at, end_at, granted_end, kind, product_id,
                                     transaction_id, source_event_id, source_position, environment, cut_at, cut_by, cut_cause)
                SELECT s, q, e, st::timestamptz, NULLIF(en, '')::timestamptz, NULLIF(ge, '')::timestamptz, k,
                       NULLIF(p, ''), NULLIF(t, ''), src::uuid, pos, env,
                       NULLIF(ca, '')::timestamptz, NULLIF(cb, '')::uuid, NULLIF(cc, '')
                FROM unnest(\(w.subscriber)::text[], \(w.seq)::int4[], \(w.entitlement)::text[], \(w.start)::text[],
                            \(w.end)::text[], \(w.grantedEnd)::text[], \(w.kind)::text[], \(w.product)::text[],
                            \(w.transaction)::text[], \(w.source)::text[], \(w.position)::int8[], \(w.environment)::text[],
                            \(w.cutAt)::text[], \(w.cutBy)::text[], \(w.cutCause)::text[])
                     AS u(s, q, e, st, en, ge, k, p, t, src, pos, env, ca, cb, cc)
                """, logger: logger)
        }
        try await connection.query(
            """
            INSERT INTO subscriber_state (subscriber_id, version, auto_renew, lapsed, unmatched_refunds)
            SELECT s, v, ar::jsonb, l::jsonb, u::jsonb
            FROM unnest(\(subscribers)::text[], \(folded.map(\.version))::int8[],
                        \(folded.map { Self.autoRenewJSON($0.ledger) })::text[],
                        \(folded.map { JSONValue.array($0.ledger.lapsed.sorted().map(JSONValue.string)).canonicalString() })::text[],
                        \(folded.map { JSONValue.array($0.ledger.unmatchedRefunds.map { .string($0.uuidString.lowercased()) }).canonicalString() })::text[])
                 AS x(s, v, ar, l, u)
            ON CONFLICT (subscriber_id) DO UPDATE SET version = excluded.version, auto_renew = excluded.auto_renew,
                lapsed = excluded.lapsed, unmatched_refunds = excluded.unmatched_refunds
            """, logger: logger)
        try await ReportFactsWriter(logger: logger).replace(folded.map { ($0.subscriber, $0.facts) }, on: connection)
    }

    static func autoRenewJSON(_ ledger: SubscriberLedger) -> String {
        JSONValue.object(ledger.autoRenew.mapValues(JSONValue.bool)).canonicalString()
    }
}

/// Column arrays for one multi-row INSERT of windows (NULLs travel as empty strings).
private struct WindowColumns {
    var subscriber: [String] = [], seq: [Int32] = [], entitlement: [String] = [], start: [String] = []
    var end: [String] = [], grantedEnd: [String] = [], kind: [String] = [], product: [String] = []
    var transaction: [String] = [], source: [String] = [], position: [Int64] = [], environment: [String] = []
    var cutAt: [String] = [], cutBy: [String] = [], cutCause: [String] = []

    mutating func append(_ s: String, _ q: Int32, _ w: Window) {
        subscriber.append(s)
        seq.append(q)
        entitlement.append(w.entitlement)
        start.append(w.start.rfc3339)
        end.append(w.end?.rfc3339 ?? "")
        grantedEnd.append(w.grantedEnd?.rfc3339 ?? "")
        kind.append(w.kind.rawValue)
        product.append(w.productID ?? "")
        transaction.append(w.transactionID ?? "")
        source.append(w.sourceEventID.uuidString.lowercased())
        position.append(w.sourcePosition)
        environment.append(w.environment.rawValue)
        let cut = w.effectiveCut
        cutAt.append(cut?.at.rfc3339 ?? "")
        cutBy.append(cut?.eventID.uuidString.lowercased() ?? "")
        cutCause.append(cut?.cause.rawValue ?? "")
    }
}
