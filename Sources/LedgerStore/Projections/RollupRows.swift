import LedgerCore

/// The report rollups' cells as JSON arrays named like their tables (schema 0014), for
/// `subledger_rollup_add` and the rebuild's shadow tables. Figures that may exceed 64 bits are written as
/// JSON numbers when they fit in 64 bits and as strings otherwise; `numeric`'s input reads both exactly.
enum RollupRows {
    /// The rollup tables, in the order the rebuild writes them.
    static let tables = [
        "report_revenue_months", "report_trial_days", "report_run_days", "report_churn_periods", "report_retention_cells",
        "report_mrr_days", "report_paid_days",
    ]

    static func json(_ rollup: ReportRollup) -> String {
        var revenue = JSONRows()
        for (k, v) in rollup.revenue {
            revenue.beginRow()
            revenue.member("entitlement", .string(k.entitlement))
            revenue.integer("month_us", k.month)
            revenue.member("currency", .string(k.currency))
            revenue.integer("transactions", v.transactions)
            revenue.wide("billings", v.figures.billings)
            revenue.wide("commission", v.figures.commission)
            revenue.wide("refunds", v.figures.refunds)
            revenue.wide("refunded_unrecognized", v.figures.refundedUnrecognized)
            revenue.wide("refunds_recognized", v.figures.refundsRecognized)
            revenue.wide("recognized", v.figures.recognized)
            revenue.wide("settled_deferred", v.settledDeferred)
            revenue.endRow()
        }
        var trials = JSONRows()
        for (k, v) in rollup.trials {
            trials.beginRow()
            trials.member("entitlement", .string(k.entitlement))
            trials.integer("day_us", k.day)
            trials.integer("started", v.first)
            trials.integer("converted", v.second)
            trials.endRow()
        }
        var runs = JSONRows()
        for (k, v) in rollup.runs {
            runs.beginRow()
            runs.member("entitlement", .string(k.entitlement))
            runs.integer("day_us", k.day)
            runs.integer("starts", v.first)
            runs.integer("ends", v.second)
            runs.endRow()
        }
        var churn = JSONRows()
        for (k, v) in rollup.churn {
            churn.beginRow()
            churn.member("entitlement", .string(k.entitlement))
            churn.member("period_interval", .string(k.interval.rawValue))
            churn.integer("period_us", k.period)
            churn.integer("new", v.new)
            churn.integer("reactivated", v.reactivated)
            churn.integer("churned_refund", v.refund)
            churn.integer("churned_involuntary", v.involuntary)
            churn.integer("churned_voluntary", v.voluntary)
            churn.integer("churned_other", v.other)
            churn.endRow()
        }
        var retention = JSONRows()
        for (k, v) in rollup.retention {
            retention.beginRow()
            retention.member("entitlement", .string(k.entitlement))
            retention.integer("cohort_us", k.cohort)
            retention.integer("month_us", k.month)
            retention.integer("delta", v)
            retention.endRow()
        }
        var mrr = JSONRows()
        for (k, v) in rollup.mrr {
            mrr.beginRow()
            mrr.member("entitlement", .string(k.entitlement))
            mrr.integer("day_us", k.day)
            mrr.member("currency", .string(k.currency))
            mrr.wide("denominator", k.denominator)
            mrr.wide("started", v.started)
            mrr.wide("ended", v.ended)
            mrr.endRow()
        }
        var paid = JSONRows()
        for (k, v) in rollup.paid {
            paid.beginRow()
            paid.member("entitlement", .string(k.entitlement))
            paid.integer("day_us", k.day)
            paid.member("currency", .string(k.currency))
            paid.integer("starts", v.first)
            paid.integer("ends", v.second)
            paid.endRow()
        }
        let parts = zip(tables, [revenue, trials, runs, churn, retention, mrr, paid]).map { "\"\($0)\":\($1.text)" }
        return "{" + parts.joined(separator: ",") + "}"
    }
}

extension JSONRows {
    /// A 128-bit figure: 64-bit numbers take the fast integer path (printing an `Int128` divides in 128 bits).
    mutating func wide(_ name: StaticString, _ value: Int128) {
        if let small = Int64(exactly: value) {
            integer(name, small)
        } else {
            member(name, .string(String(value)))
        }
    }
}
