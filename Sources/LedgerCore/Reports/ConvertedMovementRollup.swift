/// MRR movement in one reporting currency, as cells per conversion factor (schema 0039, docs/reports.md "MRR
/// movement in a reporting currency from cells").
///
/// `MRRMovementAccumulator` converting rounds once per period and conversion factor (a currency and the rate of the
/// date its transactions occurred), and classifies a subscriber by their converted MRR, so neither the movement
/// cells in the transactions' own currencies nor one sum per period can give it. But its sums per factor are sums
/// over subscribers: these cells keep, per interval, period, key, group and factor, the exact monthly amounts (in
/// the transactions' own minor units, per denominator) each part adds or takes away, classified as the accumulator
/// classifies them at this rate version. A report sums the day cells before its start per factor (the exact MRR of
/// each factor just before it), then rounds per period and factor exactly as the accumulator does.
///
/// Rows with `factor` `.none` count: the subscribers making a part (denominator 0), and (part `.start`) the
/// services of a group lying within one period, which make the group appear in a grouped report though they cover
/// no boundary.
public struct ConvertedMovementRollup: Sendable {
    public struct Key: Sendable, Hashable {
        public var interval: ReportInterval
        public var period: Int64
        public var entitlement: String
        /// `""`, or the dimension (`store`, `country`, `product_id`) whose `value` the group is (key `""` only).
        public var dimension: String
        public var value: String
        public var factor: FXFactor
        public var part: MRRMovementFigures.Part
        /// The amounts' denominator (the cell holds the numerators' sum); 0 for counts.
        public var denominator: Int128
    }

    /// A service whose currency has no rate on its date, by the span it touches: a report overlapping it reads the
    /// facts (which refuse with the currency and date).
    public struct MissingKey: Sendable, Hashable {
        public var currency: String
        public var start: Int64
        /// `Int64.max` for a service without an end.
        public var end: Int64
    }

    public var cells: [Key: Int128] = [:]
    public var missing: [MissingKey: Int64] = [:]

    /// The grids kept: days (whose cells before a report's start are its level) and months. Per factor, a period's
    /// cells are as many as the distinct rate dates of the services starting or ending in it, which a month holds
    /// thirty times more of than a day; weeks, and groups by store, country and product, would multiply them again
    /// (measured: docs/reports.md), so those reports read the facts.
    public static let intervals: [ReportInterval] = [.day, .month]

    public init() {}

    /// Adds (sign 1) or takes off (−1) a subscriber's cells, converted with `rates`.
    public mutating func add(_ facts: SubscriberFacts, sign: Int128, rates: inout ReportingCurrency) throws(ReportOverflow) {
        struct Group: Hashable {
            var key: String
            var dimension: String
            var value: String
        }
        var factors: [Int: FXFactor] = [:]
        var groups: [Group: [Int]] = [:]
        for (i, t) in facts.transactions.enumerated() where t.monthly != nil {
            do {
                factors[i] = try rates.factor(from: t.currency, occurred: t.occurredAt)
            } catch {
                let key = MissingKey(currency: t.currency, start: t.serviceStart.microseconds, end: t.serviceEnd?.microseconds ?? Int64.max)
                missing[key, default: 0] &+= Int64(truncatingIfNeeded: sign)
                continue
            }
            for key in ReportRollup.keys(t) { groups[Group(key: key, dimension: "", value: ""), default: []].append(i) }
        }
        guard !groups.isEmpty else { return }
        let runsByKey = Dictionary(grouping: facts.runs, by: \.entitlement)
        var classified: [[Int]: [String: [Cell]]] = [:]
        for (g, indices) in groups {
            let runs = runsByKey[g.key] ?? []
            let list: [Cell]
            if let known = classified[indices]?[g.key] {
                list = known
            } else {
                list = try Self.classify(indices.map { (facts.transactions[$0], factors[$0]!) }, runs: runs)
                classified[indices, default: [:]][g.key] = list
            }
            for c in list {
                let k = Key(
                    interval: c.interval, period: c.period, entitlement: g.key, dimension: g.dimension, value: g.value, factor: c.factor,
                    part: c.part, denominator: c.denominator)
                cells[k, default: 0] &+= sign &* c.value
            }
        }
    }

    struct Cell {
        var interval: ReportInterval
        var period: Int64
        var factor: FXFactor
        var part: MRRMovementFigures.Part
        var denominator: Int128
        var value: Int128
    }

    /// One group's cells: its services' MRR per factor just before each end of the periods where a service starts
    /// or ends, classified by the converted total as `MRRMovementAccumulator` classifies it.
    static func classify(_ list: [(RevenueTransaction, FXFactor)], runs: [PaidRun]) throws(ReportOverflow) -> [Cell] {
        var cells: [Cell] = []
        let first = runs.first?.start ?? list.map(\.0.serviceStart).min()!
        var changes: [(at: Timestamp, sign: Int, factor: FXFactor, monthly: MonthlyAmount)] = []
        var within: [Timestamp] = []
        for (t, factor) in list {
            let start = t.serviceStart
            if let end = t.serviceEnd, end <= start {
                within.append(start)
                continue
            }
            changes.append((start, 1, factor, t.monthly!))
            if let end = t.serviceEnd { changes.append((end, -1, factor, t.monthly!)) }
        }
        changes.sort { $0.at < $1.at }
        for interval in Self.intervals {
            // Services covering no boundary of this grid: present in the period holding them.
            for (t, _) in list {
                let a = interval.periodStart(containing: t.serviceStart)
                if let end = t.serviceEnd, end > t.serviceStart, end < interval.next(after: a) {
                    cells.append(Cell(interval: interval, period: a.microseconds, factor: .none, part: .start, denominator: 0, value: 1))
                }
            }
            for start in within {
                let a = interval.periodStart(containing: start)
                cells.append(Cell(interval: interval, period: a.microseconds, factor: .none, part: .start, denominator: 0, value: 1))
            }
            var periods: [Timestamp] = []
            for c in changes {
                let p = interval.periodStart(containing: c.at)
                if periods.last != p { periods.append(p) }
            }
            var state: [FXFactor: ReportRollup.ExactMRR] = [:]
            var next = 0
            func advance(to b: Timestamp) -> [FXFactor: ReportRollup.ExactMRR] {
                while next < changes.count, changes[next].at < b {
                    let c = changes[next]
                    state[c.factor, default: .init()].add(c.monthly, sign: c.sign)
                    if state[c.factor]!.services == 0 { state[c.factor] = nil }
                    next += 1
                }
                return state
            }
            var previous: (end: Timestamp, state: [FXFactor: ReportRollup.ExactMRR])?
            for a in periods {
                let b = interval.next(after: a)
                let before = previous.map { $0.end == a } == true ? previous!.state : advance(to: a)
                let after = advance(to: b)
                previous = (b, after)
                func add(_ part: MRRMovementFigures.Part, _ m: [FXFactor: ReportRollup.ExactMRR], sign: Int128 = 1) {
                    for (factor, exact) in m {
                        for (d, n) in exact.byDenominator where n != 0 {
                            cells.append(
                                Cell(interval: interval, period: a.microseconds, factor: factor, part: part, denominator: d, value: sign &* n))
                        }
                    }
                }
                func count(_ part: MRRMovementFigures.Part) {
                    cells.append(Cell(interval: interval, period: a.microseconds, factor: .none, part: part, denominator: 0, value: 1))
                }
                switch (before.isEmpty, after.isEmpty) {
                case (false, false):
                    guard before != after else { continue }
                    let order = try compareConverted(after, before)
                    // Equal totals still move money between factors (a renewal at another date's rate): as
                    // expansion, with no subscriber counted, as the accumulator does.
                    let part: MRRMovementFigures.Part = order < 0 ? .contraction : .expansion
                    let s: Int128 = order < 0 ? -1 : 1
                    add(part, after, sign: s)
                    add(part, before, sign: -s)
                    if order != 0 { count(part) }
                case (false, true):
                    let last = ReportRollup.lastRunEnded(in: runs, from: a, before: b).map { runs[$0] }
                    let part: MRRMovementFigures.Part = last?.lapse == .transferred ? .transferredOut : .churned
                    add(part, before)
                    count(part)
                case (true, false):
                    let part: MRRMovementFigures.Part =
                        ReportRollup.runActive(justBefore: b, in: runs)?.transferredIn == true ? .transferredIn : first >= a ? .new : .reactivation
                    add(part, after)
                    count(part)
                case (true, true): continue
                }
            }
        }
        return cells
    }

    /// −1, 0 or 1 as the converted total of `a` is below, equal to or above that of `b`.
    static func compareConverted(_ a: [FXFactor: ReportRollup.ExactMRR], _ b: [FXFactor: ReportRollup.ExactMRR]) throws(ReportOverflow) -> Int {
        var difference = FractionSum()
        do {
            for (f, m) in a {
                for (d, n) in m.byDenominator { try difference.add(try MonthlyAmount(numerator: n, denominator: d).converted(f)) }
            }
            for (f, m) in b {
                for (d, n) in m.byDenominator { try difference.add(try MonthlyAmount(numerator: 0 &- n, denominator: d).converted(f)) }
            }
            let n = try difference.total().numerator
            return n < 0 ? -1 : n > 0 ? 1 : 0
        } catch {
            // Beyond 128 bits (amounts at hundreds of incompatible rates): by the nearest doubles, as
            // `MonthlyAmount.compare` does.
            func value(_ m: [FXFactor: ReportRollup.ExactMRR]) -> Double {
                m.reduce(0) { sum, e in
                    e.value.byDenominator.reduce(sum) { $0 + Double($1.value) / Double($1.key) * Double(e.key.numerator) / Double(e.key.denominator) }
                }
            }
            let (x, y) = (value(a), value(b))
            return x < y ? -1 : x > y ? 1 : 0
        }
    }

    /// MRR movement over a calendar grid from the cells: `level`, the day cells before the first boundary summed
    /// with their sign (adds positive, subtractions negative; counts of the subscribers holding MRR) per group,
    /// factor and denominator, and `cells`, the grid's own cells within the span. The rows `GroupedMRRMovementAccumulator`
    /// gives converting into `currency`.
    public static func periods(
        boundaries: [Timestamp], grouped: Bool, currency: String,
        level: [(group: String?, factor: FXFactor, denominator: Int128, value: Int128)],
        cells: [(period: Int64, group: String?, factor: FXFactor, part: MRRMovementFigures.Part, denominator: Int128, value: Int128)]
    ) throws(ReportOverflow) -> [(group: String?, period: MRRMovementPeriod)] {
        guard boundaries.count > 1 else { return [] }
        let partCount = MRRMovementFigures.Part.allCases.count
        struct Line {
            /// Per factor, the exact converted MRR just before the next period, and that rounded.
            var mrr: [FXFactor: (exact: FractionSum, rounded: Int128)] = [:]
            /// The sum of the rounded MRR over the factors.
            var rounded: Int128 = 0
            var subscribers: Int128 = 0
            /// Per period: per factor the converted parts, the subscribers per part, and services present.
            var moves: [Int: (amounts: [FXFactor: [FractionSum]], counts: [Int128], present: Bool)] = [:]
        }
        var lines: [String?: Line] = [:]
        var exact: [String?: [FXFactor: FractionSum]] = [:]
        for (group, factor, d, v) in level {
            if d == 0 {
                lines[group, default: Line()].subscribers &+= v
            } else {
                try exact[group, default: [:]][factor, default: FractionSum()].add(try MonthlyAmount(numerator: v, denominator: d).converted(factor))
            }
        }
        for (group, byFactor) in exact {
            var line = lines[group] ?? Line()
            for (factor, x) in byFactor where !x.isZero {
                let r = try x.total().rounded
                line.mrr[factor] = (x, r)
                line.rounded += r
            }
            lines[group] = line
        }
        let none: (amounts: [FXFactor: [FractionSum]], counts: [Int128], present: Bool) = ([:], Array(repeating: 0, count: partCount), false)
        for (period, group, factor, part, d, v) in cells {
            guard let i = boundaries.period(containing: Timestamp(microseconds: period)) else { continue }
            // Mutated in place: a copy of the line per cell would copy its dictionaries each time.
            if d == 0 {
                if part == .start {
                    if v != 0 { lines[group, default: Line()].moves[i, default: none].present = true }
                } else {
                    lines[group, default: Line()].moves[i, default: none].counts[part.rawValue] &+= v
                }
            } else {
                let amount = try MonthlyAmount(numerator: v, denominator: d).converted(factor)
                try lines[group, default: Line()].moves[i, default: none].amounts[factor, default: Array(repeating: FractionSum(), count: partCount)][
                    part.rawValue
                ].add(amount)
            }
        }
        if !grouped, lines[nil] == nil { lines[nil] = Line() }
        var rows: [String?: [MRRMovementPeriod]] = [:]
        for (group, var line) in lines {
            var seen = !grouped || line.subscribers != 0
            var list: [MRRMovementPeriod] = []
            for i in 0..<(boundaries.count - 1) {
                let m = line.moves[i]
                var f = MRRMovementFigures()
                f.subscribers[MRRMovementFigures.Part.start.rawValue] = Int(truncatingIfNeeded: line.subscribers)
                // A factor without parts in the period adds its rounded MRR to the start and the end alike; only
                // those with parts are rounded part by part.
                f.amounts[MRRMovementFigures.Part.start.rawValue] = line.rounded
                for (factor, parts) in m?.amounts ?? [:] {
                    let held = line.mrr[factor]
                    var x = held?.exact ?? FractionSum()
                    var previous = held?.rounded ?? 0
                    for part in MRRMovementFigures.Part.allCases.dropFirst() {
                        let p = parts[part.rawValue]
                        if !p.byDenominator.isEmpty { try x.add(part.adds ? p : p.negated) }
                        let now = p.byDenominator.isEmpty ? previous : try x.total().rounded
                        f.amounts[part.rawValue] += part.adds ? now - previous : previous - now
                        previous = now
                    }
                    line.rounded += previous - (held?.rounded ?? 0)
                    line.mrr[factor] = x.isZero ? nil : (x, previous)
                }
                f.mrrEnd = line.rounded
                if let m {
                    seen = seen || m.present
                    for part in MRRMovementFigures.Part.allCases.dropFirst() {
                        f.subscribers[part.rawValue] = Int(truncatingIfNeeded: m.counts[part.rawValue])
                        if part != .expansion && part != .contraction {
                            line.subscribers = part.adds ? line.subscribers &+ m.counts[part.rawValue] : line.subscribers &- m.counts[part.rawValue]
                        }
                    }
                }
                f.subscribersEnd = Int(truncatingIfNeeded: line.subscribers)
                seen = seen || line.subscribers != 0
                list.append(MRRMovementPeriod(start: boundaries[i], end: boundaries[i + 1], currency: currency, figures: f))
            }
            if seen { rows[group] = list }
        }
        let groups: [String?] = grouped ? rows.keys.sorted(by: ReportDimensions.groupOrder) : [nil]
        return groups.flatMap { g in rows[g]!.map { (g, $0) } }
    }

    /// Without the cells that came to nothing.
    public func pruned() -> Self {
        var out = Self()
        out.cells = cells.filter { $0.value != 0 }
        out.missing = missing.filter { $0.value != 0 }
        return out
    }
}

extension FXFactor {
    /// The factor of the cells that count rather than convert.
    public static let none = FXFactor(numerator: 0, denominator: 0)
}
