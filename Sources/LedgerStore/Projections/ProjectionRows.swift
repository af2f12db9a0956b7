import Foundation
import LedgerCore

/// The five projection tables.
enum ProjectionTable: Int, CaseIterable {
    case windows, subscriberState, reportRuns, reportTransactions, reportTrials

    var name: String {
        switch self {
        case .windows: "windows"
        case .subscriberState: "subscriber_state"
        case .reportRuns: "report_runs"
        case .reportTransactions: "report_transactions"
        case .reportTrials: "report_trials"
        }
    }
}

/// Where projection rows go: JSON for the append path (`ProjectionJSONRows`), COPY text for a rebuild
/// (`ProjectionCopyRows`). Each encodes a column's value its own way; which columns a row has, in which
/// order and from which part of the fold, is said once, in `ProjectionRows.write`.
protocol ProjectionRowEncoder {
    mutating func beginRow(_ table: ProjectionTable)
    /// Text (any characters); nil is NULL.
    mutating func text(_ column: StaticString, _ value: String?)
    mutating func integer(_ column: StaticString, _ value: Int64?)
    mutating func timestamp(_ column: StaticString, _ value: Timestamp?)
    mutating func uuid(_ column: StaticString, _ value: UUID?)
    mutating func bool(_ column: StaticString, _ value: Bool)
    mutating func textArray(_ column: StaticString, _ values: [String])
    mutating func integerArray(_ column: StaticString, _ values: [Int64])
    mutating func boolArray(_ column: StaticString, _ values: [Bool])
    /// A `jsonb` column.
    mutating func json(_ column: StaticString, _ value: JSONValue)
    mutating func endRow()
}

/// The projection's rows of a folded subscriber: the one description of the five tables' columns (the
/// migrations define the tables; adding a column is that migration plus one line here).
enum ProjectionRows {
    static func write(_ f: ProjectionWriter.Folded, to e: inout some ProjectionRowEncoder) {
        for (seq, w) in f.ledger.windows.enumerated() {
            let cut = w.effectiveCut
            e.beginRow(.windows)
            e.text("subscriber_id", f.subscriber)
            e.integer("seq", Int64(seq))
            e.text("entitlement", w.entitlement)
            e.timestamp("start_at", w.start)
            e.timestamp("end_at", w.end)
            e.timestamp("granted_end", w.grantedEnd)
            e.text("kind", w.kind.rawValue)
            e.text("product_id", w.productID)
            e.text("transaction_id", w.transactionID)
            e.uuid("source_event_id", w.sourceEventID)
            e.integer("source_position", w.sourcePosition)
            e.text("environment", w.environment.rawValue)
            e.timestamp("cut_at", cut?.at)
            e.uuid("cut_by", cut?.eventID)
            e.text("cut_cause", cut?.cause.rawValue)
            e.endRow()
        }
        let state = ProjectionWriter.stateJSON(f.ledger)
        e.beginRow(.subscriberState)
        e.text("subscriber_id", f.subscriber)
        e.integer("version", f.version)
        e.json("auto_renew", state.autoRenew)
        e.json("lapsed", state.lapsed)
        e.json("unmatched_refunds", state.unmatchedRefunds)
        e.endRow()
        for (run, firstStart) in zip(f.facts.runs, f.facts.runFirstStarts) {
            e.beginRow(.reportRuns)
            e.text("entitlement", run.entitlement)
            e.text("subscriber_id", f.subscriber)
            e.integer("start_us", run.start.microseconds)
            e.integer("end_us", run.end?.microseconds)
            e.integer("first_start_us", firstStart.microseconds)
            e.text("lapse", run.lapse?.rawValue)
            e.endRow()
        }
        for t in f.facts.transactions {
            e.beginRow(.reportTransactions)
            e.uuid("source_event_id", t.eventID)
            e.text("subscriber_id", f.subscriber)
            e.textArray("entitlements", t.entitlements)
            e.text("kind", t.kind.rawValue)
            e.text("currency", t.currency)
            e.integer("gross", t.gross)
            e.integer("commission", t.commission)
            e.integer("occurred_us", t.occurredAt.microseconds)
            e.integer("start_us", t.start.microseconds)
            e.integer("end_us", t.end?.microseconds)
            e.integer("stop_us", t.stop?.microseconds)
            e.integer("service_end_us", t.serviceEnd?.microseconds)
            e.integer("settled_us", t.settledAt.microseconds)
            e.integerArray("refund_at_us", t.refunds.map(\.at.microseconds))
            e.integerArray("refund_amount", t.refunds.map(\.amount))
            // Exact decimals travel as text: numeric's own input reads them.
            e.text("monthly_num", t.monthly.map { String($0.numerator) })
            e.text("monthly_den", t.monthly.map { String($0.denominator) })
            e.boolArray("refund_cut", t.refunds.map(\.cut))
            e.bool("revenue_rolled_up", ReportRollup.rollsUp(t))
            e.endRow()
        }
        for t in f.facts.trials {
            e.beginRow(.reportTrials)
            e.uuid("source_event_id", t.eventID)
            e.text("entitlement", t.entitlement)
            e.text("subscriber_id", f.subscriber)
            e.integer("start_us", t.start.microseconds)
            e.integer("end_us", t.end.microseconds)
            e.bool("converted", t.converted)
            e.endRow()
        }
    }
}
