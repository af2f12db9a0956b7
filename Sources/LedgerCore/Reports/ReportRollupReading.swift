/// Reports from the rollups' cells (`ReportRollup`): the same rows the fact-by-fact accumulators give, from
/// a few cells per period.
extension ReportRollup {
    /// Revenue over a grid's boundaries from the cells of one key with `period < boundaries.last`: month
    /// cells for a month grid, day cells for a day or week grid. The cumulative figures at a boundary are the
    /// sum of the periods before it; a currency is listed when a transaction of it moves within the range, as
    /// the accumulator lists it.
    public static func revenuePeriods(
        boundaries: [Timestamp], cells: [(period: Int64, currency: String, cell: RevenueCell)]
    ) -> [RevenuePeriod] {
        guard let first = boundaries.first, let last = boundaries.last, boundaries.count > 1 else { return [] }
        var byCurrency: [String: [(period: Int64, cell: RevenueCell)]] = [:]
        for (period, currency, cell) in cells { byCurrency[currency, default: []].append((period, cell)) }
        var sums: [String: [RevenueFigures]] = [:]
        var moving = Set<String>()
        var settledBefore: [String: Int128] = [:]
        for (currency, list) in byCurrency {
            // One sweep: the cells in period order, each counted at every boundary after it.
            let sorted = list.sorted { $0.period < $1.period }
            var row = Array(repeating: RevenueFigures(), count: boundaries.count)
            var (next, running) = (0, RevenueFigures())
            for (i, b) in boundaries.enumerated() {
                while next < sorted.count && sorted[next].period < b.microseconds {
                    running += sorted[next].cell.figures
                    next += 1
                }
                row[i] = running
            }
            for (period, cell) in sorted {
                if period < first.microseconds { settledBefore[currency, default: 0] += cell.settledDeferred }
                if period >= first.microseconds && period < last.microseconds && cell.transactions != 0 { moving.insert(currency) }
            }
            sums[currency] = row
        }
        var rows: [RevenuePeriod] = []
        for i in 0..<(boundaries.count - 1) {
            for currency in moving.sorted() {
                let s = sums[currency]!
                let settled = settledBefore[currency] ?? 0
                rows.append(
                    RevenuePeriod(
                        start: boundaries[i], end: boundaries[i + 1], currency: currency, figures: s[i + 1] - s[i],
                        deferredStart: s[i].deferred - settled, deferredEnd: s[i + 1].deferred - settled))
            }
        }
        return rows
    }

    /// Churn over a calendar grid from the run counts per day (every day of the key before the last boundary)
    /// and the grid's transitions per period start.
    public static func churnPeriods(
        boundaries: [Timestamp], runDays: [(day: Int64, counts: Counts)], transitions: [Int64: ChurnCell]
    ) -> [ChurnPeriod] {
        var periods = zip(boundaries, boundaries.dropFirst()).map { ChurnPeriod(start: $0, end: $1) }
        guard !periods.isEmpty else { return [] }
        // Active just before each boundary: runs started before it minus runs ended before it.
        var active = Array(repeating: 0, count: boundaries.count)
        let days = runDays.sorted { $0.day < $1.day }
        var (next, running) = (0, Int64(0))
        for (i, b) in boundaries.enumerated() {
            while next < days.count && days[next].day < b.microseconds {
                running &+= days[next].counts.first &- days[next].counts.second
                next += 1
            }
            active[i] = Int(truncatingIfNeeded: running)
        }
        for i in periods.indices {
            periods[i].activeStart = active[i]
            periods[i].activeEnd = active[i + 1]
            guard let cell = transitions[boundaries[i].microseconds] else { continue }
            periods[i].new = Int(truncatingIfNeeded: cell.new)
            periods[i].reactivated = Int(truncatingIfNeeded: cell.reactivated)
            for reason in LapseReason.churn where cell.churned(reason) != 0 {
                periods[i].churned[reason] = Int(truncatingIfNeeded: cell.churned(reason))
            }
            periods[i].transferredIn = Int(truncatingIfNeeded: cell.transferredIn)
            periods[i].transferredOut = Int(truncatingIfNeeded: cell.transferredOut)
        }
        return periods
    }

    /// Retention cohorts of the months in `[from, to)` from the cells of their cohorts.
    public static func retentionCohorts(
        from: Timestamp, to: Timestamp, until: Timestamp, cells: [(cohort: Int64, month: Int64, delta: Int64)]
    ) -> [RetentionCohort] {
        var acc = RetentionAccumulator(from: from, to: to, until: until)
        var byCohort: [Int64: [(month: Int64, delta: Int64)]] = [:]
        for c in cells { byCohort[c.cohort, default: []].append((c.month, c.delta)) }
        for i in acc.cohorts.indices {
            let cohort = acc.cohorts[i].start
            let mine = (byCohort[cohort.microseconds] ?? []).sorted { $0.month < $1.month }
            let size = Int(truncatingIfNeeded: mine.first { $0.month == cohort.microseconds }?.delta ?? 0)
            acc.cohorts[i].size = size
            acc.cohorts[i].retained[0] = size
            var (next, running) = (0, Int64(0))
            for k in acc.cohorts[i].retained.indices.dropFirst() {
                let t = ReportCalendar.addingMonths(k, to: cohort).microseconds
                while next < mine.count && mine[next].month <= t {
                    if mine[next].month != cohort.microseconds { running &+= mine[next].delta }
                    next += 1
                }
                acc.cohorts[i].retained[k] = Int(truncatingIfNeeded: running)
            }
        }
        return acc.cohorts
    }

    /// Trials over a calendar grid from the trial counts per day of the grid's range.
    public static func trialPeriods(boundaries: [Timestamp], days: [(day: Int64, counts: Counts)]) -> [TrialPeriod] {
        var acc = TrialAccumulator(boundaries: boundaries)
        for (day, counts) in days {
            // Boundaries are midnights, so a day lies wholly in one period.
            var (lo, hi) = (0, boundaries.count)
            while lo < hi {
                let mid = (lo + hi) / 2
                if boundaries[mid].microseconds <= day { lo = mid + 1 } else { hi = mid }
            }
            let i = lo - 1
            guard i >= 0, i < acc.periods.count else { continue }
            acc.periods[i].started &+= Int(truncatingIfNeeded: counts.first)
            acc.periods[i].converted &+= Int(truncatingIfNeeded: counts.second)
        }
        return acc.periods
    }
}

/// A monthly transaction as MRR's correction for the instant's own day reads it.
public struct MRRService: Sendable, Hashable {
    public var subscriber: String
    public var currency: String
    public var start: Timestamp
    /// When service ends (nil: never).
    public var end: Timestamp?
    public var monthly: MonthlyAmount
    /// The UTC date the transaction occurred on (its exchange rate's), for MRR in a reporting currency.
    public var occurred: FXDay?

    public init(
        subscriber: String, currency: String, start: Timestamp, end: Timestamp?, monthly: MonthlyAmount, occurred: FXDay? = nil
    ) {
        self.subscriber = subscriber
        self.currency = currency
        self.start = start
        self.end = end
        self.monthly = monthly
        self.occurred = occurred
    }

    func covers(_ t: Timestamp) -> Bool { start <= t && (end.map { t < $0 } ?? true) }
}

extension ReportRollup {
    /// MRR per currency at `at`: the cells (days, then hours) give the state just before an hour `boundary`
    /// near the instant (`amounts` summed per currency and denominator, `subscribers` per currency);
    /// `changed` holds every monthly transaction of the subscribers whose service starts or ends between the
    /// boundary and `at`, whose difference between the two instants is added. Currencies with paying
    /// subscribers, sorted.
    public static func mrr(
        at: Timestamp, boundary: Timestamp, amounts: [(currency: String, amount: MonthlyAmount)], subscribers: [String: Int64],
        changed: [MRRService]
    ) throws(ReportOverflow) -> [(currency: String, mrrMinor: Int128, activePaid: Int)] {
        let before = Timestamp(microseconds: boundary.microseconds &- 1)
        var sums: [String: [MonthlyAmount]] = [:]
        for (currency, amount) in amounts { sums[currency, default: []].append(amount) }
        var counts = subscribers
        for (_, services) in Dictionary(grouping: changed, by: { [$0.subscriber, $0.currency] }) {
            let currency = services[0].currency
            let now = services.contains { $0.covers(at) }
            let then = services.contains { $0.covers(before) }
            counts[currency, default: 0] &+= (now ? 1 : 0) &- (then ? 1 : 0)
            for s in services {
                if s.covers(at) { sums[currency, default: []].append(s.monthly) }
                if s.covers(before) {
                    sums[currency, default: []].append(MonthlyAmount(numerator: 0 - s.monthly.numerator, denominator: s.monthly.denominator))
                }
            }
        }
        var lines: [(currency: String, mrrMinor: Int128, activePaid: Int)] = []
        for (currency, n) in counts.sorted(by: { $0.key < $1.key }) where n > 0 {
            lines.append((currency, try MonthlyAmount.roundedSum(sums[currency] ?? []), Int(truncatingIfNeeded: n)))
        }
        return lines
    }
}

extension ReportRollup {
    /// The hour boundary nearest `at` (microseconds) where MRR's cells stop: the day cells before `midnight` (the
    /// start of the boundary's day), then that day's hour cells before `boundary`. Between the boundary and the
    /// instant (`lo`...`hi`, at most half an hour) a report reads the subscribers from the facts.
    public static func nearestHour(_ at: Timestamp) -> (boundary: Int64, midnight: Int64, lo: Int64, hi: Int64) {
        let t = at.microseconds
        let length: Int64 = 3_600_000_000
        let hour = hourStart(at)
        let boundary = t &- hour <= hour &+ length &- t ? hour : hour &+ length
        let midnight = ReportInterval.day.periodStart(containing: Timestamp(microseconds: boundary)).microseconds
        return (boundary, midnight, min(boundary, t), max(boundary, t))
    }

    /// The midnight nearest `at` (microseconds) where day cells without hours stop (as `nearestHour`'s, with
    /// `midnight` the boundary itself), and the span between the two read from the facts: at most twelve hours.
    public static func nearestMidnight(_ at: Timestamp) -> (boundary: Int64, midnight: Int64, lo: Int64, hi: Int64) {
        let t = at.microseconds
        let day: Int64 = 86_400_000_000
        let midnight = ReportInterval.day.periodStart(containing: at).microseconds
        let boundary = t &- midnight <= day / 2 ? midnight : midnight &+ day
        return (boundary, boundary, min(boundary, t), max(boundary, t))
    }

    /// What MRR in a reporting currency converts at `at`, from the cells (`report_mrr_rate_days` and
    /// `report_paid_any_days`, then their hours, summed up to the hour `boundary`: the state just before it) and
    /// `changed`, every monthly transaction of the subscribers whose service starts or ends between the boundary
    /// and `at` (each with its `occurred` date). The exact monthly amounts per currency, rate date and denominator (none
    /// zero), and the subscribers holding any of them: `ConvertedMRR.total` converts the groups as from the facts.
    /// `cells` keep the numerators per denominator as stored (each transaction's reduced one), unreduced.
    public static func convertedMRR(
        at: Timestamp, boundary: Timestamp, cells: [(currency: String, day: FXDay, denominator: Int128, numerator: Int128)],
        subscribers: Int64, changed: [MRRService]
    ) throws(ReportOverflow) -> (groups: [ConvertedMRR.Group], activePaid: Int) {
        struct Slot: Hashable {
            var currency: String
            var day: FXDay
            var denominator: Int128
        }
        let before = Timestamp(microseconds: boundary.microseconds &- 1)
        var sums: [Slot: Int128] = [:]
        func add(_ slot: Slot, _ n: Int128) throws(ReportOverflow) {
            let (sum, overflow) = sums[slot, default: 0].addingReportingOverflow(n)
            guard !overflow else { throw ReportOverflow(what: "the monthly amounts of \(slot.currency)") }
            sums[slot] = sum
        }
        for c in cells { try add(Slot(currency: c.currency, day: c.day, denominator: c.denominator), c.numerator) }
        var count = subscribers
        for (_, services) in Dictionary(grouping: changed, by: \.subscriber) {
            count &+= (services.contains { $0.covers(at) } ? 1 : 0) &- (services.contains { $0.covers(before) } ? 1 : 0)
            for s in services {
                guard let day = s.occurred else { throw ReportOverflow(what: "the rate date of a monthly amount") }
                let slot = Slot(currency: s.currency, day: day, denominator: s.monthly.denominator)
                if s.covers(at) { try add(slot, s.monthly.numerator) }
                if s.covers(before) { try add(slot, 0 - s.monthly.numerator) }
            }
        }
        let out = sums.compactMap { slot, n in
            n == 0
                ? nil : ConvertedMRR.Group(currency: slot.currency, day: slot.day, amount: MonthlyAmount(numerator: n, denominator: slot.denominator))
        }
        return (out, Int(truncatingIfNeeded: count))
    }

    /// Revenue rows of two disjoint sets of transactions over the same boundaries, added per period and
    /// currency (a currency listed in either is listed).
    public static func merge(_ a: [RevenuePeriod], _ b: [RevenuePeriod]) -> [RevenuePeriod] {
        guard !b.isEmpty else { return a }
        guard !a.isEmpty else { return b }
        var rows: [RevenueRowKey: RevenuePeriod] = [:]
        for row in a + b {
            let k = RevenueRowKey(start: row.start, currency: row.currency)
            if var sum = rows[k] {
                sum.figures += row.figures
                sum.deferredStart += row.deferredStart
                sum.deferredEnd += row.deferredEnd
                rows[k] = sum
            } else {
                rows[k] = row
            }
        }
        return rows.values.sorted { ($0.start, $0.currency) < ($1.start, $1.currency) }
    }

    private struct RevenueRowKey: Hashable {
        var start: Timestamp
        var currency: String
    }
}
