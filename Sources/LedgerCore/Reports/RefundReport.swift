/// One period and currency of the refunds report (docs/reports.md, "Refunds").
public struct RefundPeriod: Sendable, Hashable {
    public var start: Timestamp
    public var end: Timestamp
    public var currency: String
    /// Refunds that occurred in the period (a reversed refund is gone from every period).
    public var refunds = 0
    /// Money paid back by them, minor units (equal to revenue's `refunds` of the period).
    public var amount: Int128 = 0
    /// Paid transactions with at least one of those refunds.
    public var refundedTransactions = 0
    /// Paid transactions that occurred in the period.
    public var paidTransactions = 0

    /// `refunded_transactions / paid_transactions`, nil when no paid transaction occurred in the period.
    public var refundRate: Double? { paidTransactions == 0 ? nil : Double(refundedTransactions) / Double(paidTransactions) }
}

/// Counts refunds per period by their `occurred_at`, one transaction at a time.
///
/// Amounts telescope like revenue's: the transaction's cumulative refunds before each boundary are converted
/// (at the rate of its own date, when a reporting currency is asked for) and a period gets the difference, so
/// the refunds of any grid add up to the converted whole and equal revenue's `refunds` column.
public struct RefundAccumulator: Sendable {
    let boundaries: [Timestamp]
    var reporting: ReportingCurrency?
    struct Row: Hashable {
        var period: Int
        var currency: String
    }
    var cells: [Row: RefundPeriod] = [:]
    var currencies: Set<String> = []

    public init(boundaries: [Timestamp], reporting: ReportingCurrency? = nil) {
        self.boundaries = boundaries
        self.reporting = reporting
        if let reporting { currencies.insert(reporting.currency) }
    }

    /// Adds one paid transaction as its holder has it: counted as occurred by whoever billed it (not by the
    /// holder of a transferred copy), its refunds where they were recorded.
    public mutating func add(_ t: RevenueTransaction) throws {
        guard boundaries.count > 1 else { return }
        var currency = t.currency
        var factor = FXFactor.one
        if var r = reporting {
            (currency, factor) = (r.currency, try r.factor(from: t.currency, occurred: t.occurredAt))
            reporting = r
        }
        if t.heldFrom == nil, let i = boundaries.period(containing: t.occurredAt) {
            let row = Row(period: i, currency: currency)
            var cell = cells[row] ?? empty(i, currency)
            cell.paidTransactions += 1
            cells[row] = cell
            currencies.insert(currency)
        }
        guard !t.refunds.isEmpty else { return }
        let refunds = t.refunds.sorted { $0.at < $1.at }
        var cumulative: Int128 = 0
        var converted: Int128 = 0
        var j = 0
        while j < refunds.count {
            guard let i = boundaries.period(containing: refunds[j].at) else {
                cumulative += Int128(refunds[j].amount)
                converted = try factor.apply(cumulative)
                j += 1
                continue
            }
            var cell = cells[Row(period: i, currency: currency)] ?? empty(i, currency)
            cell.refundedTransactions += 1
            while j < refunds.count, refunds[j].at < boundaries[i + 1] {
                cumulative += Int128(refunds[j].amount)
                cell.refunds += 1
                j += 1
            }
            let now = try factor.apply(cumulative)
            cell.amount += now - converted
            converted = now
            cells[Row(period: i, currency: currency)] = cell
            currencies.insert(currency)
        }
    }

    private func empty(_ i: Int, _ currency: String) -> RefundPeriod {
        RefundPeriod(start: boundaries[i], end: boundaries[i + 1], currency: currency)
    }

    /// Rows by period, then currency; every currency with anything in the report has a row in every period.
    public var periods: [RefundPeriod] {
        var rows: [RefundPeriod] = []
        for i in 0..<max(0, boundaries.count - 1) {
            for currency in currencies.sorted() { rows.append(cells[Row(period: i, currency: currency)] ?? empty(i, currency)) }
        }
        return rows
    }
}

/// One period of the conversion-to-paying report (docs/reports.md, "Conversion to paying").
public struct ConversionPeriod: Sendable, Hashable {
    public var start: Timestamp
    public var end: Timestamp
    /// Subscribers first seen in the period.
    public var subscribers = 0
    /// Per window of `days` (in the report's order): how many of them had a paid transaction within it.
    public var converted: [Int]

    public func rate(_ k: Int) -> Double? { subscribers == 0 ? nil : Double(converted[k]) / Double(subscribers) }
}

/// Conversion to paying, one subscriber at a time: first seen (first production event of any type) and the
/// first paid transaction they billed.
public struct ConversionAccumulator: Sendable {
    public let days: [Int]
    public private(set) var periods: [ConversionPeriod]
    let boundaries: [Timestamp]

    public init(boundaries: [Timestamp], days: [Int]) {
        self.boundaries = boundaries
        self.days = days
        periods = zip(boundaries, boundaries.dropFirst()).map {
            ConversionPeriod(start: $0, end: $1, converted: Array(repeating: 0, count: days.count))
        }
    }

    /// Converted within `d` days: the first paid transaction occurred at most `d × 24 h` after first seen.
    public mutating func add(firstSeen: Timestamp, firstPaid: Timestamp?) {
        guard let i = boundaries.period(containing: firstSeen) else { return }
        periods[i].subscribers += 1
        guard let firstPaid else { return }
        let elapsed = Int128(firstPaid.microseconds) - Int128(firstSeen.microseconds)
        for (k, d) in days.enumerated() where elapsed <= Int128(d) * 86_400_000_000 { periods[i].converted[k] += 1 }
    }
}
