/// One period of the churn report (docs/semantics.md section 5).
public struct ChurnPeriod: Sendable, Hashable {
    public var start: Timestamp
    public var end: Timestamp
    public var activeStart = 0
    public var new = 0
    public var reactivated = 0
    /// Churned subscribers per reason (never `.transferred`: those are `transferredOut`).
    public var churned: [LapseReason: Int] = [:]
    /// Runs begun by a purchase moving in, and ended by one moving out: not new, not churn (docs/identity.md).
    public var transferredIn = 0
    public var transferredOut = 0
    public var activeEnd = 0

    public init(start: Timestamp, end: Timestamp) {
        self.start = start
        self.end = end
    }

    public var churnedTotal: Int { churned.values.reduce(0, +) }
    /// `churned / active_start`, nil when nobody was active at the start.
    public var churnRate: Double? { activeStart == 0 ? nil : Double(churnedTotal) / Double(activeStart) }
}

/// Counts churn one subscriber at a time, so a report streams runs and never holds the ledger.
public struct ChurnAccumulator: Sendable {
    public private(set) var periods: [ChurnPeriod]
    let boundaries: [Timestamp]

    public init(boundaries: [Timestamp]) {
        self.boundaries = boundaries
        periods = zip(boundaries, boundaries.dropFirst()).map { ChurnPeriod(start: $0, end: $1) }
    }

    /// Adds one subscriber's runs for the report's entitlement key; `firstStart` is the start of their
    /// first-ever paid run (runs given may be only those near the report's range).
    public mutating func add(runs: [PaidRun], firstStart: Timestamp) {
        guard !runs.isEmpty, !periods.isEmpty else { return }
        var before = runs.contains { $0.isActive(justBefore: boundaries[0]) }
        for i in periods.indices {
            let (a, b) = (boundaries[i], boundaries[i + 1])
            let after = runs.contains { $0.isActive(justBefore: b) }
            if before { periods[i].activeStart += 1 }
            if after { periods[i].activeEnd += 1 }
            if before && !after {
                let last = runs.filter { r in r.end.map { $0 >= a && $0 < b } ?? false }.max { $0.end! < $1.end! }
                if last?.lapse == .transferred {
                    periods[i].transferredOut += 1
                } else {
                    periods[i].churned[last?.lapse ?? .other, default: 0] += 1
                }
            } else if !before && after {
                if ReportRollup.runActive(justBefore: b, in: runs)?.transferredIn == true {
                    periods[i].transferredIn += 1
                } else if firstStart >= a {
                    periods[i].new += 1
                } else {
                    periods[i].reactivated += 1
                }
            }
            before = after
        }
    }
}
