/// Revenue day cells in a reporting currency (docs/reports.md, "Revenue in a reporting currency from cells"): each
/// transaction's cumulative figures converted at its own date's rate, as the report from the facts converts
/// them, then differenced per day. A sum of cells in their own currencies cannot give these figures (each
/// transaction's conversion is rounded on its own), so the cells are kept per reporting currency and rate
/// version; a transaction whose date has no rate is counted apart (`missing`), so a report over it goes to the
/// facts and answers what they answer.
public struct ConvertedRevenueDays: Sendable {
    public struct Key: Sendable, Hashable {
        public var entitlement: String
        /// The currency of the figures: the reporting currency, or the transaction's own (`ownCurrencies`).
        public var currency: String
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

    /// Cells by group and run of 64 days, as `RevenueDayCells` keeps them: a group is an entitlement key with
    /// store, country and product, numbered as first seen, so a refresh (hundreds of millions of day changes on
    /// ten million events) hashes two integers once per transaction and run, not strings per day.
    var groups: [Group: Int] = [:]
    var groupList: [Group] = []
    var chunks: [ChunkKey: [ReportRollup.RevenueCell]] = [:]
    public var missing: [MissingKey: Int64] = [:]

    struct Group: Hashable {
        var entitlement: String
        var currency: String
        var dimensions: ReportRollup.CellDimensions
    }

    struct ChunkKey: Hashable {
        var group: Int
        var chunk: Int64
    }

    static let chunkDays: Int64 = 64
    static let dayMicroseconds: Int64 = 86_400_000_000

    public init() {}

    /// The "reporting currency" of the cells kept in each transaction's own currency (`ReportingCurrency` with
    /// this code converts nothing): revenue by store, country or product on day and week grids, which the day
    /// cells, kept per entitlement key only, cannot answer.
    public static let ownCurrencies = ""

    /// The cells.
    public var cells: [(key: Key, cell: ReportRollup.RevenueCell)] {
        var out: [(key: Key, cell: ReportRollup.RevenueCell)] = []
        for (k, list) in chunks {
            let g = groupList[k.group]
            for (i, cell) in list.enumerated() where cell != ReportRollup.RevenueCell() {
                let day = (k.chunk &* Self.chunkDays &+ Int64(i)) &* Self.dayMicroseconds
                out.append((Key(entitlement: g.entitlement, currency: g.currency, day: day, dimensions: g.dimensions), cell))
            }
        }
        return out
    }

    /// Adds a transaction `change` times (negative: takes it off), converted by `rates`. The transaction
    /// carries its entitlements (the cells' keys); it is one `ReportRollup.rollsUpDays` admits.
    public mutating func add(_ t: RevenueTransaction, change: Int64, rates: inout ReportingCurrency) throws(ReportOverflow) {
        guard change != 0 else { return }
        let factor: FXFactor
        do {
            factor = rates.currency == Self.ownCurrencies ? .one : try rates.factor(from: t.currency, occurred: t.occurredAt)
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
        let scaled = sign == 1 ? changes : changes.map { Self.scaled($0, sign) }
        let firstDay = RevenueDayCells.day(first.microseconds)
        for key in ReportRollup.keys(t) {
            let group = Group(
                entitlement: key, currency: rates.currency == Self.ownCurrencies ? t.currency : rates.currency, dimensions: dimensions)
            let g: Int
            if let known = groups[group] {
                g = known
            } else {
                g = groupList.count
                groups[group] = g
                groupList.append(group)
            }
            var i = 0
            while i < scaled.count {
                let day = firstDay &+ Int64(i)
                let chunk = day >= 0 ? day / Self.chunkDays : (day &+ 1) / Self.chunkDays &- 1
                let k = ChunkKey(group: g, chunk: chunk)
                var list = chunks.removeValue(forKey: k) ?? Array(repeating: ReportRollup.RevenueCell(), count: Int(Self.chunkDays))
                var o = Int(day &- chunk &* Self.chunkDays)
                while o < list.count && i < scaled.count {
                    list[o].transactions &+= change
                    list[o].figures += scaled[i]
                    if i == scaled.count - 1 { list[o].settledDeferred += sign * deferred }
                    o += 1
                    i += 1
                }
                chunks[k] = list
            }
        }
    }

    /// The cells that are not zero.
    public func pruned() -> ConvertedRevenueDays {
        var r = self
        r.chunks = chunks.filter { $0.value.contains { $0 != ReportRollup.RevenueCell() } }
        r.missing = missing.filter { $0.value != 0 }
        return r
    }

    /// One transaction's day cells (day start, cell) taken `change` times, converted by `rates`; nil when its
    /// date has no rate.
    public static func dayCells(
        _ t: RevenueTransaction, change: Int64, rates: inout ReportingCurrency
    ) throws(ReportOverflow) -> [(day: Int64, cell: ReportRollup.RevenueCell)]? {
        guard let factor = rates.currency == Self.ownCurrencies ? .one : try? rates.factor(from: t.currency, occurred: t.occurredAt) else {
            return nil
        }
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
        // A transaction that never changed hands is converted from its whole figures, each converted only when
        // it moved since the day before (mostly only the recognised money does): what
        // `RevenueSchedule.cumulative(before:converting:)` gives, for a fifth of the divisions.
        let plain = t.heldFrom == nil && t.handedOver == nil
        var memo = ConversionMemo(factor: factor)
        func cumulative(_ x: Timestamp) throws(ReportOverflow) -> RevenueFigures {
            plain ? try memo.convert(schedule.whole(before: x)) : try schedule.cumulative(before: x, converting: factor)
        }
        let final = try cumulative(Timestamp(microseconds: settled.microseconds &+ 1))
        var changes: [RevenueFigures] = []
        var previous = RevenueFigures()
        let last = ReportInterval.day.periodStart(containing: settled).microseconds
        var period = first.microseconds
        while period <= last {
            let next = Timestamp(microseconds: period &+ Self.dayMicroseconds)
            let now = next <= firstMove ? RevenueFigures() : next <= settled ? try cumulative(next) : final
            changes.append(now - previous)
            previous = now
            period = next.microseconds
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

/// `RevenueSchedule.converted` with each figure's conversion kept until the figure changes.
struct ConversionMemo {
    let factor: FXFactor
    var raw = RevenueFigures()
    var done = RevenueFigures()
    var primed = false

    init(factor: FXFactor) { self.factor = factor }

    mutating func convert(_ w: RevenueFigures) throws(ReportOverflow) -> RevenueFigures {
        if factor == .one { return w }
        if !primed || raw.billings != w.billings { done.billings = try factor.apply(w.billings) }
        if !primed || raw.tax != w.tax { done.tax = try factor.apply(w.tax) }
        if !primed || raw.commission != w.commission { done.commission = try factor.apply(w.commission) }
        if !primed || raw.refunds != w.refunds { done.refunds = try factor.apply(w.refunds) }
        if !primed || raw.recognized != w.recognized { done.recognized = try factor.apply(w.recognized) }
        if !primed || raw.refundedUnrecognized != w.refundedUnrecognized {
            done.refundedUnrecognized = try factor.apply(w.refundedUnrecognized)
        }
        raw = w
        primed = true
        var c = RevenueFigures()
        (c.billings, c.tax, c.commission, c.refunds, c.recognized) = (done.billings, done.tax, done.commission, done.refunds, done.recognized)
        c.refundedUnrecognized = w.deferred == 0 ? c.billings - c.recognized : done.refundedUnrecognized
        c.refundsRecognized = c.refunds - c.refundedUnrecognized
        return c
    }
}
