/// The reporting currency of a report (docs/reports.md, "Reporting currency"): the target currency and the
/// rate set, with each currency's factor kept for the last date it was asked for (the facts of one
/// subscriber or one span mostly share a date with the one before).
public struct ReportingCurrency: Sendable {
    public let currency: String
    let rates: FXTable
    private var last: [String: (day: Int, factor: FXFactor)] = [:]

    public init(currency: String, rates: FXTable) {
        self.currency = currency
        self.rates = rates
    }

    /// The factor from minor units of `source` to the reporting currency's, at the rate of `occurred`'s UTC
    /// date; `MissingFXRate` names the currency and date.
    public mutating func factor(from source: String, occurred: Timestamp) throws(MissingFXRate) -> FXFactor {
        let day = FXDay(occurred)
        if let known = last[source], known.day == day.days { return known.factor }
        let f = try rates.factor(from: source, to: currency, on: day)
        last[source] = (day.days, f)
        return f
    }
}

/// An exact sum of fractions, kept per denominator (a report sees few: one per billing period length and
/// rate) and reduced to one fraction only when read, so the sum stays within 128 bits as long as possible.
public struct FractionSum: Sendable, Hashable {
    var byDenominator: [Int128: Int128] = [:]

    public init() {}

    public var isZero: Bool { byDenominator.values.allSatisfy { $0 == 0 } }

    public mutating func add(_ a: MonthlyAmount) throws(ReportOverflow) {
        let (sum, overflow) = byDenominator[a.denominator, default: 0].addingReportingOverflow(a.numerator)
        guard !overflow else { throw ReportOverflow(what: "a sum of monthly amounts") }
        byDenominator[a.denominator] = sum
    }

    public mutating func add(_ other: FractionSum) throws(ReportOverflow) {
        for (d, n) in other.byDenominator { try add(MonthlyAmount(numerator: n, denominator: d)) }
    }

    /// The sum as one fraction, or `ReportOverflow` when the common denominator outgrows 128 bits.
    public func total() throws(ReportOverflow) -> MonthlyAmount {
        var total = MonthlyAmount(numerator: 0, denominator: 1)
        for d in byDenominator.keys.sorted() where byDenominator[d] != 0 {
            total = try total.adding(MonthlyAmount(numerator: byDenominator[d]!, denominator: d))
        }
        return total
    }
}

extension MonthlyAmount {
    public static let zero = MonthlyAmount(numerator: 0, denominator: 1)

    public var negated: MonthlyAmount { MonthlyAmount(numerator: -numerator, denominator: denominator) }

    /// `self × factor`, exact, or `ReportOverflow`.
    public func converted(_ f: FXFactor) throws(ReportOverflow) -> MonthlyAmount {
        if f == .one { return self }
        let (n, o1) = numerator.multipliedReportingOverflow(by: f.numerator)
        let (d, o2) = denominator.multipliedReportingOverflow(by: f.denominator)
        guard !o1, !o2 else { throw ReportOverflow(what: "a converted monthly amount") }
        return MonthlyAmount(numerator: n, denominator: d)
    }

    /// `round_half_up` to minor units.
    public var rounded: Int128 { Money.roundHalfUp(numerator, denominator) }

    /// −1, 0 or 1 as `self` is below, equal to or above `other`: exact when the difference fits in 128 bits,
    /// else (amounts at hundreds of incompatible rates) by their nearest doubles.
    public func compare(_ other: MonthlyAmount) -> Int {
        if let d = try? adding(other.negated) { return d.numerator > 0 ? 1 : (d.numerator < 0 ? -1 : 0) }
        let (l, r) = (Double(numerator) / Double(denominator), Double(other.numerator) / Double(other.denominator))
        return l < r ? -1 : (l > r ? 1 : 0)
    }
}
