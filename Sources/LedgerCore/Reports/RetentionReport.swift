/// One cohort row: subscribers whose first paid run started in the month, and how many were still
/// paid-active just before each later month boundary.
public struct RetentionCohort: Sendable, Hashable {
    public var start: Timestamp
    public var size = 0
    /// `retained[k]`: paid-active just before `start + k months`; `retained[0]` is the cohort size.
    public var retained: [Int]

    public func ratio(_ k: Int) -> Double? { size == 0 ? nil : Double(retained[k]) / Double(size) }
}

/// Builds the cohort table one subscriber at a time.
public struct RetentionAccumulator: Sendable {
    public internal(set) var cohorts: [RetentionCohort]
    let until: Timestamp

    /// Cohorts are the months in `[from, to)`; month k of a cohort is shown when `start + k months <= until`
    /// (later cells are not known yet).
    public init(from: Timestamp, to: Timestamp, until: Timestamp) {
        self.until = until
        cohorts = []
        for start in ReportCalendar.boundaries(from: from, to: to, interval: .month).dropLast() {
            var months = 1
            while ReportCalendar.addingMonths(months, to: start) <= until { months += 1 }
            cohorts.append(RetentionCohort(start: start, retained: Array(repeating: 0, count: months)))
        }
    }

    /// Adds one subscriber: `runs` are all of their paid runs for the report's key, sorted by start.
    public mutating func add(runs: [PaidRun]) {
        guard let first = runs.first?.start else { return }
        let month = ReportCalendar.monthStart(first)
        guard let c = cohorts.firstIndex(where: { $0.start == month }) else { return }
        cohorts[c].size += 1
        cohorts[c].retained[0] += 1
        for k in cohorts[c].retained.indices.dropFirst() {
            let t = ReportCalendar.addingMonths(k, to: month)
            if runs.contains(where: { $0.isActive(justBefore: t) }) { cohorts[c].retained[k] += 1 }
        }
    }
}
