/// A paid transaction as MRR sees it: its monthly amount, in service for this subscriber over `[start, end)`
/// (`RevenueTransaction.serviceStart`/`serviceEnd`, the columns the MRR report reads).
public struct MRRMovementService: Sendable, Hashable {
    public var currency: String
    /// The transaction's `occurred_at`: its date picks the rate in a reporting currency.
    public var occurredAt: Timestamp
    public var start: Timestamp
    public var end: Timestamp?
    public var monthly: MonthlyAmount

    public init(currency: String, occurredAt: Timestamp, start: Timestamp, end: Timestamp?, monthly: MonthlyAmount) {
        self.currency = currency
        self.occurredAt = occurredAt
        self.start = start
        self.end = end
        self.monthly = monthly
    }

    /// Whether the service covers the instant just before `t` (`start < t <= end`), as churn's "paid-active
    /// just before".
    func covers(justBefore t: Timestamp) -> Bool { start < t && (end.map { t <= $0 } ?? true) }
}

/// The movements of MRR over a period, in the minor units of the row's currency (docs/reports.md, "MRR
/// movement"), and how many subscribers made each.
public struct MRRMovementFigures: Sendable, Hashable {
    /// The parts in the order their rounding telescopes: `mrr_start`, then the four that add, then the three
    /// that take away; `mrr_end` is what is left.
    public enum Part: Int, CaseIterable, Sendable {
        case start, new, reactivation, expansion, transferredIn, contraction, churned, transferredOut

        var adds: Bool { rawValue <= Part.transferredIn.rawValue }
    }

    /// Indexed by `Part.rawValue`.
    public var amounts: [Int128] = Array(repeating: 0, count: Part.allCases.count)
    public var mrrEnd: Int128 = 0
    /// Subscribers per part (`start`: with MRR just before the period), indexed like `amounts`.
    public var subscribers: [Int] = Array(repeating: 0, count: Part.allCases.count)
    /// Subscribers with MRR just before the period's end.
    public var subscribersEnd = 0

    public init() {}

    public subscript(_ part: Part) -> Int128 { amounts[part.rawValue] }
    public func count(_ part: Part) -> Int { subscribers[part.rawValue] }
}

/// One row of the MRR movement report: a period and a currency (the reporting currency when converted).
public struct MRRMovementPeriod: Sendable, Hashable {
    public var start: Timestamp
    public var end: Timestamp
    public var currency: String
    public var figures: MRRMovementFigures
}

/// MRR movement (docs/semantics.md section 5), one subscriber at a time.
///
/// Each subscriber's MRR just before each boundary is exact (fractions); the subscriber is classified per
/// period and its exact amounts are summed per part. Rounding happens only at the end, per period, row
/// currency and conversion factor: the cumulative sums `mrr_start`, `+ new`, `+ reactivation`, `+ expansion`,
/// `+ transferred_in`, `− contraction`, `− churned`, `− transferred_out` (= the exact MRR at the end) are each
/// rounded half up, and each part is the difference of two consecutive rounded sums. So the parts telescope:
/// the identity holds exactly, and `mrr_start`/`mrr_end` are the MRR report's figures just before the
/// boundaries (rounded once per currency, or once per rate when converted, as that report rounds).
public struct MRRMovementAccumulator: Sendable {
    let boundaries: [Timestamp]
    var reporting: ReportingCurrency?
    struct Bucket: Hashable {
        var period: Int
        var currency: String
        var factor: FXFactor
    }
    struct Row: Hashable {
        var period: Int
        var currency: String
    }
    /// Exact sums per part (indexed by `Part.rawValue`).
    var sums: [Bucket: [FractionSum]] = [:]
    var counts: [Row: MRRMovementFigures] = [:]
    var currencies: Set<String> = []

    public init(boundaries: [Timestamp], reporting: ReportingCurrency? = nil) {
        self.boundaries = boundaries
        self.reporting = reporting
        if let reporting { currencies.insert(reporting.currency) }
    }

    struct Key: Hashable {
        var currency: String
        var factor: FXFactor
    }

    /// Adds one subscriber: their MRR services touching the report's span, their paid runs of the report's
    /// entitlement key sorted by start (for transfers), and the start of their first-ever paid run of that key
    /// (new or reactivation). Throws `MissingFXRate` or `ReportOverflow`.
    public mutating func add(services: [MRRMovementService], runs: [PaidRun], firstStart: Timestamp?) throws {
        let n = boundaries.count
        guard n > 1, !services.isEmpty else { return }
        // The subscriber's exact MRR just before each boundary it has any, per row currency and factor.
        var at: [Int: [Key: MonthlyAmount]] = [:]
        for s in services {
            var key = Key(currency: s.currency, factor: .one)
            if var r = reporting {
                key = Key(currency: r.currency, factor: try r.factor(from: s.currency, occurred: s.occurredAt))
                reporting = r
            }
            let amount = try s.monthly.converted(key.factor)
            let lo = boundaries.firstIndex(after: s.start)
            let hi = s.end.map { boundaries.firstIndex(after: $0) } ?? n
            for i in lo..<max(lo, hi) {
                if let sum = at[i]?[key] {
                    at[i]![key] = try sum.adding(amount)
                } else {
                    at[i, default: [:]][key] = amount
                }
            }
        }
        let first = firstStart ?? services.map(\.start).min()!
        var periods = Set<Int>()
        for i in at.keys {
            if i < n - 1 { periods.insert(i) }
            if i > 0 { periods.insert(i - 1) }
        }
        for i in periods.sorted() {
            let (a, b) = (boundaries[i], boundaries[i + 1])
            let (before, after) = (at[i] ?? [:], at[i + 1] ?? [:])
            for currency in Set(before.keys.map(\.currency)).union(after.keys.map(\.currency)) {
                currencies.insert(currency)
                let x = before.filter { $0.key.currency == currency }
                let y = after.filter { $0.key.currency == currency }
                let row = Row(period: i, currency: currency)
                var tally = counts[row] ?? MRRMovementFigures()
                defer { counts[row] = tally }
                for (key, amount) in x { try add(amount, to: .start, period: i, key: key) }
                if !x.isEmpty { tally.subscribers[MRRMovementFigures.Part.start.rawValue] += 1 }
                if !y.isEmpty { tally.subscribersEnd += 1 }
                let part: MRRMovementFigures.Part
                if !x.isEmpty, !y.isEmpty {
                    let order = try total(y).compare(try total(x))
                    part = order < 0 ? .contraction : .expansion
                    if order != 0 { tally.subscribers[part.rawValue] += 1 }
                    // Per factor: a subscriber whose rate changed moves between factors (net zero when equal).
                    for key in Set(x.keys).union(y.keys) {
                        let delta = try (y[key] ?? .zero).adding((x[key] ?? .zero).negated)
                        guard delta.numerator != 0 else { continue }
                        try add(part == .expansion ? delta : delta.negated, to: part, period: i, key: key)
                    }
                    continue
                } else if !x.isEmpty {
                    let last = runs.filter { r in r.end.map { $0 >= a && $0 < b } ?? false }.max { $0.end! < $1.end! }
                    part = last?.lapse == .transferred ? .transferredOut : .churned
                    for (key, amount) in x { try add(amount, to: part, period: i, key: key) }
                } else {
                    if ReportRollup.runActive(justBefore: b, in: runs)?.transferredIn == true {
                        part = .transferredIn
                    } else {
                        part = first >= a ? .new : .reactivation
                    }
                    for (key, amount) in y { try add(amount, to: part, period: i, key: key) }
                }
                tally.subscribers[part.rawValue] += 1
            }
        }
    }

    private func total(_ amounts: [Key: MonthlyAmount]) throws -> MonthlyAmount {
        var t = MonthlyAmount.zero
        for a in amounts.values { t = try t.adding(a) }
        return t
    }

    private mutating func add(_ amount: MonthlyAmount, to part: MRRMovementFigures.Part, period: Int, key: Key) throws {
        let bucket = Bucket(period: period, currency: key.currency, factor: key.factor)
        var parts = sums.removeValue(forKey: bucket) ?? Array(repeating: FractionSum(), count: MRRMovementFigures.Part.allCases.count)
        defer { sums[bucket] = parts }
        try parts[part.rawValue].add(amount)
    }

    /// Rows ordered by period, then currency; every currency seen gets a row in every period.
    public func periods() throws -> [MRRMovementPeriod] {
        var rounded: [Row: MRRMovementFigures] = [:]
        for (bucket, parts) in sums {
            let row = Row(period: bucket.period, currency: bucket.currency)
            var f = rounded[row] ?? MRRMovementFigures()
            var x = try parts[MRRMovementFigures.Part.start.rawValue].total()
            var previous = x.rounded
            f.amounts[MRRMovementFigures.Part.start.rawValue] += previous
            for part in MRRMovementFigures.Part.allCases.dropFirst() {
                let p = try parts[part.rawValue].total()
                x = try x.adding(part.adds ? p : p.negated)
                let now = x.rounded
                f.amounts[part.rawValue] += part.adds ? now - previous : previous - now
                previous = now
            }
            f.mrrEnd += previous
            rounded[row] = f
        }
        var rows: [MRRMovementPeriod] = []
        for i in 0..<max(0, boundaries.count - 1) {
            for currency in currencies.sorted() {
                let row = Row(period: i, currency: currency)
                var f = rounded[row] ?? MRRMovementFigures()
                if let c = counts[row] { (f.subscribers, f.subscribersEnd) = (c.subscribers, c.subscribersEnd) }
                rows.append(MRRMovementPeriod(start: boundaries[i], end: boundaries[i + 1], currency: currency, figures: f))
            }
        }
        return rows
    }
}
