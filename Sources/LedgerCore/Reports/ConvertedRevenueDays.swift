/// Revenue day cells in a reporting currency (docs/reports.md, "Revenue in a reporting currency from cells"): each
/// transaction's cumulative figures converted at its own date's rate, as the report from the facts converts
/// them, then differenced per day. A sum of cells in their own currencies cannot give these figures (each
/// transaction's conversion is rounded on its own), so the cells are kept per reporting currency and rate
/// version; a transaction whose date has no rate is counted apart (`missing`), so a report over it goes to the
/// facts and answers what they answer.
public struct ConvertedRevenueDays: Sendable {
    public struct Key: Sendable, Hashable {
        public var entitlement: String
        /// The day's start, in microseconds since the Unix epoch.
        public var day: Int64
        public var dimensions: ReportRollup.CellDimensions
    }

    /// A transaction without a rate, by the days it moves in: a report whose span meets
    /// `[firstDay, settledDay]` cannot answer from the cells.
    public struct MissingKey: Sendable, Hashable {
        public var currency: String
        public var firstDay: Int64
        public var settledDay: Int64
    }

    /// Cells by (group, day): a group is an entitlement key with store, country and product, numbered as first
    /// seen, so that the cells are keyed by two integers (a refresh adds tens of millions of day changes).
    var groups: [Group: Int] = [:]
    var groupList: [Group] = []
    var dayCells: [DayKey: ReportRollup.RevenueCell] = [:]
    public var missing: [MissingKey: Int64] = [:]

    struct Group: Hashable {
        var entitlement: String
        var dimensions: ReportRollup.CellDimensions
    }

    struct DayKey: Hashable {
        var group: Int
        var day: Int64
    }

    public init() {}

    /// The cells.
    public var cells: [(key: Key, cell: ReportRollup.RevenueCell)] {
        dayCells.map { k, cell in
            let g = groupList[k.group]
            return (Key(entitlement: g.entitlement, day: k.day, dimensions: g.dimensions), cell)
        }
    }

    /// Adds a transaction `change` times (negative: takes it off), converted by `rates`. The transaction
    /// carries its entitlements (the cells' keys); it is one `ReportRollup.rollsUpDays` admits.
    public mutating func add(_ t: RevenueTransaction, change: Int64, rates: inout ReportingCurrency) throws(ReportOverflow) {
        guard change != 0 else { return }
        let factor: FXFactor
        do {
            factor = try rates.factor(from: t.currency, occurred: t.occurredAt)
        } catch {
            let (first, _, _) = Self.span(t)
            let k = MissingKey(
                currency: t.currency, firstDay: first.microseconds,
                settledDay: ReportInterval.day.periodStart(containing: t.settledAt).microseconds)
            missing[k, default: 0] &+= change
            return
        }
        let (first, changes, deferred) = try Self.changes(t, factor: factor)
        let dimensions = ReportRollup.CellDimensions(t)
        let sign = Int128(change)
        let scaled = changes.map { Self.scaled($0, sign) }
        for key in ReportRollup.keys(t) {
            let group = Group(entitlement: key, dimensions: dimensions)
            let g: Int
            if let known = groups[group] {
                g = known
            } else {
                g = groupList.count
                groups[group] = g
                groupList.append(group)
            }
            var day = first.microseconds
            for (i, c) in scaled.enumerated() {
                let k = DayKey(group: g, day: day)
                var cell = dayCells.removeValue(forKey: k) ?? ReportRollup.RevenueCell()
                cell.transactions &+= change
                cell.figures += c
                if i == scaled.count - 1 { cell.settledDeferred += sign * deferred }
                dayCells[k] = cell
                day &+= 86_400_000_000
            }
        }
    }

    /// The cells that are not zero.
    public func pruned() -> ConvertedRevenueDays {
        var r = self
        r.dayCells = dayCells.filter { $0.value != ReportRollup.RevenueCell() }
        r.missing = missing.filter { $0.value != 0 }
        return r
    }

    /// One transaction's day cells (day start, cell) taken `change` times, converted by `rates`; nil when its
    /// date has no rate.
    public static func dayCells(
        _ t: RevenueTransaction, change: Int64, rates: inout ReportingCurrency
    ) throws(ReportOverflow) -> [(day: Int64, cell: ReportRollup.RevenueCell)]? {
        guard let factor = try? rates.factor(from: t.currency, occurred: t.occurredAt) else { return nil }
        let (first, changes, deferred) = try Self.changes(t, factor: factor)
        let sign = Int128(change)
        var out: [(day: Int64, cell: ReportRollup.RevenueCell)] = []
        var day = first.microseconds
        for (i, c) in changes.enumerated() {
            let settled = i == changes.count - 1 ? sign * deferred : 0
            out.append((day, ReportRollup.RevenueCell(transactions: change, figures: Self.scaled(c, sign), settledDeferred: settled)))
            day &+= 86_400_000_000
        }
        return out
    }

    /// The first day a transaction moves in and its converted change per day from there to its settlement,
    /// with its converted deferred balance at settlement (what a report leaves out once it settled before).
    static func changes(_ t: RevenueTransaction, factor: FXFactor) throws(ReportOverflow) -> (
        first: Timestamp, changes: [RevenueFigures], settledDeferred: Int128
    ) {
        let schedule = RevenueSchedule(t)
        let (first, firstMove, settled) = span(t)
        let final = try schedule.cumulative(before: Timestamp(microseconds: settled.microseconds &+ 1), converting: factor)
        var changes: [RevenueFigures] = []
        var period = first
        var previous = RevenueFigures()
        let last = ReportInterval.day.periodStart(containing: settled)
        while period <= last {
            let next = ReportInterval.day.next(after: period)
            let now =
                next <= firstMove ? RevenueFigures() : next <= settled ? try schedule.cumulative(before: next, converting: factor) : final
            changes.append(now - previous)
            previous = now
            period = next
        }
        return (first, changes, final.deferred)
    }

    /// The start of the first day the transaction moves in, its first movement and its settlement.
    static func span(_ t: RevenueTransaction) -> (first: Timestamp, firstMove: Timestamp, settled: Timestamp) {
        var firstMove = min(t.occurredAt, t.start)
        for r in t.refunds { firstMove = min(firstMove, r.at) }
        return (ReportInterval.day.periodStart(containing: firstMove), firstMove, t.settledAt)
    }

    /// `f` taken `sign` times (the queue's changes are ±1; a larger one is added one at a time, as
    /// `ReportRollup.addQueuedRevenueDays` does).
    static func scaled(_ f: RevenueFigures, _ sign: Int128) -> RevenueFigures {
        if sign == 1 { return f }
        if sign == -1 { return RevenueFigures() - f }
        var sum = RevenueFigures()
        for _ in 0..<sign.magnitude { sum += f }
        return sign < 0 ? RevenueFigures() - sum : sum
    }
}
