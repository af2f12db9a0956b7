import LedgerCore

/// Feeding the dimension reports' run accumulators (churn, retention) from a subscriber's facts, as
/// `ReportStore` feeds them from the tables.
public enum RunServices {
    /// The transactions overlapping each run, their service start as `start` (how the dimension reports read
    /// them from PostgreSQL).
    public static func of(_ facts: SubscriberFacts, _ runs: [PaidRun]) -> [[RevenueTransaction]] {
        runs.map { run in
            facts.transactions.filter { t in
                (t.serviceEnd ?? .maximum) > run.start && t.serviceStart < (run.end ?? .maximum)
                    && (run.entitlement.isEmpty || t.entitlements.contains(run.entitlement))
            }.map { t in
                var s = t
                s.start = t.serviceStart
                return s
            }
        }
    }
}
