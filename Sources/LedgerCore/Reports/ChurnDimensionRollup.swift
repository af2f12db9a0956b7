/// Churn by store, country and product kept as rollups (docs/reports.md, "Reports II from rollups"): a subscriber
/// counted at an instant takes the dimensions of the transaction covering it there (`GroupedChurnAccumulator`'s
/// rules), so each count is in exactly one store, country and product, and the cells carry all three: any filter or
/// grouping on them is a sum over cells.
///
/// Two families, per run key (`entitlement`: the runs over all entitlements, `""`, or one entitlement's runs for
/// grouping by entitlement) and `grants` (for the runs over all entitlements: `""`, or an entitlement the covering
/// transaction grants, which `entitlement=` filters on):
/// - active spans per day: a run split where the covering transaction changes, each piece `(x, y]` a start on the
///   day of `x` and an end on the day of `y`; active just before midnight `b` is the starts before `b` less the ends;
/// - transitions per grid period (day, week, month): new, reactivated, churned by reason, transferred in and out,
///   each with the dimensions the accumulator gives it.
extension ReportRollup {
    public struct ChurnDimensionKey: Sendable, Hashable {
        public var entitlement: String
        public var grants: String
        public var dimensions: CellDimensions
    }

    public struct ActiveDayKey: Sendable, Hashable {
        public var day: Int64
        public var scope: ChurnDimensionKey
    }

    public struct ChurnMoveKey: Sendable, Hashable {
        public var interval: ReportInterval
        public var period: Int64
        public var scope: ChurnDimensionKey
    }

    /// The services overlapping each run, as the churn facts read them: transactions (granting the run's key, unless
    /// it is `""`) whose service overlaps the run. Runs are disjoint and sorted, so each transaction finds its first
    /// run by binary search: linear in the transactions and the overlaps.
    static func runServices(_ runs: [PaidRun], _ transactions: [RevenueTransaction]) -> [[RevenueTransaction]] {
        var result = Array(repeating: [RevenueTransaction](), count: runs.count)
        let key = runs.first?.entitlement ?? ""
        for t in transactions where key.isEmpty || t.entitlements.contains(key) {
            let (s, e) = (t.serviceStart, t.serviceEnd ?? .init(microseconds: .max))
            var (lo, hi) = (0, runs.count)
            while lo < hi {
                let mid = (lo + hi) / 2
                if let end = runs[mid].end, end <= s { lo = mid + 1 } else { hi = mid }
            }
            while lo < runs.count, runs[lo].start < e {
                result[lo].append(t)
                lo += 1
            }
        }
        return result
    }

    /// `RunDimensions.service`: of a run's services, the one whose service started last before `t` (else the first).
    static func covering(_ services: [RevenueTransaction], before t: Timestamp) -> RevenueTransaction? {
        services.filter { $0.serviceStart < t }.max { $0.serviceStart < $1.serviceStart } ?? services.min { $0.serviceStart < $1.serviceStart }
    }

    /// The scopes a count through transaction `t` (nil: none known) is kept under.
    static func churnScopes(key: String, _ t: RevenueTransaction?) -> [ChurnDimensionKey] {
        guard let t else { return [ChurnDimensionKey(entitlement: key, grants: "", dimensions: .unknown)] }
        let dimensions = CellDimensions(t)
        var scopes = [ChurnDimensionKey(entitlement: key, grants: "", dimensions: dimensions)]
        if key.isEmpty {
            for e in Set(t.entitlements).sorted() where !e.isEmpty {
                scopes.append(ChurnDimensionKey(entitlement: key, grants: e, dimensions: dimensions))
            }
        }
        return scopes
    }

    /// The subscriber's churn cells by dimension (active spans per day, transitions per grid period), added `sign`
    /// times into `active` and `moves`.
    static func addChurnDimensions(
        _ facts: SubscriberFacts, sign: Int64, active: inout [ActiveDayKey: Counts], moves: inout [ChurnMoveKey: ChurnCell]
    ) {
        for (key, runs) in Dictionary(grouping: facts.runs, by: \.entitlement) {
            guard let firstStart = runs.first?.start else { continue }
            let services = runServices(runs, facts.transactions)
            for (i, run) in runs.enumerated() {
                // Pieces of the run between the starts of its services; each piece's covering transaction is the one
                // whose service started last before the piece's end (of equal starts the first, as `covering`).
                let sorted = services[i].enumerated().sorted { ($0.element.serviceStart, $0.offset) < ($1.element.serviceStart, $1.offset) }
                    .map(\.element)
                var points = [run.start]
                for t in sorted where t.serviceStart > run.start && (run.end.map { t.serviceStart < $0 } ?? true) {
                    if t.serviceStart != points.last { points.append(t.serviceStart) }
                }
                var (last, group) = (-1, 0)
                for (j, x) in points.enumerated() {
                    let y = j + 1 < points.count ? points[j + 1] : run.end
                    while last + 1 < sorted.count, sorted[last + 1].serviceStart < y ?? .init(microseconds: .max) {
                        last += 1
                        if last == 0 || sorted[last].serviceStart != sorted[last - 1].serviceStart { group = last }
                    }
                    let t = last >= 0 ? sorted[group] : sorted.first
                    for scope in churnScopes(key: key, t) {
                        active[ActiveDayKey(day: dayStart(x), scope: scope), default: .init()].first &+= sign
                        if let y { active[ActiveDayKey(day: dayStart(y), scope: scope), default: .init()].second &+= sign }
                    }
                }
            }
            for interval in ReportInterval.allCases {
                var periods = Set<Timestamp>()
                for run in runs {
                    periods.insert(interval.periodStart(containing: run.start))
                    if let end = run.end { periods.insert(interval.periodStart(containing: end)) }
                }
                for a in periods {
                    let b = interval.next(after: a)
                    let before = activeRun(justBefore: a, in: runs)
                    let after = activeRun(justBefore: b, in: runs)
                    if let before, after == nil {
                        let ended = lastRunEnded(in: runs, from: a, before: b)
                        let lapse = ended.flatMap { runs[$0].lapse }
                        let t = ended.map { covering(services[$0], before: runs[$0].end!) } ?? covering(services[before], before: a)
                        for scope in churnScopes(key: key, t) {
                            moves[ChurnMoveKey(interval: interval, period: a.microseconds, scope: scope), default: .init()]
                                .count(lapse ?? .other, sign: sign)
                        }
                    } else if before == nil, let r = after {
                        for scope in churnScopes(key: key, covering(services[r], before: b)) {
                            let k = ChurnMoveKey(interval: interval, period: a.microseconds, scope: scope)
                            if runs[r].transferredIn {
                                moves[k, default: .init()].transferredIn &+= sign
                            } else if firstStart >= a {
                                moves[k, default: .init()].new &+= sign
                            } else {
                                moves[k, default: .init()].reactivated &+= sign
                            }
                        }
                    }
                }
            }
        }
    }

    /// Adds (sign 1) or takes off (−1) the subscriber's churn cells by dimension.
    mutating func addChurnDimensions(_ facts: SubscriberFacts, sign: Int64) {
        Self.addChurnDimensions(facts, sign: sign, active: &churnActiveDays, moves: &churnMoves)
    }
}
