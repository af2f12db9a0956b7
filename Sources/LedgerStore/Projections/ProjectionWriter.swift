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
        let streams = try await streams(
            """
            SELECT \(unescaped: EventRow.columns) FROM events
            WHERE subscriber_id = ANY(\(TextArray(subscribers))::text[]) ORDER BY subscriber_id, version
            """, on: connection)
        try await write(Self.fold(streams), on: connection)
        return streams.values.reduce(0) { $0 + $1.count }
    }

    /// The streams an event query returns (rows ordered by subscriber and version).
    func streams(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> [String: [RecordedEvent]] {
        var streams: [String: [RecordedEvent]] = [:]
        for try await row in try await connection.query(query, logger: logger) {
            let event = try EventRow.decode(row)
            streams[event.subscriberID, default: []].append(event)
        }
        return streams
    }

    /// Folds whole streams into what `write` stores.
    static func fold(_ streams: [String: [RecordedEvent]]) -> [Folded] {
        streams.map { subscriber, events in
            let ledger = Fold.fold(events)
            return Folded(
                subscriber: subscriber, version: events.last!.version, ledger: ledger,
                facts: SubscriberFacts.derive(events: events, ledger: ledger))
        }
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
        // One round trip for the four deletes: the report facts go in CTEs that reuse the statement's only
        // bind ($1, the subscribers) so every delete probes its subscriber index.
        try await connection.query(
            """
            WITH runs AS (DELETE FROM report_runs WHERE subscriber_id = ANY($1)),
                 transactions AS (DELETE FROM report_transactions WHERE subscriber_id = ANY($1)),
                 trials AS (DELETE FROM report_trials WHERE subscriber_id = ANY($1))
            DELETE FROM windows WHERE subscriber_id = ANY(\(TextArray(subscribers))::text[])
            """, logger: logger)

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
                FROM unnest(\(TextArray(w.subscriber))::text[], \(Int32Array(w.seq))::int4[], \(TextArray(w.entitlement))::text[],
                            \(TextArray(w.start))::text[], \(TextArray(w.end))::text[], \(TextArray(w.grantedEnd))::text[],
                            \(TextArray(w.kind))::text[], \(TextArray(w.product))::text[], \(TextArray(w.transaction))::text[],
                            \(TextArray(w.source))::text[], \(Int64Array(w.position))::int8[], \(TextArray(w.environment))::text[],
                            \(TextArray(w.cutAt))::text[], \(TextArray(w.cutBy))::text[], \(TextArray(w.cutCause))::text[])
                     AS u(s, q, e, st, en, ge, k, p, t, src, pos, env, ca, cb, cc)
                """, logger: logger)
        }
        try await connection.query(
            """
            INSERT INTO subscriber_state (subscriber_id, version, auto_renew, lapsed, unmatched_refunds)
            SELECT s, v, ar::jsonb, l::jsonb, u::jsonb
            FROM unnest(\(TextArray(subscribers))::text[], \(Int64Array(folded.map(\.version)))::int8[],
                        \(TextArray(folded.map { Self.autoRenewJSON($0.ledger) }))::text[],
                        \(TextArray(folded.map { JSONValue.array($0.ledger.lapsed.sorted().map(JSONValue.string)).canonicalString() }))::text[],
                        \(TextArray(folded.map { JSONValue.array($0.ledger.unmatchedRefunds.map { .string($0.lowercasedString) }).canonicalString() }))::text[])
                 AS x(s, v, ar, l, u)
            ON CONFLICT (subscriber_id) DO UPDATE SET version = excluded.version, auto_renew = excluded.auto_renew,
                lapsed = excluded.lapsed, unmatched_refunds = excluded.unmatched_refunds
            """, logger: logger)
        try await ReportFactsWriter(logger: logger).insert(folded.map { ($0.subscriber, $0.facts) }, on: connection)
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
        source.append(w.sourceEventID.lowercasedString)
        position.append(w.sourcePosition)
        environment.append(w.environment.rawValue)
        let cut = w.effectiveCut
        cutAt.append(cut?.at.rfc3339 ?? "")
        cutBy.append(cut?.eventID.lowercasedString ?? "")
        cutCause.append(cut?.cause.rawValue ?? "")
    }
}
