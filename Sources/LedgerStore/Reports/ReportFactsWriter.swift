import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// Replaces subscribers' rows in the report fact tables (schema 0005) inside the projection write.
struct ReportFactsWriter {
    let logger: Logger
    /// Stands for SQL NULL in bound int8 arrays (no instant or amount of the ledger is this value).
    static let null = Int64.min

    /// Inserts the facts of subscribers whose old rows `ProjectionWriter.write` has just deleted (with their
    /// windows, in one statement).
    func insert(_ facts: [(subscriber: String, facts: SubscriberFacts)], on connection: PostgresConnection) async throws {
        try await insertRuns(facts, on: connection)
        try await insertTransactions(facts, on: connection)
        try await insertTrials(facts, on: connection)
    }

    private func insertRuns(_ facts: [(subscriber: String, facts: SubscriberFacts)], on connection: PostgresConnection) async throws {
        var ent: [String] = [], sub: [String] = [], start: [Int64] = [], end: [Int64] = [], first: [Int64] = [], lapse: [String] = []
        for (subscriber, f) in facts {
            var firstStart: [String: Int64] = [:]
            for run in f.runs where firstStart[run.entitlement] == nil { firstStart[run.entitlement] = run.start.microseconds }
            for run in f.runs {
                ent.append(run.entitlement)
                sub.append(subscriber)
                start.append(run.start.microseconds)
                end.append(run.end?.microseconds ?? Self.null)
                first.append(firstStart[run.entitlement]!)
                lapse.append(run.lapse?.rawValue ?? "")
            }
        }
        guard !sub.isEmpty else { return }
        try await connection.query(
            """
            INSERT INTO report_runs (entitlement, subscriber_id, start_us, end_us, first_start_us, lapse)
            SELECT e, s, st, NULLIF(en, \(Self.null)), f, NULLIF(l, '')
            FROM unnest(\(TextArray(ent))::text[], \(TextArray(sub))::text[], \(Int64Array(start))::int8[],
                        \(Int64Array(end))::int8[], \(Int64Array(first))::int8[], \(TextArray(lapse))::text[])
                 AS u(e, s, st, en, f, l)
            """, logger: logger)
    }

    private func insertTransactions(_ facts: [(subscriber: String, facts: SubscriberFacts)], on connection: PostgresConnection) async throws {
        var id: [UUID] = [], sub: [String] = [], ents: [String] = [], kind: [String] = [], currency: [String] = []
        var gross: [Int64] = [], commission: [Int64] = [], occurred: [Int64] = [], start: [Int64] = []
        var end: [Int64] = [], stop: [Int64] = [], serviceEnd: [Int64] = [], settled: [Int64] = []
        var refundAt: [String] = [], refundAmount: [String] = [], num: [String] = [], den: [String] = []
        for (subscriber, f) in facts {
            for t in f.transactions {
                id.append(t.eventID)
                sub.append(subscriber)
                ents.append(Self.arrayLiteral(t.entitlements.map(Self.quoted)))
                kind.append(t.kind.rawValue)
                currency.append(t.currency)
                gross.append(t.gross)
                commission.append(t.commission)
                occurred.append(t.occurredAt.microseconds)
                start.append(t.start.microseconds)
                end.append(t.end?.microseconds ?? Self.null)
                stop.append(t.stop?.microseconds ?? Self.null)
                serviceEnd.append(t.serviceEnd?.microseconds ?? Self.null)
                settled.append(t.settledAt.microseconds)
                refundAt.append(Self.arrayLiteral(t.refunds.map { String($0.at.microseconds) }))
                refundAmount.append(Self.arrayLiteral(t.refunds.map { String($0.amount) }))
                num.append(t.monthly.map { String($0.numerator) } ?? "")
                den.append(t.monthly.map { String($0.denominator) } ?? "")
            }
        }
        guard !id.isEmpty else { return }
        try await connection.query(
            """
            INSERT INTO report_transactions (source_event_id, subscriber_id, entitlements, kind, currency, gross, commission,
                occurred_us, start_us, end_us, stop_us, service_end_us, settled_us, refund_at_us, refund_amount,
                monthly_num, monthly_den)
            SELECT i, s, e::text[], k, c, g, cm, o, st, NULLIF(en, \(Self.null)), NULLIF(sp, \(Self.null)),
                   NULLIF(se, \(Self.null)), sd, ra::int8[], rm::int8[], NULLIF(n, '')::numeric, NULLIF(d, '')::numeric
            FROM unnest(\(UUIDArray(id))::uuid[], \(TextArray(sub))::text[], \(TextArray(ents))::text[],
                        \(TextArray(kind))::text[], \(TextArray(currency))::text[], \(Int64Array(gross))::int8[],
                        \(Int64Array(commission))::int8[], \(Int64Array(occurred))::int8[], \(Int64Array(start))::int8[],
                        \(Int64Array(end))::int8[], \(Int64Array(stop))::int8[], \(Int64Array(serviceEnd))::int8[],
                        \(Int64Array(settled))::int8[], \(TextArray(refundAt))::text[], \(TextArray(refundAmount))::text[],
                        \(TextArray(num))::text[], \(TextArray(den))::text[])
                 AS u(i, s, e, k, c, g, cm, o, st, en, sp, se, sd, ra, rm, n, d)
            """, logger: logger)
    }

    private func insertTrials(_ facts: [(subscriber: String, facts: SubscriberFacts)], on connection: PostgresConnection) async throws {
        var id: [UUID] = [], ent: [String] = [], sub: [String] = [], start: [Int64] = [], end: [Int64] = [], converted: [Bool] = []
        for (subscriber, f) in facts {
            for t in f.trials {
                id.append(t.eventID)
                ent.append(t.entitlement)
                sub.append(subscriber)
                start.append(t.start.microseconds)
                end.append(t.end.microseconds)
                converted.append(t.converted)
            }
        }
        guard !id.isEmpty else { return }
        try await connection.query(
            """
            INSERT INTO report_trials (source_event_id, entitlement, subscriber_id, start_us, end_us, converted)
            SELECT * FROM unnest(\(UUIDArray(id))::uuid[], \(TextArray(ent))::text[], \(TextArray(sub))::text[],
                                 \(Int64Array(start))::int8[], \(Int64Array(end))::int8[], \(converted)::bool[])
            """, logger: logger)
    }

    /// A PostgreSQL array literal of already-quoted elements, passed as one text bind per row (a column of
    /// arrays cannot be bound as an array of arrays of different lengths).
    static func arrayLiteral(_ elements: [String]) -> String { "{" + elements.joined(separator: ",") + "}" }

    /// One array-literal element, double-quoted with `\\` and `"` escaped: any entitlement name survives.
    static func quoted(_ s: String) -> String {
        guard s.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\"") }) else { return "\"" + s + "\"" }
        return "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }
}
