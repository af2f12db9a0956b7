import Foundation

/// Reports II kept as rollups (docs/reports.md, "Reports II from rollups"): refunds, conversion to paying and
/// realized LTV as cells per day (or cohort and month), entitlement key and the dimensions a fact counts under.
///
/// Refunds, conversion and LTV are additive over their facts: a transaction (refunds), a subscriber first seen
/// (conversion) or a cohort member (LTV) counts in exactly one store, country and product. So each cell carries
/// the whole `(store, country, product)` it counts under, and any filter or grouping on those dimensions is a
/// sum over cells, exact, with no cell multiplied by the dimensions.
extension ReportRollup {
    /// Store, country and product of a fact; `""` where unknown (a report's null group, in no filter).
    public struct CellDimensions: Sendable, Hashable {
        public var store: String
        public var country: String
        public var product: String

        public init(store: String, country: String, product: String) {
            self.store = store
            self.country = country
            self.product = product
        }

        init(_ t: RevenueTransaction) { self.init(store: t.store, country: t.country ?? "", product: t.productID) }

        /// The value of store, country or product (entitlements are the cells' key, not a dimension value: `''`).
        public func value(of dimension: ReportDimension) -> String {
            switch dimension {
            case .store: store
            case .country: country
            case .productID: product
            case .entitlement: ""
            }
        }
        static let unknown = CellDimensions(store: "", country: "", product: "")
    }

    public struct RefundKey: Sendable, Hashable {
        public var day: Int64
        public var entitlement: String
        public var currency: String
        public var dimensions: CellDimensions
    }

    public struct RefundCell: Sendable, Hashable {
        /// Refunds that occurred that day, and their money.
        public var refunds: Int64 = 0
        public var amount: Int128 = 0
        /// Paid transactions refunded that day (each once per day).
        public var refundedTransactions: Int64 = 0
        /// Paid transactions that occurred that day, counted for whoever billed them.
        public var paidTransactions: Int64 = 0

        public init(refunds: Int64 = 0, amount: Int128 = 0, refundedTransactions: Int64 = 0, paidTransactions: Int64 = 0) {
            (self.refunds, self.amount) = (refunds, amount)
            (self.refundedTransactions, self.paidTransactions) = (refundedTransactions, paidTransactions)
        }

        mutating func add(_ o: Self, sign: Int64 = 1) {
            refunds &+= o.refunds &* sign
            amount += o.amount * Int128(sign)
            refundedTransactions &+= o.refundedTransactions &* sign
            paidTransactions &+= o.paidTransactions &* sign
        }
    }

    /// A week or month in which one transaction was refunded on more than one day: the day cells count it once
    /// per day, the period once, so the period takes off the extra days.
    public struct RefundRepeatKey: Sendable, Hashable {
        public var interval: ReportInterval
        public var period: Int64
        public var entitlement: String
        public var currency: String
        public var dimensions: CellDimensions
    }

    /// Subscribers first seen on `day`, by whole days (rounded up) to their first billed paid transaction of the
    /// key (nil: none). Key `""` holds every subscriber first seen, and again under `populationWait`; key `e` only
    /// those who billed one granting `e` (a report with `entitlement=e` takes its population from `""`).
    public struct ConversionKey: Sendable, Hashable {
        public var day: Int64
        public var entitlement: String
        public var dimensions: CellDimensions
        public var wait: Int32?
    }

    /// Conversion grouped by entitlement (schema 0037): a subscriber counts in each entitlement any of their trials
    /// and transactions grants, converted to that one, and in the null group when they hold none (of the
    /// `entitlement=` values, if any). Per first-seen day and dimensions: under `entitlement` `e`, the holders of
    /// `e` by their wait to the first billed transaction granting `e`; under `''`, each subscriber once with the
    /// entitlements they hold (`held`) and their wait to their first billed transaction of any kind, so that the
    /// null group of any `entitlement=` filter is a sum too.
    public struct ConversionHolderKey: Sendable, Hashable {
        public var day: Int64
        public var entitlement: String
        public var dimensions: CellDimensions
        /// Sorted and joined by U+001F under `''`; `''` under an entitlement.
        public var held: String
        public var wait: Int32?
    }

    /// The `wait` of the cell counting every subscriber first seen (key `""`) once more, whatever their wait: a report
    /// reads the population from these cells alone, and only the waits it asks about from the others.
    public static let populationWait: Int32 = -2

    /// Days to the first payment counted exactly up to this; longer waits are kept as this plus one (no report
    /// asks for more than `maxConversionDays`).
    public static let maxConversionDays = 3_650

    /// A cohort member's money by month (of the sale or refund; earlier ones at the cohort's month), per key,
    /// currency and the dimensions of the member's first transaction; `members` (in the cohort's own month)
    /// counts those holding a paid transaction in the currency.
    public struct LTVKey: Sendable, Hashable {
        public var cohort: Int64
        public var entitlement: String
        public var currency: String
        public var dimensions: CellDimensions
        public var month: Int64
    }

    public struct LTVCell: Sendable, Hashable {
        public var members: Int64 = 0
        public var gross: Int128 = 0
        public var proceeds: Int128 = 0

        public init(members: Int64 = 0, gross: Int128 = 0, proceeds: Int128 = 0) {
            (self.members, self.gross, self.proceeds) = (members, gross, proceeds)
        }

        mutating func add(_ o: Self, sign: Int64 = 1) {
            members &+= o.members &* sign
            gross += o.gross * Int128(sign)
            proceeds += o.proceeds * Int128(sign)
        }
    }

    /// Months after a cohort's start that LTV keeps (`months` is at most 120, so month 119 is the last shown).
    public static let maxLTVMonths = 120

    static func dayStart(_ t: Timestamp) -> Int64 { ReportInterval.day.periodStart(containing: t).microseconds }

    /// One paid transaction's refund cells: counted as occurred where it was billed (not on a transferred copy),
    /// its refunds on the days they occurred.
    mutating func addRefunds(_ t: RevenueTransaction, sign: Int64) {
        let dimensions = CellDimensions(t)
        var days: [Int64: RefundCell] = [:]
        if t.heldFrom == nil { days[Self.dayStart(t.occurredAt), default: .init()].paidTransactions = 1 }
        var refunded: [Int64] = []
        for r in t.refunds {
            let day = Self.dayStart(r.at)
            var cell = days[day] ?? .init()
            if cell.refundedTransactions == 0 { refunded.append(day) }
            cell.refunds &+= 1
            cell.refundedTransactions = 1
            cell.amount += Int128(r.amount)
            days[day] = cell
        }
        var repeats: [(ReportInterval, Int64, Int64)] = []
        if refunded.count > 1 {
            for interval in [ReportInterval.week, .month] {
                var perPeriod: [Int64: Int64] = [:]
                for day in refunded { perPeriod[interval.periodStart(containing: Timestamp(microseconds: day)).microseconds, default: 0] += 1 }
                for (period, n) in perPeriod where n > 1 { repeats.append((interval, period, n - 1)) }
            }
        }
        for key in Self.keys(t) {
            for (day, cell) in days {
                refundDays[RefundKey(day: day, entitlement: key, currency: t.currency, dimensions: dimensions), default: .init()]
                    .add(cell, sign: sign)
            }
            for (interval, period, n) in repeats {
                let k = RefundRepeatKey(interval: interval, period: period, entitlement: key, currency: t.currency, dimensions: dimensions)
                refundRepeats[k, default: 0] &+= n &* sign
            }
        }
    }

    /// The subscriber's conversion cells: the dimensions of what they were first seen trying or buying (their
    /// earliest trial or transaction to start; at one instant the trial), and per key the wait to their first
    /// billed paid transaction (`GroupedConversionAccumulator`'s rules).
    static func conversionCells(_ facts: SubscriberFacts) -> (cells: [ConversionKey: Int64], holders: [ConversionHolderKey: Int64]) {
        guard let seen = facts.firstSeen else { return ([:], [:]) }
        // (start, trial first, occurred) orders what the subscriber was first seen with.
        var opening: (start: Timestamp, rank: Int, occurred: Timestamp, dimensions: CellDimensions)?
        func consider(_ start: Timestamp, _ rank: Int, _ occurred: Timestamp, _ dimensions: @autoclosure () -> CellDimensions) {
            if let o = opening, (o.start, o.rank, o.occurred) <= (start, rank, occurred) { return }
            opening = (start, rank, occurred, dimensions())
        }
        var trialStarts: [UUID: Timestamp] = [:]
        var trialDimensions: [UUID: CellDimensions] = [:]
        for trial in facts.trials {
            trialStarts[trial.eventID] = min(trialStarts[trial.eventID] ?? trial.start, trial.start)
            if trialDimensions[trial.eventID] == nil {
                trialDimensions[trial.eventID] = CellDimensions(store: trial.store, country: trial.country ?? "", product: trial.productID)
            }
        }
        for (id, start) in trialStarts { consider(start, 0, start, trialDimensions[id]!) }
        var firstPaid: [String: Timestamp] = [:]
        for t in facts.transactions {
            consider(t.serviceStart, 1, t.occurredAt, CellDimensions(t))
            guard t.heldFrom == nil else { continue }
            for key in Self.keys(t) where firstPaid[key].map({ t.occurredAt < $0 }) ?? true { firstPaid[key] = t.occurredAt }
        }
        let day = dayStart(seen)
        let dimensions = opening?.dimensions ?? .unknown
        func wait(_ paid: Timestamp?) -> Int32? {
            guard let paid else { return nil }
            let elapsed = Int128(paid.microseconds) - Int128(seen.microseconds)
            guard elapsed > 0 else { return 0 }
            let days = (elapsed + 86_399_999_999) / 86_400_000_000
            return Int32(min(days, Int128(maxConversionDays + 1)))
        }
        var cells: [ConversionKey: Int64] = [
            ConversionKey(day: day, entitlement: "", dimensions: dimensions, wait: wait(firstPaid[""])): 1,
            ConversionKey(day: day, entitlement: "", dimensions: dimensions, wait: populationWait): 1,
        ]
        for (key, paid) in firstPaid where !key.isEmpty {
            cells[ConversionKey(day: day, entitlement: key, dimensions: dimensions, wait: wait(paid)), default: 0] += 1
        }
        let held = Set(facts.trials.map(\.entitlement) + facts.transactions.flatMap(\.entitlements)).sorted()
        var holders: [ConversionHolderKey: Int64] = [
            ConversionHolderKey(day: day, entitlement: "", dimensions: dimensions, held: held.joined(separator: "\u{1F}"), wait: wait(firstPaid[""])):
                1
        ]
        for e in held {
            holders[ConversionHolderKey(day: day, entitlement: e, dimensions: dimensions, held: "", wait: wait(firstPaid[e])), default: 0] += 1
        }
        return (cells, holders)
    }

    /// A cohort member of one key: the month of the key's first paid run, the dimensions of the first transaction of
    /// that run (the latest whose service started by the run's start, else the earliest), and every transaction
    /// granting the key (`GroupedLTVAccumulator`'s rules).
    public struct LTVMember: Sendable {
        public var cohort: Timestamp
        public var entitlement: String
        public var dimensions: CellDimensions
        public var transactions: [RevenueTransaction]
    }

    /// The subscriber's LTV memberships, one per key of their paid runs (`firstStarts`: the start of the key's
    /// first paid run) that has a transaction.
    public static func ltvMembers(firstStarts: [String: Timestamp], transactions: [RevenueTransaction]) -> [LTVMember] {
        var members: [LTVMember] = []
        for (key, first) in firstStarts {
            let scope = key.isEmpty ? transactions : transactions.filter { $0.entitlements.contains(key) }
            let opening =
                scope.filter { $0.serviceStart <= first }.max { ($0.serviceStart, $0.occurredAt) < ($1.serviceStart, $1.occurredAt) }
                ?? scope.min { ($0.serviceStart, $0.occurredAt) < ($1.serviceStart, $1.occurredAt) }
            guard let opening else { continue }
            members.append(
                LTVMember(cohort: ReportCalendar.monthStart(first), entitlement: key, dimensions: CellDimensions(opening), transactions: scope))
        }
        return members
    }

    /// The start of each key's first paid run.
    public static func firstStarts(_ facts: SubscriberFacts) -> [String: Timestamp] {
        var firstStarts: [String: Timestamp] = [:]
        for run in facts.runs where firstStarts[run.entitlement] == nil { firstStarts[run.entitlement] = run.start }
        return firstStarts
    }

    /// The subscriber's LTV cells, per membership (`ltvMembers`): money by the month of the sale or refund.
    static func ltvCells(_ facts: SubscriberFacts) -> [LTVKey: LTVCell] {
        var cells: [LTVKey: LTVCell] = [:]
        for m in ltvMembers(firstStarts: firstStarts(facts), transactions: facts.transactions) {
            let cohort = m.cohort
            let last = ReportCalendar.addingMonths(maxLTVMonths - 1, to: cohort).microseconds
            var members = Set<String>()
            func add(_ at: Timestamp, _ currency: String, _ cell: LTVCell) {
                let month = max(ReportCalendar.monthStart(at).microseconds, cohort.microseconds)
                guard month <= last else { return }
                let k = LTVKey(cohort: cohort.microseconds, entitlement: m.entitlement, currency: currency, dimensions: m.dimensions, month: month)
                cells[k, default: .init()].add(cell)
            }
            for t in m.transactions {
                if members.insert(t.currency).inserted { add(cohort, t.currency, LTVCell(members: 1)) }
                if t.heldFrom == nil {
                    let gross = Int128(t.gross)
                    add(t.occurredAt, t.currency, LTVCell(gross: gross, proceeds: gross - Int128(t.tax) - Int128(t.commission)))
                }
                for r in t.refunds { add(r.at, t.currency, LTVCell(gross: -Int128(r.amount), proceeds: -Int128(r.amount))) }
            }
        }
        return cells
    }

    /// Adds (sign 1) or takes off (−1) the subscriber's conversion, LTV and MRR movement cells.
    mutating func addSubscriberCells(_ facts: SubscriberFacts, sign: Int64) {
        let conversionCells = Self.conversionCells(facts)
        for (k, n) in conversionCells.cells { conversion[k, default: 0] &+= n &* sign }
        for (k, n) in conversionCells.holders { conversionHolders[k, default: 0] &+= n &* sign }
        for (k, cell) in Self.ltvCells(facts) { ltv[k, default: .init()].add(cell, sign: sign) }
        Self.addMovement(facts, sign: Int128(sign), into: &movement)
        addChurnDimensions(facts, sign: sign)
    }

    /// Whether the subscriber's conversion, LTV or MRR movement cells may differ between `old` and `new`: they
    /// depend on when the subscriber was first seen, their trials, transactions and paid runs only.
    static func subscriberCellsChanged(_ old: SubscriberFacts?, _ new: SubscriberFacts, transactionsChanged: Bool) -> Bool {
        guard let old else { return true }
        return transactionsChanged || old.firstSeen != new.firstSeen || old.trials != new.trials || old.runs != new.runs
    }
}

/// Reports II from their cells: the same rows the accumulators give from the facts, per group (nil: the
/// ungrouped report, or the null group).
extension ReportRollup {
    /// Refunds over `boundaries` from the day cells summed per day, currency and group, and the grid's repeats
    /// (weeks or months in which a transaction was refunded on several days) per period start.
    public static func refundPeriods(
        boundaries: [Timestamp], grouped: Bool, days: [(day: Int64, currency: String, group: String?, cell: RefundCell)],
        repeats: [(period: Int64, currency: String, group: String?, count: Int64)]
    ) -> [(group: String?, period: RefundPeriod)] {
        guard boundaries.count > 1 else { return [] }
        struct Row: Hashable {
            var group: String?
            var period: Int
            var currency: String
        }
        var cells: [Row: RefundPeriod] = [:]
        var currencies: [String?: Set<String>] = [:]
        func empty(_ i: Int, _ currency: String) -> RefundPeriod {
            RefundPeriod(start: boundaries[i], end: boundaries[i + 1], currency: currency)
        }
        for (day, currency, group, cell) in days {
            guard let i = boundaries.period(containing: Timestamp(microseconds: day)) else { continue }
            let row = Row(group: group, period: i, currency: currency)
            var p = cells[row] ?? empty(i, currency)
            p.refunds += Int(truncatingIfNeeded: cell.refunds)
            p.amount += cell.amount
            p.refundedTransactions += Int(truncatingIfNeeded: cell.refundedTransactions)
            p.paidTransactions += Int(truncatingIfNeeded: cell.paidTransactions)
            cells[row] = p
            if cell.paidTransactions != 0 || cell.refundedTransactions != 0 { currencies[group, default: []].insert(currency) }
        }
        for (period, currency, group, count) in repeats {
            guard let i = boundaries.period(containing: Timestamp(microseconds: period)) else { continue }
            cells[Row(group: group, period: i, currency: currency), default: empty(i, currency)].refundedTransactions -= Int(
                truncatingIfNeeded: count)
        }
        let groups: [String?] = grouped ? currencies.keys.sorted(by: ReportDimensions.groupOrder) : [nil]
        var rows: [(group: String?, period: RefundPeriod)] = []
        for g in groups {
            let list = (currencies[g] ?? []).sorted()
            for i in 0..<(boundaries.count - 1) {
                for currency in list { rows.append((g, cells[Row(group: g, period: i, currency: currency)] ?? empty(i, currency))) }
            }
        }
        return rows
    }

    /// Conversion over `boundaries`: `population` the subscribers first seen per day and group (key `""`),
    /// `converted` those of the report's key per day, group and whole days to their first payment.
    public static func conversionPeriods(
        boundaries: [Timestamp], days: [Int], grouped: Bool, population: [(day: Int64, group: String?, subscribers: Int64)],
        converted: [(day: Int64, group: String?, wait: Int32, subscribers: Int64)]
    ) -> [(group: String?, period: ConversionPeriod)] {
        let template = ConversionAccumulator(boundaries: boundaries, days: days).periods
        var groups: [String?: [ConversionPeriod]] = [:]
        for (day, group, n) in population where n != 0 {
            guard let i = boundaries.period(containing: Timestamp(microseconds: day)) else { continue }
            groups[group, default: template][i].subscribers += Int(truncatingIfNeeded: n)
        }
        for (day, group, wait, n) in converted where n != 0 {
            guard let i = boundaries.period(containing: Timestamp(microseconds: day)), groups[group] != nil else { continue }
            for (k, d) in days.enumerated() where Int(wait) <= d { groups[group]![i].converted[k] += Int(truncatingIfNeeded: n) }
        }
        let order: [String?] = grouped ? groups.keys.sorted(by: ReportDimensions.groupOrder) : [nil]
        return order.flatMap { g in (groups[g] ?? template).map { (g, $0) } }
    }

    /// Realized LTV of the cohorts in `[from, to)` from the cells summed per cohort, currency, group and month.
    public static func ltvCohorts(
        from: Timestamp, to: Timestamp, months: Int, until: Timestamp, grouped: Bool,
        cells: [(cohort: Int64, currency: String, group: String?, month: Int64, cell: LTVCell)]
    ) -> [(group: String?, cohort: LTVCohort)] {
        let shape = LTVAccumulator(from: from, to: to, months: months, until: until)
        struct Row: Hashable {
            var group: String?
            var cohort: Int
            var currency: String
        }
        let index = Dictionary(shape.starts.enumerated().map { ($1.microseconds, $0) }) { a, _ in a }
        var sizes: [Row: Int64] = [:]
        var money: [Row: [(month: Int64, cell: LTVCell)]] = [:]
        for (cohort, currency, group, month, cell) in cells {
            guard let c = index[cohort], shape.shown[c] > 0 else { continue }
            let row = Row(group: group, cohort: c, currency: currency)
            sizes[row, default: 0] &+= cell.members
            money[row, default: []].append((month, cell))
        }
        var result: [String?: [LTVCohort]] = [:]
        for (row, size) in sizes.sorted(by: { ($0.key.cohort, $0.key.currency) < ($1.key.cohort, $1.key.currency) }) where size > 0 {
            let start = shape.starts[row.cohort]
            let shown = shape.shown[row.cohort]
            var cohort = LTVCohort(
                start: start, currency: row.currency, size: Int(truncatingIfNeeded: size), gross: Array(repeating: 0, count: shown),
                proceeds: Array(repeating: 0, count: shown))
            let cutoffs = (0..<shown).map { ReportCalendar.addingMonths($0, to: start).microseconds }
            for (month, cell) in money[row] ?? [] {
                for (k, cut) in cutoffs.enumerated() where month <= cut {
                    cohort.gross[k] += cell.gross
                    cohort.proceeds[k] += cell.proceeds
                }
            }
            result[row.group, default: []].append(cohort)
        }
        let order: [String?] = grouped ? result.keys.sorted(by: ReportDimensions.groupOrder) : [nil]
        return order.flatMap { g in (result[g] ?? []).map { (g, $0) } }
    }
}
