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

/// Which projection tables a write covers. The append writes the subscriber's own tables (what entitlement
/// reads need at once); `ReportRollupWorker` writes the report facts as it follows the log, with the rollup
/// cells of the same change; a rebuild writes all five.
enum ProjectionParts: Sendable {
    case all
    /// `windows` and `subscriber_state`.
    case subscriber
    /// `report_runs`, `report_transactions` and `report_trials`.
    case reports

    var subscriber: Bool { self != .reports }
    var reports: Bool { self != .subscriber }
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
    /// Writes the folded subscriber's rows; with a `patch`, only those its previous fold did not already have.
    static func write(
        _ f: ProjectionWriter.Folded, to e: inout some ProjectionRowEncoder, patch: ProjectionPatch? = nil, parts: ProjectionParts = .all
    ) {
        if parts.subscriber { writeSubscriber(f, to: &e, patch: patch) }
        if parts.reports { writeReports(f, to: &e, patch: patch) }
    }

    private static func writeSubscriber(_ f: ProjectionWriter.Folded, to e: inout some ProjectionRowEncoder, patch: ProjectionPatch?) {
        for (seq, w) in f.ledger.windows.enumerated() where patch?.keptWindows.contains(seq) != true {
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
        e.json("will_renew", state.willRenew)
        e.json("unmatched_refunds", state.unmatchedRefunds)
        e.text("merged_into", f.ledger.mergedInto)
        e.integer("first_seen_us", f.facts.firstSeen?.microseconds)
        e.endRow()
    }

    private static func writeReports(_ f: ProjectionWriter.Folded, to e: inout some ProjectionRowEncoder, patch: ProjectionPatch?) {
        for (i, (run, firstStart)) in zip(f.facts.runs, f.facts.runFirstStarts).enumerated()
        where patch?.keptRuns.contains(i) != true {
            e.beginRow(.reportRuns)
            e.text("entitlement", run.entitlement)
            e.text("subscriber_id", f.subscriber)
            e.integer("start_us", run.start.microseconds)
            e.integer("end_us", run.end?.microseconds)
            e.integer("first_start_us", firstStart.microseconds)
            e.text("lapse", run.lapse?.rawValue)
            e.bool("transferred_in", run.transferredIn)
            e.endRow()
        }
        for (i, t) in f.facts.transactions.enumerated() where patch?.keptTransactions.contains(i) != true {
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
            e.bool("revenue_rolled_up_days", ReportRollup.rollsUpDays(t))
            e.integer("held_from_us", t.heldFrom?.microseconds)
            e.integer("handed_over_us", t.handedOver?.microseconds)
            e.integer("tax", t.tax)
            e.text("country", t.country)
            e.text("store", t.store)
            e.text("product_id", t.productID)
            e.endRow()
        }
        for (i, t) in f.facts.trials.enumerated() where patch?.keptTrials.contains(i) != true {
            e.beginRow(.reportTrials)
            e.uuid("source_event_id", t.eventID)
            e.text("entitlement", t.entitlement)
            e.text("subscriber_id", f.subscriber)
            e.integer("start_us", t.start.microseconds)
            e.integer("end_us", t.end.microseconds)
            e.bool("converted", t.converted)
            e.text("store", t.store)
            e.text("country", t.country)
            e.text("product_id", t.productID)
            e.endRow()
        }
    }
}

/// What an append changes in a subscriber's projection rows, from the fold before it to the fold after it:
/// the rows both folds have alike are kept (not written again), the stored rows that differ or are gone are
/// deleted by key, and the rest are inserted. A renewal of a long subscription then writes a window, a
/// transaction and a run instead of rewriting every row of the subscriber under the append lock.
///
/// Only valid while the stored rows are exactly the previous fold's: `subledger_append` checks that the
/// subscriber's projected version is the believed one, else the general path rewrites the subscriber whole.
struct ProjectionPatch {
    var keptWindows: Set<Int> = []
    var keptRuns: Set<Int> = []
    var keptTransactions: Set<Int> = []
    var keptTrials: Set<Int> = []
    /// Keys of stored rows to delete.
    var windowSeqs: [Int] = []
    var runKeys: [(entitlement: String, start: Int64)] = []
    var transactionIDs: [UUID] = []
    var trialKeys: [(eventID: UUID, entitlement: String)] = []

    init(from old: ProjectionWriter.Previous, to new: ProjectionWriter.Folded) {
        let (oldWindows, newWindows) = (old.ledger.windows, new.ledger.windows)
        for seq in 0..<max(oldWindows.count, newWindows.count) {
            if seq < oldWindows.count, seq < newWindows.count, oldWindows[seq] == newWindows[seq] {
                keptWindows.insert(seq)
            } else if seq < oldWindows.count {
                windowSeqs.append(seq)
            }
        }
        struct RunKey: Hashable {
            var entitlement: String
            var start: Int64
        }
        var oldRuns: [RunKey: (PaidRun, Timestamp)] = [:]
        for (run, first) in zip(old.facts.runs, old.facts.runFirstStarts) {
            oldRuns[RunKey(entitlement: run.entitlement, start: run.start.microseconds)] = (run, first)
        }
        for (i, (run, first)) in zip(new.facts.runs, new.facts.runFirstStarts).enumerated() {
            let key = RunKey(entitlement: run.entitlement, start: run.start.microseconds)
            if let (oldRun, oldFirst) = oldRuns[key], oldRun == run, oldFirst == first {
                keptRuns.insert(i)
                oldRuns[key] = nil
            }
        }
        runKeys = oldRuns.keys.map { ($0.entitlement, $0.start) }
        var oldTransactions = Dictionary(old.facts.transactions.map { ($0.eventID, $0) }, uniquingKeysWith: { a, _ in a })
        for (i, t) in new.facts.transactions.enumerated() where oldTransactions[t.eventID] == t {
            keptTransactions.insert(i)
            oldTransactions[t.eventID] = nil
        }
        transactionIDs = Array(oldTransactions.keys)
        struct TrialKey: Hashable {
            var eventID: UUID
            var entitlement: String
        }
        var oldTrials = Dictionary(
            old.facts.trials.map { (TrialKey(eventID: $0.eventID, entitlement: $0.entitlement), $0) }, uniquingKeysWith: { a, _ in a })
        for (i, t) in new.facts.trials.enumerated() {
            let key = TrialKey(eventID: t.eventID, entitlement: t.entitlement)
            if oldTrials[key] == t {
                keptTrials.insert(i)
                oldTrials[key] = nil
            }
        }
        trialKeys = oldTrials.keys.map { ($0.eventID, $0.entitlement) }
    }
}
