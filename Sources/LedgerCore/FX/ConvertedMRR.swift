/// MRR in a reporting currency (docs/reports.md, "Reporting currency").
public enum ConvertedMRR {
    /// The monthly amounts of the transactions covering an instant, summed per currency, occurred date and
    /// denominator (`amount`), converted at the rate of each date.
    public struct Group: Sendable, Hashable {
        public var currency: String
        public var day: FXDay
        public var amount: MonthlyAmount

        public init(currency: String, day: FXDay, amount: MonthlyAmount) {
            self.currency = currency
            self.day = day
            self.amount = amount
        }
    }

    /// `Σ round_half_up(S_f × f)` over the distinct conversion factors `f`, where `S_f` is the exact sum of the
    /// monthly amounts converted by `f`: exact per rate, rounded once per rate (EUR into EUR, factor one, is the
    /// plain MRR rounded once). Throws `MissingFXRate` or `ReportOverflow`.
    public static func total(_ groups: [Group], into target: String, rates: FXTable) throws -> Int128 {
        var byFactor: [FXFactor: MonthlyAmount] = [:]
        for g in groups {
            let f = try rates.factor(from: g.currency, to: target, on: g.day)
            if let sum = byFactor[f] {
                byFactor[f] = try sum.adding(g.amount)
            } else {
                byFactor[f] = g.amount
            }
        }
        var total: Int128 = 0
        for (f, sum) in byFactor.sorted(by: { ($0.key.numerator, $0.key.denominator) < ($1.key.numerator, $1.key.denominator) }) {
            let (n, o1) = sum.numerator.multipliedReportingOverflow(by: f.numerator)
            let (d, o2) = sum.denominator.multipliedReportingOverflow(by: f.denominator)
            guard !o1, !o2 else { throw ReportOverflow(what: "converted monthly amounts") }
            let (t, o3) = total.addingReportingOverflow(Money.roundHalfUp(n, d))
            guard !o3 else { throw ReportOverflow(what: "converted MRR") }
            total = t
        }
        return total
    }
}
