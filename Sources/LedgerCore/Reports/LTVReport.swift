/// One cohort and currency of the realized LTV report (docs/reports.md, "Realized LTV").
public struct LTVCohort: Sendable, Hashable {
    /// The cohort's month (of its members' first paid run).
    public var start: Timestamp
    public var currency: String
    /// Paying customers: cohort members holding a paid transaction (in this currency, unless converted).
    public var size = 0
    /// Per month k: `gross − refunds` of the members' transactions that occurred before `start + (k + 1)`
    /// months, refunds that occurred before then; minor units.
    public var gross: [Int128]
    /// The same with `proceeds` (gross less tax and commission) instead of gross.
    public var proceeds: [Int128]

    /// `total / size` rounded half up to minor units; nil for an empty cohort.
    public func perCustomer(_ total: Int128) -> Int128? { size == 0 ? nil : Money.roundHalfUp(total, Int128(size)) }
}

/// Realized LTV per cohort, one subscriber at a time.
///
/// A transaction counts for the member who billed it (a transferred purchase's copy, `heldFrom`, brings no
/// gross), and a refund for the member whose copy it was recorded on, so over all cohorts the figures add up
/// to the ledger's billings less its refunds. Converted, each transaction's cumulative gross, commission and
/// refunds at each month's end are converted at the rate of its `occurred_at` date and rounded, as revenue
/// converts them.
public struct LTVAccumulator: Sendable {
    let starts: [Timestamp]
    /// Months shown per cohort (those that have begun by `until`, at most `months`).
    let shown: [Int]
    var reporting: ReportingCurrency?
    var cohorts: [Int: [String: LTVCohort]] = [:]

    /// Cohorts are the months in `[from, to)`; month k (0 ..< `months`) of a cohort is shown when
    /// `start + k months <= until` (later months are not known yet).
    public init(from: Timestamp, to: Timestamp, months: Int, until: Timestamp, reporting: ReportingCurrency? = nil) {
        starts = Array(ReportCalendar.boundaries(from: from, to: to, interval: .month).dropLast())
        shown = starts.map { start in
            var k = 0
            while k < months, ReportCalendar.addingMonths(k, to: start) <= until { k += 1 }
            return k
        }
        self.reporting = reporting
    }

    /// Adds one subscriber: the start of their first paid run, and the paid transactions they hold.
    public mutating func add(firstStart: Timestamp, transactions: [RevenueTransaction]) throws {
        let month = ReportCalendar.monthStart(firstStart)
        guard let c = starts.firstIndex(of: month), shown[c] > 0, !transactions.isEmpty else { return }
        let cutoffs = (0..<shown[c]).map { ReportCalendar.addingMonths($0 + 1, to: month) }
        var member = Set<String>()
        let last = cutoffs[cutoffs.count - 1]
        for t in transactions {
            var currency = t.currency
            var factor = FXFactor.one
            // A transaction that occurred (and was refunded) only after the last month shown adds nothing: it
            // needs no rate, so a cohort converts with the rates of the months it shows.
            let counts = t.occurredAt < last || t.refunds.contains { $0.at < last }
            if var r = reporting {
                currency = r.currency
                if counts {
                    factor = try r.factor(from: t.currency, occurred: t.occurredAt)
                    reporting = r
                }
            }
            var cohort =
                cohorts[c]?[currency]
                ?? LTVCohort(
                    start: month, currency: currency, gross: Array(repeating: 0, count: cutoffs.count),
                    proceeds: Array(repeating: 0, count: cutoffs.count))
            if member.insert(currency).inserted { cohort.size += 1 }
            let billed = t.heldFrom == nil
            let gross = billed ? try factor.apply(Int128(t.gross)) : 0
            let commission = billed ? try factor.apply(Int128(t.commission)) : 0
            let tax = billed ? try factor.apply(Int128(t.tax)) : 0
            for (k, cut) in cutoffs.enumerated() {
                var refunded: Int128 = 0
                for r in t.refunds where r.at < cut { refunded += Int128(r.amount) }
                let refunds = try factor.apply(refunded)
                let sale = t.occurredAt < cut
                cohort.gross[k] += (sale ? gross : 0) - refunds
                cohort.proceeds[k] += (sale ? gross - tax - commission : 0) - refunds
            }
            cohorts[c, default: [:]][currency] = cohort
        }
    }

    /// Rows by cohort, then currency; converted, every cohort has its row (size 0 when nobody paid).
    public var rows: [LTVCohort] {
        var result: [LTVCohort] = []
        for c in starts.indices {
            var byCurrency = cohorts[c] ?? [:]
            if let r = reporting, byCurrency[r.currency] == nil {
                byCurrency[r.currency] = LTVCohort(
                    start: starts[c], currency: r.currency, gross: Array(repeating: 0, count: shown[c]),
                    proceeds: Array(repeating: 0, count: shown[c]))
            }
            result += byCurrency.keys.sorted().map { byCurrency[$0]! }
        }
        return result
    }
}
