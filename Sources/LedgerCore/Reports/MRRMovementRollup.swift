/// MRR movement kept as rollups (docs/reports.md, "Reports II from rollups"): per interval (day, week, month),
/// period, entitlement key, group and currency, the exact monthly amounts each part of the movement adds or takes
/// away, and how many subscribers made it.
///
/// A subscriber's MRR can differ between a period's two ends only if one of their services starts or ends inside
/// it, so a subscriber writes cells only for those periods, classified exactly as `MRRMovementAccumulator`
/// classifies them. The parts telescope: on the day grid, a group's adds less its subtractions before midnight `a`
/// are its exact MRR just before `a`, and its new, reactivated and transferred-in subscribers less the churned and
/// transferred-out ones are the subscribers holding MRR then. So a report needs the day cells before its start
/// (the level) and its own grid's cells within its span, whatever the ledger's size.
///
/// Groups: every transaction of the key (`dimension` `""`), and for the key over all entitlements also each store,
/// country and product (`""` where unknown). Classification is per group, so a filter of several values, or of two
/// dimensions, is not a sum of cells: those reports read the facts.
extension ReportRollup {
    public struct MovementKey: Sendable, Hashable {
        public var interval: ReportInterval
        public var period: Int64
        public var entitlement: String
        /// `""`, or the dimension (`store`, `country`, `product_id`) whose `value` the group is.
        public var dimension: String
        public var value: String
        public var currency: String
        public var part: MRRMovementFigures.Part
        /// The monthly amounts' denominator (the cell holds their numerators' sum); 0 for the row counting the
        /// subscribers of the part.
        public var denominator: Int128
    }

    /// The groups of the dimensions MRR movement keeps (for the key over all entitlements) a transaction is in.
    static func movementGroups(_ t: RevenueTransaction) -> [(dimension: String, value: String)] {
        [
            (ReportDimension.store.rawValue, t.store), (ReportDimension.country.rawValue, t.country ?? ""),
            (ReportDimension.productID.rawValue, t.productID),
        ]
    }

    /// Exact monthly amounts by denominator, and how many services make them.
    struct ExactMRR: Equatable {
        var byDenominator: [Int128: Int128] = [:]
        var services = 0

        mutating func add(_ a: MonthlyAmount, sign: Int) {
            byDenominator[a.denominator, default: 0] &+= sign < 0 ? 0 &- a.numerator : a.numerator
            services += sign
        }

        /// −1, 0 or 1 as `self` is below, equal to or above `other`.
        func compare(_ other: ExactMRR) -> Int {
            var difference = FractionSum()
            do {
                for (d, n) in byDenominator { try difference.add(MonthlyAmount(numerator: n, denominator: d)) }
                for (d, n) in other.byDenominator { try difference.add(MonthlyAmount(numerator: 0 &- n, denominator: d)) }
                let n = try difference.total().numerator
                return n < 0 ? -1 : n > 0 ? 1 : 0
            } catch {
                // Beyond 128 bits (hundreds of incompatible denominators): by the nearest doubles.
                func value(_ m: ExactMRR) -> Double { m.byDenominator.reduce(0) { $0 + Double($1.value) / Double($1.key) } }
                let (a, b) = (value(self), value(other))
                return a < b ? -1 : a > b ? 1 : 0
            }
        }
    }

    /// The subscriber's MRR movement cells, added `sign` times into `cells`.
    ///
    /// Groups that hold the same transactions and runs classify the same way (a subscriber who stays in one store,
    /// country and product has four identical groups over all entitlements), so each distinct group is classified
    /// once and its cells written under every group it stands for.
    static func addMovement(_ facts: SubscriberFacts, sign: Int128, into cells: inout [MovementKey: Int128]) {
        struct Group: Hashable {
            var key: String
            var dimension: String
            var value: String
        }
        struct RunShape: Hashable {
            var start: Timestamp
            var end: Timestamp?
            var lapse: LapseReason?
            var transferredIn: Bool
        }
        struct Signature: Hashable {
            var transactions: [Int]
            var runs: [RunShape]
        }
        struct Cell {
            var interval: ReportInterval
            var period: Int64
            var currency: String
            var part: MRRMovementFigures.Part
            var denominator: Int128
            var value: Int128
        }
        var groups: [Group: [Int]] = [:]
        for (i, t) in facts.transactions.enumerated() where t.monthly != nil {
            for key in keys(t) { groups[Group(key: key, dimension: "", value: ""), default: []].append(i) }
            for d in movementGroups(t) { groups[Group(key: "", dimension: d.dimension, value: d.value), default: []].append(i) }
        }
        guard !groups.isEmpty else { return }
        let runsByKey = Dictionary(grouping: facts.runs, by: \.entitlement)
        let shapes = runsByKey.mapValues { $0.map { RunShape(start: $0.start, end: $0.end, lapse: $0.lapse, transferredIn: $0.transferredIn) } }
        var classified: [Signature: [Cell]] = [:]
        for (g, indices) in groups {
            let signature = Signature(transactions: indices, runs: shapes[g.key] ?? [])
            let list: [Cell]
            if let known = classified[signature] {
                list = known
            } else {
                list = classify(indices.map { facts.transactions[$0] }, runs: runsByKey[g.key] ?? [])
                classified[signature] = list
            }
            for c in list {
                let k = MovementKey(
                    interval: c.interval, period: c.period, entitlement: g.key, dimension: g.dimension, value: g.value, currency: c.currency,
                    part: c.part, denominator: c.denominator)
                cells[k, default: 0] &+= sign &* c.value
            }
        }

        /// One group's cells: its services' MRR per currency just before each end of the periods where a service
        /// starts or ends, classified as `MRRMovementAccumulator` classifies it.
        func classify(_ list: [RevenueTransaction], runs: [PaidRun]) -> [Cell] {
            var cells: [Cell] = []
            let first = runs.first?.start ?? list.map(\.serviceStart).min()!
            // Service starts (+1) and ends (−1): MRR just before `b` holds the services with `start < b <= end`.
            var changes: [(at: Timestamp, sign: Int, currency: String, monthly: MonthlyAmount)] = []
            for t in list {
                let start = t.serviceStart
                if let end = t.serviceEnd, end <= start { continue }
                changes.append((start, 1, t.currency, t.monthly!))
                if let end = t.serviceEnd { changes.append((end, -1, t.currency, t.monthly!)) }
            }
            changes.sort { $0.at < $1.at }
            for interval in ReportInterval.allCases {
                var periods: [Timestamp] = []
                for c in changes {
                    let p = interval.periodStart(containing: c.at)
                    if periods.last != p { periods.append(p) }
                }
                // One sweep over the periods' ends in order: the MRR per currency just before each.
                var state: [String: ExactMRR] = [:]
                var next = 0
                func advance(to b: Timestamp) -> [String: ExactMRR] {
                    while next < changes.count, changes[next].at < b {
                        let c = changes[next]
                        state[c.currency, default: ExactMRR()].add(c.monthly, sign: c.sign)
                        if state[c.currency]!.services == 0 { state[c.currency] = nil }
                        next += 1
                    }
                    return state
                }
                var previous: (end: Timestamp, state: [String: ExactMRR])?
                for a in periods {
                    let b = interval.next(after: a)
                    // Periods are sorted and distinct, so `a` is at or after the previous period's end.
                    let before = previous.map { $0.end == a } == true ? previous!.state : advance(to: a)
                    let after = advance(to: b)
                    previous = (b, after)
                    for currency in Set(before.keys).union(after.keys) {
                        func add(_ part: MRRMovementFigures.Part, _ m: ExactMRR, sign: Int128 = 1) {
                            for (d, n) in m.byDenominator {
                                cells.append(
                                    Cell(interval: interval, period: a.microseconds, currency: currency, part: part, denominator: d, value: sign &* n)
                                )
                            }
                        }
                        func count(_ part: MRRMovementFigures.Part) {
                            cells.append(Cell(interval: interval, period: a.microseconds, currency: currency, part: part, denominator: 0, value: 1))
                        }
                        switch (before[currency], after[currency]) {
                        case (let x?, let y?):
                            let order = y.compare(x)
                            guard order != 0 else { continue }
                            let part: MRRMovementFigures.Part = order > 0 ? .expansion : .contraction
                            add(part, y, sign: Int128(order))
                            add(part, x, sign: Int128(-order))
                            count(part)
                        case (let x?, nil):
                            let last = lastRunEnded(in: runs, from: a, before: b).map { runs[$0] }
                            let part: MRRMovementFigures.Part = last?.lapse == .transferred ? .transferredOut : .churned
                            add(part, x)
                            count(part)
                        case (nil, let y?):
                            let part: MRRMovementFigures.Part =
                                runActive(justBefore: b, in: runs)?.transferredIn == true ? .transferredIn : first >= a ? .new : .reactivation
                            add(part, y)
                            count(part)
                        case (nil, nil): continue
                        }
                    }
                }
            }
            return cells
        }
    }

    /// MRR movement over a calendar grid from the cells: `level`, the day cells before the first boundary summed
    /// with their sign (adds positive, subtractions negative) per currency, group and denominator (0: the
    /// subscribers), and `cells`, the grid's own cells within the span. The same rows `MRRMovementAccumulator`
    /// gives from the facts, per group.
    public static func movementPeriods(
        boundaries: [Timestamp], grouped: Bool, level: [(currency: String, group: String?, denominator: Int128, value: Int128)],
        cells: [(period: Int64, currency: String, group: String?, part: MRRMovementFigures.Part, denominator: Int128, value: Int128)]
    ) throws -> [(group: String?, period: MRRMovementPeriod)] {
        guard boundaries.count > 1 else { return [] }
        struct Line: Hashable {
            var group: String?
            var currency: String
        }
        struct Parts {
            var amounts = Array(repeating: FractionSum(), count: MRRMovementFigures.Part.allCases.count)
            var counts = Array(repeating: Int128(0), count: MRRMovementFigures.Part.allCases.count)
        }
        var start: [Line: (sum: FractionSum, count: Int128)] = [:]
        for (currency, group, d, v) in level {
            let line = Line(group: group, currency: currency)
            var s = start[line] ?? (FractionSum(), 0)
            if d == 0 { s.count &+= v } else { try s.sum.add(MonthlyAmount(numerator: v, denominator: d)) }
            start[line] = s
        }
        var moves: [Line: [Int: Parts]] = [:]
        for (period, currency, group, part, d, v) in cells {
            guard let i = boundaries.period(containing: Timestamp(microseconds: period)) else { continue }
            let line = Line(group: group, currency: currency)
            var p = moves[line]?[i] ?? Parts()
            if d == 0 { p.counts[part.rawValue] &+= v } else { try p.amounts[part.rawValue].add(MonthlyAmount(numerator: v, denominator: d)) }
            moves[line, default: [:]][i] = p
        }
        var rows: [Line: [MRRMovementPeriod]] = [:]
        for line in Set(start.keys).union(moves.keys) {
            var (x, subscribers) = start[line] ?? (FractionSum(), 0)
            var seen = subscribers != 0
            var list: [MRRMovementPeriod] = []
            for i in 0..<(boundaries.count - 1) {
                let p = moves[line]?[i] ?? Parts()
                var f = MRRMovementFigures()
                var previous = try x.total().rounded
                f.amounts[MRRMovementFigures.Part.start.rawValue] = previous
                f.subscribers[MRRMovementFigures.Part.start.rawValue] = Int(truncatingIfNeeded: subscribers)
                for part in MRRMovementFigures.Part.allCases.dropFirst() {
                    try x.add(part.adds ? p.amounts[part.rawValue] : p.amounts[part.rawValue].negated)
                    let now = try x.total().rounded
                    f.amounts[part.rawValue] = part.adds ? now - previous : previous - now
                    previous = now
                    f.subscribers[part.rawValue] = Int(truncatingIfNeeded: p.counts[part.rawValue])
                    if part != .expansion && part != .contraction {
                        subscribers = part.adds ? subscribers &+ p.counts[part.rawValue] : subscribers &- p.counts[part.rawValue]
                    }
                }
                f.mrrEnd = previous
                f.subscribersEnd = Int(truncatingIfNeeded: subscribers)
                seen = seen || subscribers != 0
                list.append(MRRMovementPeriod(start: boundaries[i], end: boundaries[i + 1], currency: line.currency, figures: f))
            }
            if seen { rows[line] = list }
        }
        let groups: [String?] = grouped ? Set(rows.keys.map(\.group)).sorted(by: ReportDimensions.groupOrder) : [nil]
        var result: [(group: String?, period: MRRMovementPeriod)] = []
        for g in groups {
            let currencies = rows.keys.filter { $0.group == g }.map(\.currency).sorted()
            for i in 0..<(boundaries.count - 1) {
                for c in currencies { result.append((g, rows[Line(group: g, currency: c)]![i])) }
            }
        }
        return result
    }
}

extension FractionSum {
    /// The sum with every part's sign changed.
    var negated: FractionSum {
        var n = FractionSum()
        n.byDenominator = byDenominator.mapValues { 0 &- $0 }
        return n
    }
}
