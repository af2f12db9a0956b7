import Foundation
import LedgerCore

/// The report rollups' cells as JSON arrays named like their tables (schema 0014), for
/// `subledger_rollup_add`, or as binary COPY rows for the rebuild's shadow tables (`BinaryRows`). Figures that may exceed 64 bits are written as
/// JSON numbers when they fit in 64 bits and as strings otherwise; `numeric`'s input reads both exactly.
enum RollupRows {
    /// The rollup tables, in the order the rebuild writes them.
    static let tables = [
        "report_revenue_months", "report_trial_days", "report_run_days", "report_churn_periods", "report_retention_cells",
        "report_mrr_days", "report_paid_days", "report_revenue_days", "report_revenue_pending", "report_mrr_hours",
        "report_paid_hours", "report_refund_days", "report_refund_repeats", "report_conversion_days", "report_ltv_cells",
        "report_mrr_movement", "report_revenue_month_dims", "report_trial_day_dims", "report_churn_active_days",
        "report_churn_moves", "report_mrr_rate_days", "report_paid_any_days", "report_mrr_dimension_days",
        "report_paid_dimension_days", "report_conversion_holders", "report_mrr_rate_hours", "report_paid_any_hours",
    ]

    /// The cells as one JSON object of arrays named like the tables (`subledger_rollup_add`).
    static func json(_ rollup: ReportRollup) -> String { json(arrays(rollup)) }

    /// The arrays of `arrays(_:)` as that one object.
    static func json(_ arrays: [(table: String, rows: String)]) -> String {
        "{" + arrays.map { "\"\($0.table)\":\($0.rows)" }.joined(separator: ",") + "}"
    }

    /// Each table's cells as a JSON array, in the order of `tables` (the rebuild sends each to its own table:
    /// one object of every table, parsed by each table's statement, cost the rebuild several seconds).
    static func arrays(_ rollup: ReportRollup) -> [(table: String, rows: String)] {
        zip(tables, rows(rollup) { _ in JSONRows() }).map { ($0, $1.text) }
    }

    /// Each table's cells written by an encoder `make` gives for the table, in the order of `tables`.
    static func rows<E: RollupRowEncoder>(_ rollup: ReportRollup, _ make: (String) -> E) -> [E] {
        func revenueRows(
            _ cells: some Sequence<(key: ReportRollup.RevenueKey, value: ReportRollup.RevenueCell)>, table: String, period: StaticString
        ) -> E {
            var rows = make(table)
            for (k, v) in cells {
                rows.beginRow()
                rows.text("entitlement", k.entitlement)
                rows.integer(period, k.period)
                rows.text("currency", k.currency)
                rows.integer("transactions", v.transactions)
                rows.wide("billings", v.figures.billings)
                rows.wide("tax", v.figures.tax)
                rows.wide("commission", v.figures.commission)
                rows.wide("refunds", v.figures.refunds)
                rows.wide("refunded_unrecognized", v.figures.refundedUnrecognized)
                rows.wide("refunds_recognized", v.figures.refundsRecognized)
                rows.wide("recognized", v.figures.recognized)
                rows.wide("settled_deferred", v.settledDeferred)
                rows.wide("handover", v.figures.handover)
                rows.endRow()
            }
            return rows
        }
        let revenue = revenueRows(rollup.revenue, table: "report_revenue_months", period: "month_us")
        let revenueDays = revenueRows(
            rollup.revenueDays.cells.lazy.map { (key: $0.key, value: $0.cell) }, table: "report_revenue_days", period: "day_us")
        var pending = make("report_revenue_pending")
        for (t, change) in rollup.pendingRevenue {
            pending.beginRow()
            pending.integer("change", change)
            pending.uuid("source_event_id", t.eventID)
            pending.textArray("entitlements", t.entitlements)
            pending.text("kind", t.kind.rawValue)
            pending.text("currency", t.currency)
            pending.integer("gross", t.gross)
            pending.integer("commission", t.commission)
            pending.integer("tax", t.tax)
            pending.integer("occurred_us", t.occurredAt.microseconds)
            pending.integer("start_us", t.start.microseconds)
            pending.integer("end_us", t.end?.microseconds)
            pending.integer("stop_us", t.stop?.microseconds)
            pending.integerArray("refund_at_us", t.refunds.map(\.at.microseconds))
            pending.integerArray("refund_amount", t.refunds.map(\.amount))
            pending.boolArray("refund_cut", t.refunds.map(\.cut))
            pending.integer("held_from_us", t.heldFrom?.microseconds)
            pending.integer("handed_over_us", t.handedOver?.microseconds)
            pending.text("country", t.country)
            pending.text("store", t.store)
            pending.text("product_id", t.productID)
            pending.endRow()
        }
        var trials = make("report_trial_days")
        for (k, v) in rollup.trials {
            trials.beginRow()
            trials.text("entitlement", k.entitlement)
            trials.integer("day_us", k.day)
            trials.integer("started", v.first)
            trials.integer("converted", v.second)
            trials.endRow()
        }
        var runs = make("report_run_days")
        for (k, v) in rollup.runs {
            runs.beginRow()
            runs.text("entitlement", k.entitlement)
            runs.integer("day_us", k.day)
            runs.integer("starts", v.first)
            runs.integer("ends", v.second)
            runs.endRow()
        }
        var churn = make("report_churn_periods")
        for (k, v) in rollup.churn {
            churn.beginRow()
            churn.text("entitlement", k.entitlement)
            churn.text("period_interval", k.interval.rawValue)
            churn.integer("period_us", k.period)
            churn.integer("new", v.new)
            churn.integer("reactivated", v.reactivated)
            churn.integer("churned_refund", v.refund)
            churn.integer("churned_involuntary", v.involuntary)
            churn.integer("churned_voluntary", v.voluntary)
            churn.integer("churned_other", v.other)
            churn.integer("transferred_in", v.transferredIn)
            churn.integer("transferred_out", v.transferredOut)
            churn.endRow()
        }
        var retention = make("report_retention_cells")
        for (k, v) in rollup.retention {
            retention.beginRow()
            retention.text("entitlement", k.entitlement)
            retention.integer("cohort_us", k.cohort)
            retention.integer("month_us", k.month)
            retention.integer("delta", v)
            retention.endRow()
        }
        func mrrRows(_ cells: [ReportRollup.MRRKey: ReportRollup.MRRCell], table: String, period: StaticString) -> E {
            var rows = make(table)
            for (k, v) in cells {
                rows.beginRow()
                rows.text("entitlement", k.entitlement)
                rows.integer(period, k.day)
                rows.text("currency", k.currency)
                rows.wide("denominator", k.denominator)
                rows.wide("started", v.started)
                rows.wide("ended", v.ended)
                rows.endRow()
            }
            return rows
        }
        func paidRows(_ cells: [ReportRollup.CurrencyDayKey: ReportRollup.Counts], table: String, period: StaticString) -> E {
            var rows = make(table)
            for (k, v) in cells {
                rows.beginRow()
                rows.text("entitlement", k.entitlement)
                rows.integer(period, k.day)
                rows.text("currency", k.currency)
                rows.integer("starts", v.first)
                rows.integer("ends", v.second)
                rows.endRow()
            }
            return rows
        }
        let mrr = mrrRows(rollup.mrr, table: "report_mrr_days", period: "day_us")
        let paid = paidRows(rollup.paid, table: "report_paid_days", period: "day_us")
        let mrrHours = mrrRows(rollup.mrrHours, table: "report_mrr_hours", period: "hour_us")
        let paidHours = paidRows(rollup.paidHours, table: "report_paid_hours", period: "hour_us")
        func mrrRateRows(_ cells: [ReportRollup.MRRRateKey: ReportRollup.MRRCell], table: String, period: StaticString) -> E {
            var rows = make(table)
            for (k, v) in cells {
                rows.beginRow()
                rows.text("entitlement", k.entitlement)
                rows.integer(period, k.day)
                rows.text("currency", k.currency)
                rows.integer("occurred_day_us", k.occurredDay)
                rows.wide("denominator", k.denominator)
                rows.wide("started", v.started)
                rows.wide("ended", v.ended)
                rows.endRow()
            }
            return rows
        }
        func paidAnyRows(_ cells: [ReportRollup.DayKey: ReportRollup.Counts], table: String, period: StaticString) -> E {
            var rows = make(table)
            for (k, v) in cells {
                rows.beginRow()
                rows.text("entitlement", k.entitlement)
                rows.integer(period, k.day)
                rows.integer("starts", v.first)
                rows.integer("ends", v.second)
                rows.endRow()
            }
            return rows
        }
        let mrrRates = mrrRateRows(rollup.mrrRates, table: "report_mrr_rate_days", period: "day_us")
        let paidAny = paidAnyRows(rollup.paidAny, table: "report_paid_any_days", period: "day_us")
        let mrrRateHours = mrrRateRows(rollup.mrrRateHours, table: "report_mrr_rate_hours", period: "hour_us")
        let paidAnyHours = paidAnyRows(rollup.paidAnyHours, table: "report_paid_any_hours", period: "hour_us")
        var mrrDimensions = make("report_mrr_dimension_days")
        for (k, v) in rollup.mrrDimensions {
            mrrDimensions.beginRow()
            mrrDimensions.text("entitlement", k.entitlement)
            mrrDimensions.text("dimension", k.dimension.rawValue)
            mrrDimensions.integer("day_us", k.day)
            mrrDimensions.text("currency", k.currency)
            mrrDimensions.text("value", k.value)
            mrrDimensions.wide("denominator", k.denominator)
            mrrDimensions.wide("started", v.started)
            mrrDimensions.wide("ended", v.ended)
            mrrDimensions.endRow()
        }
        var paidDimensions = make("report_paid_dimension_days")
        for (k, v) in rollup.paidDimensions {
            paidDimensions.beginRow()
            paidDimensions.text("entitlement", k.entitlement)
            paidDimensions.text("dimension", k.dimension.rawValue)
            paidDimensions.integer("day_us", k.day)
            paidDimensions.text("currency", k.currency)
            paidDimensions.text("value", k.value)
            paidDimensions.integer("starts", v.first)
            paidDimensions.integer("ends", v.second)
            paidDimensions.endRow()
        }
        func dimensions(_ rows: inout E, _ d: ReportRollup.CellDimensions) {
            rows.text("store", d.store)
            rows.text("country", d.country)
            rows.text("product_id", d.product)
        }
        var refunds = make("report_refund_days")
        for (k, v) in rollup.refundDays {
            refunds.beginRow()
            refunds.text("entitlement", k.entitlement)
            refunds.integer("day_us", k.day)
            refunds.text("currency", k.currency)
            dimensions(&refunds, k.dimensions)
            refunds.integer("refunds", v.refunds)
            refunds.wide("amount", v.amount)
            refunds.integer("refunded_transactions", v.refundedTransactions)
            refunds.integer("paid_transactions", v.paidTransactions)
            refunds.endRow()
        }
        var repeats = make("report_refund_repeats")
        for (k, v) in rollup.refundRepeats {
            repeats.beginRow()
            repeats.text("entitlement", k.entitlement)
            repeats.text("period_interval", k.interval.rawValue)
            repeats.integer("period_us", k.period)
            repeats.text("currency", k.currency)
            dimensions(&repeats, k.dimensions)
            repeats.integer("repeats", v)
            repeats.endRow()
        }
        var conversion = make("report_conversion_days")
        for (k, v) in rollup.conversion {
            conversion.beginRow()
            conversion.text("entitlement", k.entitlement)
            conversion.integer("day_us", k.day)
            dimensions(&conversion, k.dimensions)
            conversion.integer("wait_days", Int64(k.wait ?? -1))
            conversion.integer("subscribers", v)
            conversion.endRow()
        }
        var holders = make("report_conversion_holders")
        for (k, v) in rollup.conversionHolders {
            holders.beginRow()
            holders.text("entitlement", k.entitlement)
            holders.integer("day_us", k.day)
            dimensions(&holders, k.dimensions)
            holders.text("held", k.held)
            holders.integer("wait_days", Int64(k.wait ?? -1))
            holders.integer("subscribers", v)
            holders.endRow()
        }
        var ltv = make("report_ltv_cells")
        for (k, v) in rollup.ltv {
            ltv.beginRow()
            ltv.text("entitlement", k.entitlement)
            ltv.integer("cohort_us", k.cohort)
            ltv.text("currency", k.currency)
            dimensions(&ltv, k.dimensions)
            ltv.integer("month_us", k.month)
            ltv.integer("members", v.members)
            ltv.wide("gross", v.gross)
            ltv.wide("proceeds", v.proceeds)
            ltv.endRow()
        }
        var movement = make("report_mrr_movement")
        for (k, v) in rollup.movement {
            movement.beginRow()
            movement.text("entitlement", k.entitlement)
            movement.text("dimension", k.dimension)
            movement.text("period_interval", k.interval.rawValue)
            movement.integer("period_us", k.period)
            movement.text("value", k.value)
            movement.text("currency", k.currency)
            movement.integer("part", Int64(k.part.rawValue))
            movement.wide("denominator", k.denominator)
            movement.wide("amount", v)
            movement.endRow()
        }
        var revenueDimensions = make("report_revenue_month_dims")
        for (k, v) in rollup.revenueDimensions {
            revenueDimensions.beginRow()
            revenueDimensions.text("entitlement", k.entitlement)
            revenueDimensions.integer("month_us", k.period)
            revenueDimensions.text("currency", k.currency)
            dimensions(&revenueDimensions, k.dimensions)
            revenueDimensions.integer("transactions", v.transactions)
            revenueDimensions.wide("billings", v.figures.billings)
            revenueDimensions.wide("tax", v.figures.tax)
            revenueDimensions.wide("commission", v.figures.commission)
            revenueDimensions.wide("refunds", v.figures.refunds)
            revenueDimensions.wide("refunded_unrecognized", v.figures.refundedUnrecognized)
            revenueDimensions.wide("refunds_recognized", v.figures.refundsRecognized)
            revenueDimensions.wide("recognized", v.figures.recognized)
            revenueDimensions.wide("settled_deferred", v.settledDeferred)
            revenueDimensions.wide("handover", v.figures.handover)
            revenueDimensions.endRow()
        }
        var trialDimensions = make("report_trial_day_dims")
        for (k, v) in rollup.trialDimensions {
            trialDimensions.beginRow()
            trialDimensions.text("entitlement", k.entitlement)
            trialDimensions.integer("day_us", k.day)
            dimensions(&trialDimensions, k.dimensions)
            trialDimensions.integer("started", v.first)
            trialDimensions.integer("converted", v.second)
            trialDimensions.endRow()
        }
        func churnScope(_ rows: inout E, _ k: ReportRollup.ChurnDimensionKey) {
            rows.text("entitlement", k.entitlement)
            rows.text("grants", k.grants)
            dimensions(&rows, k.dimensions)
        }
        var churnActive = make("report_churn_active_days")
        for (k, v) in rollup.churnActiveDays {
            churnActive.beginRow()
            churnScope(&churnActive, k.scope)
            churnActive.integer("day_us", k.day)
            churnActive.integer("starts", v.first)
            churnActive.integer("ends", v.second)
            churnActive.endRow()
        }
        var churnMoves = make("report_churn_moves")
        for (k, v) in rollup.churnMoves {
            churnMoves.beginRow()
            churnScope(&churnMoves, k.scope)
            churnMoves.text("period_interval", k.interval.rawValue)
            churnMoves.integer("period_us", k.period)
            churnMoves.integer("new", v.new)
            churnMoves.integer("reactivated", v.reactivated)
            churnMoves.integer("churned_refund", v.refund)
            churnMoves.integer("churned_involuntary", v.involuntary)
            churnMoves.integer("churned_voluntary", v.voluntary)
            churnMoves.integer("churned_other", v.other)
            churnMoves.integer("transferred_in", v.transferredIn)
            churnMoves.integer("transferred_out", v.transferredOut)
            churnMoves.endRow()
        }
        return [
            revenue, trials, runs, churn, retention, mrr, paid, revenueDays, pending, mrrHours, paidHours, refunds, repeats, conversion, ltv,
            movement, revenueDimensions, trialDimensions, churnActive, churnMoves, mrrRates, paidAny,
            mrrDimensions, paidDimensions, holders, mrrRateHours, paidAnyHours,
        ]
    }
}

/// Where rollup cells go: JSON arrays (`JSONRows`) or binary COPY rows (`BinaryRows`).
protocol RollupRowEncoder {
    mutating func beginRow()
    mutating func endRow()
    mutating func text(_ name: StaticString, _ value: String?)
    mutating func integer(_ name: StaticString, _ value: Int64?)
    mutating func wide(_ name: StaticString, _ value: Int128)
    mutating func uuid(_ name: StaticString, _ value: UUID?)
    mutating func textArray(_ name: StaticString, _ values: [String])
    mutating func integerArray(_ name: StaticString, _ values: [Int64])
    mutating func boolArray(_ name: StaticString, _ values: [Bool])
}

extension BinaryRows: RollupRowEncoder {}

extension JSONRows: RollupRowEncoder {
    mutating func text(_ name: StaticString, _ value: String?) { member(name, value.map(JSONValue.string) ?? .null) }
    mutating func uuid(_ name: StaticString, _ value: UUID?) { text(name, value?.lowercasedString) }
    mutating func textArray(_ name: StaticString, _ values: [String]) { member(name, .array(values.map(JSONValue.string))) }
    mutating func integerArray(_ name: StaticString, _ values: [Int64]) {
        member(name, .array(values.map { .number(JSONNumber($0)) }))
    }
    mutating func boolArray(_ name: StaticString, _ values: [Bool]) { member(name, .array(values.map(JSONValue.bool))) }

    /// A 128-bit figure: 64-bit numbers take the fast integer path (printing an `Int128` divides in 128 bits).
    mutating func wide(_ name: StaticString, _ value: Int128) {
        if let small = Int64(exactly: value) {
            integer(name, small)
        } else {
            member(name, .string(String(value)))
        }
    }
}
