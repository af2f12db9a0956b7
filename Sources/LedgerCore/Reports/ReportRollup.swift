import Foundation

/// What one subscriber adds to the report rollups, which the projection keeps summed per calendar period
/// so that a report reads a few rows per period instead of every fact in its range (docs/reports.md,
/// "Rollups").
///
/// Every cell is exact: the reports computed from the sums equal the ones computed fact by fact.
/// - revenue: per month, entitlement key and currency, the change of each transaction's cumulative figures
///   (`RevenueSchedule.cumulative`) across the month, and how many transactions move in it. The changes
///   telescope, so the sum of the months before a month boundary is that boundary's cumulative figures,
///   rounding included. The same per day (`revenueDays`) answers day and week grids; an append leaves
///   its day cells to a background worker (`pendingRevenue`).
/// - trials: per day and key, trials started and converted.
/// - runs: per day and key, paid runs started and ended; "active just before midnight b" is
///   `#(start < b) − #(end < b)`, because one subscriber's runs of one key never overlap.
/// - churn: per interval (day, week, month), period and key, the new, reactivated and churned subscribers,
///   found where a subscriber's runs start or end.
/// - retention: per cohort month, key and later month, +1 where a run starts covering the month boundary
///   and −1 after it stops; the cell of the cohort's own month holds the cohort's size.
/// - MRR: per day, key, currency and denominator, the monthly amounts of paid transactions starting and
///   ending service that day; per day, key and currency, the subscriber's paid coverage (its transactions'
///   service merged) starting and ending; the same per hour. What lies between the hour boundary nearest
///   the instant and the instant is read from the transactions.
///
/// A change to a subscriber adds `change(from: old, to: new)`: the new facts' cells minus the old ones'.
public struct ReportRollup: Sendable, Hashable {
    public struct RevenueKey: Sendable, Hashable {
        /// The period's start: a month in `revenue`, a day in `revenueDays`.
        public var period: Int64
        public var entitlement: String
        public var currency: String
    }

    /// A day's trial cell of one store, country and product (`CellDimensions`).
    public struct TrialDimensionKey: Sendable, Hashable {
        public var day: Int64
        public var entitlement: String
        public var dimensions: CellDimensions
    }

    /// A month's revenue cell of one store, country and product (`CellDimensions`).
    public struct RevenueDimensionKey: Sendable, Hashable {
        public var period: Int64
        public var entitlement: String
        public var currency: String
        public var dimensions: CellDimensions
    }

    public struct RevenueCell: Sendable, Hashable {
        /// Transactions whose money moves in the month (the report lists a currency only if one does).
        public var transactions: Int64 = 0
        public var figures = RevenueFigures()
        /// The deferred balance left by the transactions that settle in the month. A report leaves out the
        /// transactions settled before its range, as the fact-by-fact sum does, by taking this off its
        /// balances.
        public var settledDeferred: Int128 = 0

        public init(transactions: Int64 = 0, figures: RevenueFigures = RevenueFigures(), settledDeferred: Int128 = 0) {
            self.transactions = transactions
            self.figures = figures
            self.settledDeferred = settledDeferred
        }
    }

    public struct DayKey: Sendable, Hashable {
        public var day: Int64
        public var entitlement: String
    }

    public struct Counts: Sendable, Hashable {
        /// Trials started, or runs started.
        public var first: Int64 = 0
        /// Trials converted, or runs ended.
        public var second: Int64 = 0

        public init(first: Int64 = 0, second: Int64 = 0) {
            self.first = first
            self.second = second
        }
    }

    public struct ChurnKey: Sendable, Hashable {
        public var interval: ReportInterval
        public var period: Int64
        public var entitlement: String
    }

    public struct ChurnCell: Sendable, Hashable {
        public var new: Int64 = 0
        public var reactivated: Int64 = 0
        public var refund: Int64 = 0
        public var involuntary: Int64 = 0
        public var voluntary: Int64 = 0
        public var other: Int64 = 0
        /// Runs begun by a purchase moving in, and ended by one moving out (docs/identity.md).
        public var transferredIn: Int64 = 0
        public var transferredOut: Int64 = 0

        public init(
            new: Int64 = 0, reactivated: Int64 = 0, refund: Int64 = 0, involuntary: Int64 = 0, voluntary: Int64 = 0,
            other: Int64 = 0, transferredIn: Int64 = 0, transferredOut: Int64 = 0
        ) {
            (self.new, self.reactivated, self.refund) = (new, reactivated, refund)
            (self.involuntary, self.voluntary, self.other) = (involuntary, voluntary, other)
            (self.transferredIn, self.transferredOut) = (transferredIn, transferredOut)
        }

        /// Subscribers whose run ended for `reason` (`.transferred`: `transferredOut`).
        public func churned(_ reason: LapseReason) -> Int64 {
            switch reason {
            case .refund: refund
            case .involuntary: involuntary
            case .voluntary: voluntary
            case .other: other
            case .transferred: transferredOut
            }
        }
    }

    public struct RetentionKey: Sendable, Hashable {
        public var cohort: Int64
        public var entitlement: String
        public var month: Int64
    }

    public struct MRRKey: Sendable, Hashable {
        public var day: Int64
        public var entitlement: String
        public var currency: String
        /// The monthly amounts' (reduced) denominator: amounts are summed exactly per denominator.
        public var denominator: Int128
    }

    public struct MRRCell: Sendable, Hashable {
        /// Numerators of the monthly amounts whose service starts that day, and of those whose service ends.
        public var started: Int128 = 0
        public var ended: Int128 = 0

        public init(started: Int128 = 0, ended: Int128 = 0) {
            self.started = started
            self.ended = ended
        }
    }

    /// `MRRKey` with the UTC date its transaction occurred on, whose exchange rate converts it (semantics.md
    /// section 6): converted MRR rounds once per conversion factor, so the cells keep the amounts apart per date.
    public struct MRRRateKey: Sendable, Hashable {
        public var day: Int64
        public var entitlement: String
        public var currency: String
        /// Midnight (UTC, microseconds) of the day the transaction occurred.
        public var occurredDay: Int64
        public var denominator: Int128
    }

    /// `MRRKey` per value of one of store, country and product (`''`: not known): MRR grouped or filtered by one
    /// of them. A transaction has one value of each, so it counts once per dimension.
    public struct MRRDimensionKey: Sendable, Hashable {
        public var day: Int64
        public var entitlement: String
        public var currency: String
        public var dimension: ReportDimension
        public var value: String
        public var denominator: Int128
    }

    /// `CurrencyDayKey` per value of one dimension: the paid coverage of the subscriber's transactions of that value.
    public struct PaidDimensionKey: Sendable, Hashable {
        public var day: Int64
        public var entitlement: String
        public var currency: String
        public var dimension: ReportDimension
        public var value: String
    }

    public struct CurrencyDayKey: Sendable, Hashable {
        public var day: Int64
        public var entitlement: String
        public var currency: String
    }

    public var revenue: [RevenueKey: RevenueCell] = [:]
    /// The same figures per day, for revenue on day and week grids. The rebuild writes them; an append only
    /// records its transactions' change in `pendingRevenue`, which a background worker turns into day cells
    /// (about thirty cells per monthly transaction, too many to write under the append lock).
    public var revenueDays = RevenueDayCells()
    /// Transactions whose day cells are still to be added (+1) or taken off (−1), net per transaction.
    public var pendingRevenue: [RevenueTransaction: Int64] = [:]
    public var mrr: [MRRKey: MRRCell] = [:]
    /// Paid coverage started (`first`) and ended (`second`) per day: MRR's count of paying subscribers.
    public var paid: [CurrencyDayKey: Counts] = [:]
    /// `mrr` and `paid` per hour (keys hold the hour's start): MRR at an instant within a day adds the hours
    /// of that day up to the hour boundary nearest the instant, so at most half an hour is read from the
    /// transactions.
    public var mrrHours: [MRRKey: MRRCell] = [:]
    public var paidHours: [CurrencyDayKey: Counts] = [:]
    /// `mrr` per date of the conversion rate, and the paid coverage over every currency: MRR in a reporting
    /// currency (its `active_paid` counts a subscriber paying in two currencies once).
    public var mrrRates: [MRRRateKey: MRRCell] = [:]
    public var paidAny: [DayKey: Counts] = [:]
    /// `mrr` and `paid` per store, country and product, one dimension at a time (schema 0036).
    public var mrrDimensions: [MRRDimensionKey: MRRCell] = [:]
    public var paidDimensions: [PaidDimensionKey: Counts] = [:]
    /// `mrrRates` and `paidAny` per hour (keys hold the hour's start, schema 0040), as `mrrHours` is to `mrr`:
    /// converted MRR at an instant far from midnight reads at most half an hour of transactions. Not kept per
    /// dimension: on ten million events those hour cells were 8.3 million rows (docs/reports.md).
    public var mrrRateHours: [MRRRateKey: MRRCell] = [:]
    public var paidAnyHours: [DayKey: Counts] = [:]
    public var trials: [DayKey: Counts] = [:]
    public var runs: [DayKey: Counts] = [:]
    public var churn: [ChurnKey: ChurnCell] = [:]
    public var retention: [RetentionKey: Int64] = [:]
    /// Reports II (`ReportsIIRollup.swift`): refunds per day, conversion per first-seen day, LTV per cohort.
    public var refundDays: [RefundKey: RefundCell] = [:]
    public var refundRepeats: [RefundRepeatKey: Int64] = [:]
    public var conversion: [ConversionKey: Int64] = [:]
    /// Conversion grouped by entitlement: holders of each entitlement, and each subscriber with what they hold.
    public var conversionHolders: [ConversionHolderKey: Int64] = [:]
    public var ltv: [LTVKey: LTVCell] = [:]
    /// MRR movement (`MRRMovementRollup.swift`): exact amounts per part and denominator, subscribers per part.
    public var movement: [MovementKey: Int128] = [:]
    /// Churn by store, country and product (`ChurnDimensionRollup.swift`): active spans per day, transitions per
    /// grid period.
    public var churnActiveDays: [ActiveDayKey: Counts] = [:]
    public var churnMoves: [ChurnMoveKey: ChurnCell] = [:]
    /// `trials` per store, country and product of the trial's transaction too.
    public var trialDimensions: [TrialDimensionKey: Counts] = [:]
    /// `revenue` per store, country and product too, for filtered and grouped revenue on a month grid.
    public var revenueDimensions: [RevenueDimensionKey: RevenueCell] = [:]

    public init() {}

    /// Adds one subscriber's cells in place (the rebuild sums every subscriber this way).
    public mutating func add(_ facts: SubscriberFacts) {
        for t in facts.transactions {
            if Self.rollsUpDays(t) {
                // The day changes once; a month's change is the sum of its days' (months start at midnight).
                let (first, changes, deferred) = Self.revenueChanges(t, interval: .day, sign: 1)
                addDays(t, first: first, changes: changes, deferred: deferred)
                if Self.rollsUp(t) { addMonths(t, firstDay: first, dayChanges: changes, deferred: deferred, sign: 1) }
            } else {
                addRevenue(t, sign: 1)
            }
            addMRR(t, sign: 1)
            addRefunds(t, sign: 1)
        }
        addSubscriberCells(facts, sign: 1)
        addCoverage(facts.transactions, sign: 1)
        addTrials(facts.trials, sign: 1)
        for (key, runs) in Dictionary(grouping: facts.runs, by: \.entitlement) { addRuns(runs, key: key, sign: 1) }
    }

    /// What replacing `old` facts (nil: none yet) by `new` ones changes; only the parts that differ are
    /// computed, so an append that adds one transaction costs that transaction's cells.
    public static func change(from old: SubscriberFacts?, to new: SubscriberFacts) -> ReportRollup {
        var r = ReportRollup()
        r.addChange(from: old, to: new)
        r.prune()
        return r
    }

    /// Adds `change(from: old, to: new)` in place, without dropping the cells that sum to zero (`pruned`):
    /// a group of appends sums its subscribers' changes into one rollup this way.
    public mutating func addChange(from old: SubscriberFacts?, to new: SubscriberFacts) {
        let oldTransactions = old?.transactions ?? []
        let (removed, added) = Self.difference(oldTransactions, new.transactions)
        for t in removed {
            addRevenue(t, sign: -1)
            addMRR(t, sign: -1)
            addRefunds(t, sign: -1)
            if Self.rollsUpDays(t) { pendingRevenue[t, default: 0] &-= 1 }
        }
        for t in added {
            addRevenue(t, sign: 1)
            addMRR(t, sign: 1)
            addRefunds(t, sign: 1)
            if Self.rollsUpDays(t) { pendingRevenue[t, default: 0] &+= 1 }
        }
        if !removed.isEmpty || !added.isEmpty {
            // Only the keys whose paid coverage changed: a purchase within the coverage already held changes none.
            let before = Self.coverage(oldTransactions)
            let after = Self.coverage(new.transactions)
            for (key, spans) in before where !Self.sameSpans(spans, after[key]) { addCoverage(key, spans, sign: -1) }
            for (key, spans) in after where !Self.sameSpans(spans, before[key]) { addCoverage(key, spans, sign: 1) }
        }
        if Self.subscriberCellsChanged(old, new, transactionsChanged: !removed.isEmpty || !added.isEmpty) {
            if let old { addSubscriberCells(old, sign: -1) }
            addSubscriberCells(new, sign: 1)
        }
        if old?.trials != new.trials {
            if let old { addTrials(old.trials, sign: -1) }
            addTrials(new.trials, sign: 1)
        }
        if old?.runs != new.runs {
            let oldRuns = Dictionary(grouping: old?.runs ?? [], by: \.entitlement)
            let newRuns = Dictionary(grouping: new.runs, by: \.entitlement)
            for key in Set(oldRuns.keys).union(newRuns.keys) where oldRuns[key] != newRuns[key] {
                if let runs = oldRuns[key] { addRuns(runs, key: key, sign: -1) }
                if let runs = newRuns[key] { addRuns(runs, key: key, sign: 1) }
            }
        }
    }

    /// The transactions of `old` not in `new`, and those of `new` not in `old` (as sets). Facts list their
    /// transactions in a stable order, so the common beginning is skipped by comparing in step; the rest
    /// is looked up in a set only when it is long.
    static func difference(
        _ old: [RevenueTransaction], _ new: [RevenueTransaction]
    ) -> (removed: [RevenueTransaction], added: [RevenueTransaction]) {
        var common = 0
        while common < old.count, common < new.count, old[common] == new[common] { common += 1 }
        func missing(_ list: ArraySlice<RevenueTransaction>, from other: [RevenueTransaction]) -> [RevenueTransaction] {
            guard !list.isEmpty else { return [] }
            if list.count * other.count <= 256 { return list.filter { !other.contains($0) } }
            let set = Set(other)
            return list.filter { !set.contains($0) }
        }
        return (missing(old[common...], from: new), missing(new[common...], from: old))
    }

    private static func sameSpans(_ a: [(start: Timestamp, end: Timestamp?)], _ b: [(start: Timestamp, end: Timestamp?)]?) -> Bool {
        guard let b, a.count == b.count else { return false }
        return zip(a, b).allSatisfy { $0.start == $1.start && $0.end == $1.end }
    }

    /// Adds `other` cell by cell. Counts wrap instead of trapping (they are bounded by the log's size).
    public mutating func add(_ other: ReportRollup) {
        Self.add(other.revenue, to: &revenue)
        for (k, v) in other.revenueDimensions {
            revenueDimensions[k, default: .init()].transactions &+= v.transactions
            revenueDimensions[k, default: .init()].figures += v.figures
            revenueDimensions[k, default: .init()].settledDeferred += v.settledDeferred
        }
        revenueDays.add(other.revenueDays)
        for (t, n) in other.pendingRevenue { pendingRevenue[t, default: 0] &+= n }
        for (k, v) in other.trials { trials[k, default: .init()].add(v, sign: 1) }
        for (k, v) in other.trialDimensions { trialDimensions[k, default: .init()].add(v, sign: 1) }
        for (k, v) in other.churnActiveDays { churnActiveDays[k, default: .init()].add(v, sign: 1) }
        for (k, v) in other.churnMoves { churnMoves[k, default: .init()].add(v) }
        for (k, v) in other.runs { runs[k, default: .init()].add(v, sign: 1) }
        for (k, v) in other.churn { churn[k, default: .init()].add(v) }
        for (k, v) in other.retention { retention[k, default: 0] &+= v }
        Self.add(other.mrr, to: &mrr)
        for (k, v) in other.paid { paid[k, default: .init()].add(v, sign: 1) }
        Self.add(other.mrrHours, to: &mrrHours)
        for (k, v) in other.paidHours { paidHours[k, default: .init()].add(v, sign: 1) }
        Self.add(other.mrrRates, to: &mrrRates)
        for (k, v) in other.paidAny { paidAny[k, default: .init()].add(v, sign: 1) }
        Self.add(other.mrrDimensions, to: &mrrDimensions)
        for (k, v) in other.paidDimensions { paidDimensions[k, default: .init()].add(v, sign: 1) }
        Self.add(other.mrrRateHours, to: &mrrRateHours)
        for (k, v) in other.paidAnyHours { paidAnyHours[k, default: .init()].add(v, sign: 1) }
        for (k, v) in other.refundDays { refundDays[k, default: .init()].add(v) }
        for (k, v) in other.refundRepeats { refundRepeats[k, default: 0] &+= v }
        for (k, v) in other.conversion { conversion[k, default: 0] &+= v }
        for (k, v) in other.conversionHolders { conversionHolders[k, default: 0] &+= v }
        for (k, v) in other.ltv { ltv[k, default: .init()].add(v) }
        for (k, v) in other.movement { movement[k, default: 0] &+= v }
    }

    static func add<K>(_ cells: [K: MRRCell], to sums: inout [K: MRRCell]) {
        for (k, v) in cells {
            sums[k, default: .init()].started += v.started
            sums[k, default: .init()].ended += v.ended
        }
    }

    static func add(_ cells: [RevenueKey: RevenueCell], to sums: inout [RevenueKey: RevenueCell]) {
        for (k, v) in cells {
            sums[k, default: .init()].transactions &+= v.transactions
            sums[k, default: .init()].figures += v.figures
            sums[k, default: .init()].settledDeferred += v.settledDeferred
        }
    }

    /// Drops the cells that sum to zero (a change that undoes itself writes nothing).
    mutating func prune() {
        revenue = revenue.filter { $0.value != RevenueCell() }
        revenueDays.prune()
        pendingRevenue = pendingRevenue.filter { $0.value != 0 }
        trials = trials.filter { $0.value != Counts() }
        trialDimensions = trialDimensions.filter { $0.value != Counts() }
        churnActiveDays = churnActiveDays.filter { $0.value != Counts() }
        churnMoves = churnMoves.filter { $0.value != ChurnCell() }
        runs = runs.filter { $0.value != Counts() }
        churn = churn.filter { $0.value != ChurnCell() }
        retention = retention.filter { $0.value != 0 }
        mrr = mrr.filter { $0.value != MRRCell() }
        paid = paid.filter { $0.value != Counts() }
        mrrHours = mrrHours.filter { $0.value != MRRCell() }
        paidHours = paidHours.filter { $0.value != Counts() }
        mrrRates = mrrRates.filter { $0.value != MRRCell() }
        paidAny = paidAny.filter { $0.value != Counts() }
        mrrDimensions = mrrDimensions.filter { $0.value != MRRCell() }
        paidDimensions = paidDimensions.filter { $0.value != Counts() }
        mrrRateHours = mrrRateHours.filter { $0.value != MRRCell() }
        paidAnyHours = paidAnyHours.filter { $0.value != Counts() }
        refundDays = refundDays.filter { $0.value != RefundCell() }
        refundRepeats = refundRepeats.filter { $0.value != 0 }
        conversion = conversion.filter { $0.value != 0 }
        conversionHolders = conversionHolders.filter { $0.value != 0 }
        ltv = ltv.filter { $0.value != LTVCell() }
        movement = movement.filter { $0.value != 0 }
        revenueDimensions = revenueDimensions.filter { $0.value != RevenueCell() }
    }

    /// The entitlement keys a transaction counts under: all entitlements together, then each one once.
    static func keys(_ t: RevenueTransaction) -> [String] {
        // Entitlements are distinct and sorted when validated; events stored before that rule are deduplicated.
        t.entitlements.count < 2 ? [""] + t.entitlements : [""] + Set(t.entitlements).sorted()
    }

    /// The service interval MRR counts a transaction in, `[start, serviceEnd)`; nil when it has no monthly
    /// amount or its service is empty (cut before it started).
    static func service(_ t: RevenueTransaction) -> (start: Timestamp, end: Timestamp?)? {
        guard t.monthly != nil else { return nil }
        if let end = t.serviceEnd, end <= t.serviceStart { return nil }
        return (t.serviceStart, t.serviceEnd)
    }

    mutating func addMRR(_ t: RevenueTransaction, sign: Int128) {
        guard let monthly = t.monthly, let service = Self.service(t) else { return }
        let amount = sign * monthly.numerator
        /// The amount starts in the period (day or hour, by `period`) holding the service's start, and ends in
        /// the one holding its end.
        func move<K: Hashable>(_ cells: inout [K: MRRCell], _ period: (Timestamp) -> Int64 = Self.dayStart, _ key: (Int64) -> K) {
            cells[key(period(service.start)), default: .init()].started += amount
            if let end = service.end { cells[key(period(end)), default: .init()].ended += amount }
        }
        let occurred = Self.dayStart(t.occurredAt)
        let (currency, denominator) = (t.currency, monthly.denominator)
        for key in Self.keys(t) {
            move(&mrr) { MRRKey(day: $0, entitlement: key, currency: currency, denominator: denominator) }
            move(&mrrHours, Self.hourStart) { MRRKey(day: $0, entitlement: key, currency: currency, denominator: denominator) }
            move(&mrrRates) {
                MRRRateKey(day: $0, entitlement: key, currency: currency, occurredDay: occurred, denominator: denominator)
            }
            move(&mrrRateHours, Self.hourStart) {
                MRRRateKey(day: $0, entitlement: key, currency: currency, occurredDay: occurred, denominator: denominator)
            }
            for (dimension, value) in Self.dimensionValues(t) {
                move(&mrrDimensions) {
                    MRRDimensionKey(day: $0, entitlement: key, currency: currency, dimension: dimension, value: value, denominator: denominator)
                }
            }
        }
    }

    /// The start of the UTC hour holding `t`, in microseconds.
    public static func hourStart(_ t: Timestamp) -> Int64 {
        let hour: Int64 = 3_600_000_000
        let us = t.microseconds
        return (us >= 0 ? us / hour : (us &+ 1) / hour &- 1) &* hour
    }

    /// The subscriber's paid coverage per key and currency: the union of its transactions' service.
    mutating func addCoverage(_ transactions: [RevenueTransaction], sign: Int64) {
        for (key, spans) in Self.coverage(transactions) { addCoverage(key, spans, sign: sign) }
    }

    /// Per key and currency, the union of the transactions' service as disjoint intervals, sorted.
    static func coverage(_ transactions: [RevenueTransaction]) -> [CoverageKey: [(start: Timestamp, end: Timestamp?)]] {
        var intervals: [CoverageKey: [(start: Timestamp, end: Timestamp?)]] = [:]
        for t in transactions {
            guard let service = Self.service(t) else { continue }
            for key in Self.keys(t) {
                intervals[CoverageKey(entitlement: key, currency: t.currency), default: []].append(service)
                intervals[CoverageKey(entitlement: key, currency: nil), default: []].append(service)
                for (dimension, value) in Self.dimensionValues(t) {
                    intervals[CoverageKey(entitlement: key, currency: t.currency, dimension: dimension, value: value), default: []]
                        .append(service)
                }
            }
        }
        return intervals.mapValues(Self.union)
    }

    /// One key's coverage spans: paid subscribers starting and ending, per day and per hour.
    mutating func addCoverage(_ key: CoverageKey, _ spans: [(start: Timestamp, end: Timestamp?)], sign: Int64) {
        /// Each span starts in the period (day or hour, by `period`) holding its start and ends in the one holding its end.
        func count<K: Hashable>(_ cells: inout [K: Counts], _ period: (Timestamp) -> Int64 = Self.dayStart, _ cell: (Int64) -> K) {
            for (start, end) in spans {
                cells[cell(period(start)), default: .init()].first &+= sign
                if let end { cells[cell(period(end)), default: .init()].second &+= sign }
            }
        }
        let entitlement = key.entitlement
        switch (key.currency, key.dimension) {
        case (nil, _):
            count(&paidAny) { DayKey(day: $0, entitlement: entitlement) }
            count(&paidAnyHours, Self.hourStart) { DayKey(day: $0, entitlement: entitlement) }
        case (let currency?, let dimension?):
            count(&paidDimensions) {
                PaidDimensionKey(day: $0, entitlement: entitlement, currency: currency, dimension: dimension, value: key.value)
            }
        case (let currency?, nil):
            count(&paid) { CurrencyDayKey(day: $0, entitlement: entitlement, currency: currency) }
            count(&paidHours, Self.hourStart) { CurrencyDayKey(day: $0, entitlement: entitlement, currency: currency) }
        }
    }

    struct CoverageKey: Hashable {
        var entitlement: String
        /// nil: every currency together (`paidAny`).
        var currency: String?
        /// With a dimension, the coverage of the transactions of `value` only (`paidDimensions`).
        var dimension: ReportDimension? = nil
        var value: String = ""
    }

    /// A transaction's value of each dimension MRR keeps cells for (`''`: not known).
    static func dimensionValues(_ t: RevenueTransaction) -> [(ReportDimension, String)] {
        let cell = CellDimensions(t)
        return mrrCellDimensions.map { ($0, cell.value(of: $0)) }
    }

    /// The dimensions MRR keeps cells for, one at a time (schema 0036).
    public static let mrrCellDimensions: [ReportDimension] = [.store, .country, .productID]

    /// The union of half-open intervals (`end` nil: never ends) as disjoint intervals, sorted.
    static func union(_ list: [(start: Timestamp, end: Timestamp?)]) -> [(start: Timestamp, end: Timestamp?)] {
        var out: [(start: Timestamp, end: Timestamp?)] = []
        for i in list.sorted(by: { $0.start < $1.start }) {
            if let last = out.last, last.end.map({ i.start <= $0 }) ?? true {
                out[out.count - 1].end = last.end.flatMap { e in i.end.map { max(e, $0) } }
            } else {
                out.append(i)
            }
        }
        return out
    }

    /// Month cells one transaction may take (months it moves in × entitlement keys). A transaction over it
    /// (a window of years, or dozens of entitlements) is left to the facts, which revenue reads beside the
    /// rollup (`report_transactions.revenue_rolled_up`), so one event never writes thousands of cells under
    /// the append lock.
    public static let maxRevenueCells = 64

    /// Whether the transaction's revenue is in the month cells (else the report reads it from the facts).
    public static func rollsUp(_ t: RevenueTransaction) -> Bool {
        var firstMove = min(t.occurredAt, t.start)
        for r in t.refunds { firstMove = min(firstMove, r.at) }
        let (a, b) = (firstMove.civil, t.settledAt.civil)
        let months = (b.year - a.year) * 12 + (b.month - a.month) + 1
        return months * Self.keys(t).count <= maxRevenueCells
    }

    mutating func addRevenue(_ t: RevenueTransaction, sign: Int128) {
        guard Self.rollsUp(t) else { return }
        let (first, changes, deferred) = Self.revenueChanges(t, interval: .month, sign: sign)
        var period = first
        for (i, change) in changes.enumerated() {
            let dimensions = CellDimensions(t)
            for key in Self.keys(t) {
                let k = RevenueKey(period: period.microseconds, entitlement: key, currency: t.currency)
                revenue[k, default: .init()].transactions &+= Int64(sign)
                revenue[k, default: .init()].figures += change
                if i == changes.count - 1 { revenue[k, default: .init()].settledDeferred += deferred }
                let d = RevenueDimensionKey(period: k.period, entitlement: key, currency: t.currency, dimensions: dimensions)
                revenueDimensions[d, default: .init()].transactions &+= Int64(sign)
                revenueDimensions[d, default: .init()].figures += change
                if i == changes.count - 1 { revenueDimensions[d, default: .init()].settledDeferred += deferred }
            }
            period = ReportInterval.month.next(after: period)
        }
    }

    /// Day cells one transaction may take (days it moves in × entitlement keys): a yearly subscription with
    /// one entitlement takes about 730. A transaction over it is left to the facts
    /// (`report_transactions.revenue_rolled_up_days`), so that no transaction costs thousands of cells.
    public static let maxRevenueDayCells = 1024

    /// Whether the transaction's revenue is in the day cells (else day and week grids read it from the facts).
    public static func rollsUpDays(_ t: RevenueTransaction) -> Bool {
        var firstMove = min(t.occurredAt, t.start)
        for r in t.refunds { firstMove = min(firstMove, r.at) }
        let a = ReportInterval.day.periodStart(containing: firstMove).microseconds
        let b = ReportInterval.day.periodStart(containing: t.settledAt).microseconds
        let (span, overflow) = b.subtractingReportingOverflow(a)
        guard !overflow, span >= 0 else { return false }
        let days = span / 86_400_000_000 + 1
        return days <= Int64(maxRevenueDayCells / Self.keys(t).count)
    }

    /// Adds a queued transaction's day cells `change` times (negative: takes them off). The queue holds only
    /// transactions that `rollsUpDays`, so its size is not checked again (a report that filtered the queue by
    /// entitlement passes the transaction without its entitlements, as one key).
    public mutating func addQueuedRevenueDays(_ t: RevenueTransaction, change: Int64) {
        let sign: Int128 = change < 0 ? -1 : 1
        for _ in 0..<change.magnitude { addDays(t, sign: sign) }
    }

    private mutating func addDays(_ t: RevenueTransaction, sign: Int128) {
        let (first, changes, deferred) = Self.revenueChanges(t, interval: .day, sign: sign)
        addDays(t, first: first, changes: changes, deferred: deferred, transactions: Int64(sign))
    }

    private mutating func addDays(
        _ t: RevenueTransaction, first: Timestamp, changes: [RevenueFigures], deferred: Int128, transactions: Int64 = 1
    ) {
        let day = RevenueDayCells.day(first.microseconds)
        for key in Self.keys(t) {
            revenueDays.add(
                entitlement: key, currency: t.currency, first: day, changes: changes, transactions: transactions,
                settledDeferred: deferred)
        }
    }

    /// Month cells from a transaction's day changes (`revenueChanges(t, interval: .day, …)`), equal to
    /// `addRevenue`'s: each month's change is the sum of its days' changes, and the months are those of its
    /// first and last day and every one between.
    private mutating func addMonths(
        _ t: RevenueTransaction, firstDay: Timestamp, dayChanges: [RevenueFigures], deferred: Int128, sign: Int128
    ) {
        let keys = Self.keys(t)
        var month = ReportInterval.month.periodStart(containing: firstDay)
        var next = ReportInterval.month.next(after: month).microseconds
        var sum = RevenueFigures()
        let dimensions = CellDimensions(t)
        func flush(last: Bool) {
            for key in keys {
                let k = RevenueKey(period: month.microseconds, entitlement: key, currency: t.currency)
                revenue[k, default: .init()].transactions &+= Int64(sign)
                revenue[k, default: .init()].figures += sum
                if last { revenue[k, default: .init()].settledDeferred += deferred }
                let d = RevenueDimensionKey(period: k.period, entitlement: key, currency: t.currency, dimensions: dimensions)
                revenueDimensions[d, default: .init()].transactions &+= Int64(sign)
                revenueDimensions[d, default: .init()].figures += sum
                if last { revenueDimensions[d, default: .init()].settledDeferred += deferred }
            }
        }
        var day = firstDay.microseconds
        for change in dayChanges {
            if day >= next {
                flush(last: false)
                month = Timestamp(microseconds: next)
                next = ReportInterval.month.next(after: month).microseconds
                sum = RevenueFigures()
            }
            sum += change
            day &+= 86_400_000_000
        }
        flush(last: true)
    }

    /// The transaction's figures period by period, exactly as `RevenueAccumulator` sees them at the
    /// interval's boundaries (nothing up to its first movement, `cumulative(before:)` until it settles, final
    /// after): the start of the period of its first movement, the change of each period from there to the
    /// period it settles in, and the deferred balance it leaves, all times `sign`.
    static func revenueChanges(
        _ t: RevenueTransaction, interval: ReportInterval, sign: Int128
    ) -> (first: Timestamp, changes: [RevenueFigures], settledDeferred: Int128) {
        let schedule = RevenueSchedule(t)
        var firstMove = min(t.occurredAt, t.start)
        for r in t.refunds { firstMove = min(firstMove, r.at) }
        let settled = t.settledAt
        let final = schedule.cumulative(before: Timestamp(microseconds: settled.microseconds &+ 1))
        func seen(_ b: Timestamp) -> RevenueFigures {
            b <= firstMove ? RevenueFigures() : b <= settled ? schedule.cumulative(before: b) : final
        }
        let first = interval.periodStart(containing: firstMove)
        let last = interval.periodStart(containing: settled)
        var changes: [RevenueFigures] = []
        var period = first
        var previous = RevenueFigures()
        while period <= last {
            let next = interval.next(after: period)
            let now = seen(next)
            changes.append(sign < 0 ? previous - now : now - previous)
            previous = now
            period = next
        }
        return (first, changes, sign * final.deferred)
    }

    /// The rollup without the cells that sum to zero.
    public func pruned() -> ReportRollup {
        var r = self
        r.prune()
        return r
    }

    /// Trials as the report counts them: over all entitlements a trial transaction once (its earliest
    /// start, converted if any entitlement converted); per entitlement, once per transaction.
    mutating func addTrials(_ facts: [TrialFact], sign: Int64) {
        var all: [UUID: (start: Timestamp, converted: Bool)] = [:]
        var each: [TrialGroup: (start: Timestamp, converted: Bool)] = [:]
        var dimensions: [UUID: CellDimensions] = [:]
        for t in facts {
            if dimensions[t.eventID] == nil {
                dimensions[t.eventID] = CellDimensions(store: t.store, country: t.country ?? "", product: t.productID)
            }
            if let seen = all[t.eventID] {
                all[t.eventID] = (min(seen.start, t.start), seen.converted || t.converted)
            } else {
                all[t.eventID] = (t.start, t.converted)
            }
            let g = TrialGroup(eventID: t.eventID, entitlement: t.entitlement)
            if let seen = each[g] {
                each[g] = (min(seen.start, t.start), seen.converted || t.converted)
            } else {
                each[g] = (t.start, t.converted)
            }
        }
        func count(_ start: Timestamp, _ converted: Bool, _ key: String, _ id: UUID) {
            let day = ReportInterval.day.periodStart(containing: start).microseconds
            let counts = Counts(first: 1, second: converted ? 1 : 0)
            trials[DayKey(day: day, entitlement: key), default: .init()].add(counts, sign: sign)
            let k = TrialDimensionKey(day: day, entitlement: key, dimensions: dimensions[id] ?? .unknown)
            trialDimensions[k, default: .init()].add(counts, sign: sign)
        }
        for (id, trial) in all { count(trial.start, trial.converted, "", id) }
        for (g, trial) in each { count(trial.start, trial.converted, g.entitlement, g.eventID) }
    }

    private struct TrialGroup: Hashable {
        var eventID: UUID
        var entitlement: String
    }

    /// One key's runs (sorted by start, never overlapping): their starts and ends per day, the churn
    /// transitions of every interval, and the retention cells.
    mutating func addRuns(_ list: [PaidRun], key: String, sign: Int64) {
        guard let firstStart = list.first?.start else { return }
        for run in list {
            let start = ReportInterval.day.periodStart(containing: run.start).microseconds
            runs[DayKey(day: start, entitlement: key), default: .init()].first &+= sign
            if let end = run.end {
                let day = ReportInterval.day.periodStart(containing: end).microseconds
                runs[DayKey(day: day, entitlement: key), default: .init()].second &+= sign
            }
        }
        // Churn: a subscriber's state can only differ between a period's two ends if a run starts or ends
        // inside it.
        func active(justBefore t: Timestamp) -> Bool {
            // The last run starting before t is the only one that can hold it.
            var (lo, hi) = (0, list.count)
            while lo < hi {
                let mid = (lo + hi) / 2
                if list[mid].start < t { lo = mid + 1 } else { hi = mid }
            }
            return lo > 0 && list[lo - 1].isActive(justBefore: t)
        }
        for interval in ReportInterval.allCases {
            var periods = Set<Timestamp>()
            for run in list {
                periods.insert(interval.periodStart(containing: run.start))
                if let end = run.end { periods.insert(interval.periodStart(containing: end)) }
            }
            for a in periods {
                let b = interval.next(after: a)
                let before = active(justBefore: a)
                let after = active(justBefore: b)
                guard before != after else { continue }
                let k = ChurnKey(interval: interval, period: a.microseconds, entitlement: key)
                if before {
                    let last = Self.lastRunEnded(in: list, from: a, before: b).map { list[$0] }
                    churn[k, default: .init()].count(last?.lapse ?? .other, sign: sign)
                } else if Self.runActive(justBefore: b, in: list)?.transferredIn == true {
                    churn[k, default: .init()].transferredIn &+= sign
                } else if firstStart >= a {
                    churn[k, default: .init()].new &+= sign
                } else {
                    churn[k, default: .init()].reactivated &+= sign
                }
            }
        }
        // Retention: run r covers the month boundaries t with start < t <= end.
        let cohort = ReportCalendar.monthStart(firstStart)
        retention[RetentionKey(cohort: cohort.microseconds, entitlement: key, month: cohort.microseconds), default: 0] &+= sign
        for run in list {
            let first = ReportCalendar.addingMonths(1, to: ReportCalendar.monthStart(run.start))
            let k = RetentionKey(cohort: cohort.microseconds, entitlement: key, month: first.microseconds)
            guard let end = run.end else {
                retention[k, default: 0] &+= sign
                continue
            }
            let last = ReportCalendar.monthStart(end)
            guard last >= first else { continue }
            retention[k, default: 0] &+= sign
            let after = ReportCalendar.addingMonths(1, to: last)
            retention[RetentionKey(cohort: cohort.microseconds, entitlement: key, month: after.microseconds), default: 0] &-= sign
        }
    }
}

extension ReportRollup {
    /// The run of `list` (sorted by start, disjoint) that is active just before `t`.
    static func runActive(justBefore t: Timestamp, in list: [PaidRun]) -> PaidRun? {
        activeRun(justBefore: t, in: list).map { list[$0] }
    }

    /// The index of the run of `list` (sorted by start, disjoint) active just before `t`.
    static func activeRun(justBefore t: Timestamp, in list: [PaidRun]) -> Int? {
        var (lo, hi) = (0, list.count)
        while lo < hi {
            let mid = (lo + hi) / 2
            if list[mid].start < t { lo = mid + 1 } else { hi = mid }
        }
        return lo > 0 && list[lo - 1].isActive(justBefore: t) ? lo - 1 : nil
    }

    /// The index of the last run of `list` ending in `[a, b)`: runs are disjoint and sorted, so their ends are too.
    static func lastRunEnded(in list: [PaidRun], from a: Timestamp, before b: Timestamp) -> Int? {
        var (lo, hi) = (0, list.count)
        while lo < hi {
            let mid = (lo + hi) / 2
            if let end = list[mid].end, end < b { lo = mid + 1 } else { hi = mid }
        }
        return lo > 0 && list[lo - 1].end.map { $0 >= a } == true ? lo - 1 : nil
    }
}

extension ReportRollup.Counts {
    mutating func add(_ other: Self, sign: Int64) {
        first &+= other.first &* sign
        second &+= other.second &* sign
    }
}

extension ReportRollup.ChurnCell {
    mutating func count(_ reason: LapseReason, sign: Int64) {
        switch reason {
        case .refund: refund &+= sign
        case .involuntary: involuntary &+= sign
        case .voluntary: voluntary &+= sign
        case .other: other &+= sign
        case .transferred: transferredOut &+= sign
        }
    }

    mutating func add(_ o: Self) {
        new &+= o.new
        reactivated &+= o.reactivated
        refund &+= o.refund
        involuntary &+= o.involuntary
        voluntary &+= o.voluntary
        other &+= o.other
        transferredIn &+= o.transferredIn
        transferredOut &+= o.transferredOut
    }
}
