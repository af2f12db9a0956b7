/// Revenue figures of one period and currency (docs/semantics.md section 6).
///
/// 128-bit: amounts are at most 10^15 each (and stored events from before that ceiling at most 2^63), so no
/// sum over any ledger that fits on a disk can overflow, and a report never traps.
public struct RevenueFigures: Sendable, Hashable {
    public var billings: Int128 = 0
    /// Tax included in billings (ledger-semantics section 6): neither the store's nor the developer's.
    public var tax: Int128 = 0
    public var commission: Int128 = 0
    public var refunds: Int128 = 0
    public var refundedUnrecognized: Int128 = 0
    public var refundsRecognized: Int128 = 0
    public var recognized: Int128 = 0
    /// Deferred money that moved with a transferred purchase: minus on the subscriber it left, plus on the one
    /// it reached (docs/identity.md). Summed over both it is zero, so no report shows it; it keeps each side's
    /// deferred balance right on its own.
    public var handover: Int128 = 0

    public init() {}

    /// `gross − tax − commission`: with no tax, the v1 figure.
    public var proceeds: Int128 { billings - tax - commission }
    /// Money billed (or handed over) and neither recognised nor refunded yet.
    public var deferred: Int128 { billings - recognized - refundedUnrecognized + handover }

    static func - (l: RevenueFigures, r: RevenueFigures) -> RevenueFigures {
        var d = RevenueFigures()
        d.billings = l.billings - r.billings
        d.tax = l.tax - r.tax
        d.commission = l.commission - r.commission
        d.refunds = l.refunds - r.refunds
        d.refundedUnrecognized = l.refundedUnrecognized - r.refundedUnrecognized
        d.refundsRecognized = l.refundsRecognized - r.refundsRecognized
        d.recognized = l.recognized - r.recognized
        d.handover = l.handover - r.handover
        return d
    }

    static func += (l: inout RevenueFigures, r: RevenueFigures) {
        l.billings += r.billings
        l.tax += r.tax
        l.commission += r.commission
        l.refunds += r.refunds
        l.refundedUnrecognized += r.refundedUnrecognized
        l.refundsRecognized += r.refundsRecognized
        l.recognized += r.recognized
        l.handover += r.handover
    }
}

/// When each part of one transaction's money moves: ratable recognition over the granted window, stopped
/// at a cut, refunds taking back deferred money first, and the rest settled at the cut. A refund with
/// `cut: false` is a price adjustment: it takes back deferred money first too, and what is left is
/// recognised ratably from the refund to the window's end (a new piece of the schedule).
public struct RevenueSchedule: Sendable {
    struct Flow {
        var at: Timestamp
        var figures: RevenueFigures
    }

    /// One piece of ratable recognition: from `from`, `base` already recognised, `amount` more by the end.
    struct Piece {
        var from: Timestamp
        var base: Int128
        var amount: Int128
    }

    let transaction: RevenueTransaction
    /// Discrete movements in the order they happen (a refund before the settlement at the same instant).
    var flows: [Flow] = []
    /// The recognition schedule: one piece from the window's start, one more per `cut: false` refund.
    var pieces: [Piece]

    public init(_ t: RevenueTransaction) {
        transaction = t
        pieces = [Piece(from: t.start, base: 0, amount: Int128(t.gross))]
        var billing = RevenueFigures()
        billing.billings = Int128(t.gross)
        billing.tax = Int128(t.tax)
        billing.commission = Int128(t.commission)
        flows.append(Flow(at: t.occurredAt, figures: billing))
        var lumps: [(at: Timestamp, isRefund: Bool, cut: Bool, amount: Int128)] = t.refunds.map { ($0.at, true, $0.cut, Int128($0.amount)) }
        if t.kind == .lifetime {
            lumps.append((t.occurredAt, false, true, 0))
        } else if let stop = t.stop {
            lumps.append((stop, false, true, 0))
        }
        lumps.sort { ($0.at, $0.isRefund ? 0 : 1) < ($1.at, $1.isRefund ? 0 : 1) }
        var lumpRecognized: Int128 = 0
        var refundedUnrecognized: Int128 = 0
        for lump in lumps {
            var f = RevenueFigures()
            let recognizedNow = continuous(at: lump.at)
            let unrecognized = max(0, Int128(t.gross) - recognizedNow - lumpRecognized - refundedUnrecognized)
            if lump.isRefund {
                f.refunds = lump.amount
                f.refundedUnrecognized = min(lump.amount, unrecognized)
                f.refundsRecognized = lump.amount - f.refundedUnrecognized
                refundedUnrecognized += f.refundedUnrecognized
                // A price adjustment on a running window: the deferred money left is spread over the rest.
                if !lump.cut, t.kind != .lifetime, let end = t.end, lump.at < end, t.stop.map({ lump.at < $0 }) ?? true {
                    pieces.append(Piece(from: lump.at, base: recognizedNow, amount: unrecognized - f.refundedUnrecognized))
                }
            } else {
                f.recognized = unrecognized
                lumpRecognized += unrecognized
            }
            flows.append(Flow(at: lump.at, figures: f))
        }
    }

    /// What ratable recognition has reached at `min(x, stop)` (zero for lifetime purchases):
    /// `base + round_half_up(amount × clamp((x − from) / (end − from), 0, 1))` of the piece in force.
    func continuous(at x: Timestamp) -> Int128 {
        let t = transaction
        guard t.kind != .lifetime, let end = t.end else { return 0 }
        let x = t.stop.map { min(x, $0) } ?? x
        guard let piece = pieces.last(where: { $0.from <= x }) else { return 0 }
        if x <= piece.from { return piece.base }
        if x >= end { return piece.base + piece.amount }
        // |amount| < 2^64 and the elapsed time < 2^59 µs (years 1–9999): the product fits in 128 bits.
        let elapsed = Int128(x.microseconds) - Int128(piece.from.microseconds)
        let length = Int128(end.microseconds) - Int128(piece.from.microseconds)
        return piece.base + Money.roundHalfUp(piece.amount * elapsed, length)
    }

    /// Everything that moved strictly before `x` (instants in `[a, b)` belong to that period), for the
    /// subscriber that holds the transaction: a transferred one is this subscriber's until it was handed over,
    /// or from when it arrived, and its deferred balance moves with it (docs/identity.md).
    public func cumulative(before x: Timestamp) -> RevenueFigures {
        held(before: x, whole(before:))
    }

    /// `cumulative` in a reporting currency (docs/reports.md, "Reporting currency"): the transaction's own
    /// cumulative figures converted at one factor, then held like `cumulative`, so a transferred transaction's
    /// two holders still add up to the whole and every identity holds in the reporting currency.
    public func cumulative(before x: Timestamp, converting factor: FXFactor) throws(ReportOverflow) -> RevenueFigures {
        if factor == .one { return cumulative(before: x) }
        var failure: ReportOverflow?
        let figures = held(before: x) { t in
            do throws(ReportOverflow) {
                return try converted(whole(before: t), factor)
            } catch {
                failure = error
                return RevenueFigures()
            }
        }
        if let failure { throw failure }
        return figures
    }

    /// Converts the cumulative figures of the whole transaction: `round_half_up(F × rate)` for billings, tax,
    /// commission, refunds, recognized and refunded_unrecognized; refunds_recognized is refunds less
    /// refunded_unrecognized. When nothing is deferred any more (settled, or before anything moved),
    /// refunded_unrecognized is billings less recognized, so a settled transaction leaves no deferred residue
    /// of rounding and its recognised parts plus refunded deferred money equal its converted gross.
    func converted(_ w: RevenueFigures, _ f: FXFactor) throws(ReportOverflow) -> RevenueFigures {
        var c = RevenueFigures()
        c.billings = try f.apply(w.billings)
        c.tax = try f.apply(w.tax)
        c.commission = try f.apply(w.commission)
        c.refunds = try f.apply(w.refunds)
        c.recognized = try f.apply(w.recognized)
        c.refundedUnrecognized = w.deferred == 0 ? c.billings - c.recognized : try f.apply(w.refundedUnrecognized)
        c.refundsRecognized = c.refunds - c.refundedUnrecognized
        return c
    }

    /// Everything that moved strictly before `x` for the holder, from the whole transaction's figures `whole`.
    /// Inlined: the rollups call `cumulative(before:)` per transaction and cell, in the append and the rebuild.
    @inline(__always)
    func held(before x: Timestamp, _ whole: (Timestamp) -> RevenueFigures) -> RevenueFigures {
        let (from, until) = (transaction.heldFrom, transaction.handedOver)
        if let from, x <= from { return RevenueFigures() }
        let gone = until.map { x > $0 } ?? false
        var figures = whole(gone ? until! : x)
        if let from {
            // Arrived with its deferred balance: what the subscriber it came from had not recognised.
            let before = whole(from)
            figures = figures - before
            figures.handover += before.deferred
        }
        // Left with its deferred balance.
        if gone { figures.handover -= figures.deferred }
        return figures
    }

    /// `cumulative` of the transaction whoever holds it.
    func whole(before x: Timestamp) -> RevenueFigures {
        var total = RevenueFigures()
        for flow in flows where flow.at < x { total += flow.figures }
        total.recognized += continuous(at: x)
        return total
    }
}

/// One row of the revenue report.
public struct RevenuePeriod: Sendable, Hashable {
    public var start: Timestamp
    public var end: Timestamp
    public var currency: String
    public var figures: RevenueFigures
    public var deferredStart: Int128
    public var deferredEnd: Int128
}

/// Sums transactions per period and currency, one transaction at a time.
///
/// A transaction only changes the cumulative figures at boundaries between its first movement and its
/// settlement; later boundaries all get its final figures, added once through a running tail.
public struct RevenueAccumulator: Sendable {
    let boundaries: [Timestamp]
    /// Per currency: cumulative figures at each boundary, not counting `tails`.
    var cumulative: [String: [RevenueFigures]] = [:]
    /// Per currency: `tails[k]` is added to every boundary from `k` on.
    var tails: [String: [RevenueFigures]] = [:]

    public init(boundaries: [Timestamp]) {
        self.boundaries = boundaries
    }

    public mutating func add(_ transaction: RevenueTransaction) {
        // The factor one never converts, so nothing can throw.
        try? add(transaction, currency: transaction.currency, factor: .one)
    }

    /// Adds a transaction converted into `currency` by `factor` (the reporting currency): its cumulative figures
    /// are converted at every boundary, so the periods' parts still telescope.
    public mutating func add(_ transaction: RevenueTransaction, currency: String, factor: FXFactor) throws(ReportOverflow) {
        let schedule = RevenueSchedule(transaction)
        let n = boundaries.count
        var firstMove = min(transaction.occurredAt, transaction.start)
        for r in transaction.refunds { firstMove = min(firstMove, r.at) }
        // cumulative(before: b) is zero for b <= firstMove and final for b > settledAt.
        let lo = index(after: firstMove)
        let hi = max(lo, index(after: transaction.settledAt))
        var sums = cumulative.removeValue(forKey: currency) ?? Array(repeating: RevenueFigures(), count: n)
        defer { cumulative[currency] = sums }
        for i in lo..<hi { sums[i] += try schedule.cumulative(before: boundaries[i], converting: factor) }
        if hi < n {
            var tail = tails.removeValue(forKey: currency) ?? Array(repeating: RevenueFigures(), count: n)
            defer { tails[currency] = tail }
            tail[hi] += try schedule.cumulative(before: Timestamp(microseconds: transaction.settledAt.microseconds + 1), converting: factor)
        }
    }

    /// Makes `currency` answer a row per period even when no transaction has money in it.
    public mutating func include(currency: String) {
        if cumulative[currency] == nil { cumulative[currency] = Array(repeating: RevenueFigures(), count: boundaries.count) }
    }

    /// The first boundary index whose boundary is after `t` (`boundaries.count` if none).
    func index(after t: Timestamp) -> Int { boundaries.firstIndex(after: t) }

    /// Rows ordered by period, then currency. The deferred balances are taken at each boundary directly,
    /// so `deferred_end = deferred_start + billings − recognized − refunded_unrecognized` is a check, not a definition.
    public var periods: [RevenuePeriod] {
        var totals: [String: [RevenueFigures]] = [:]
        for currency in Set(cumulative.keys).union(tails.keys) {
            var sums = cumulative[currency] ?? Array(repeating: RevenueFigures(), count: boundaries.count)
            var running = RevenueFigures()
            if let tail = tails[currency] {
                for i in sums.indices {
                    running += tail[i]
                    sums[i] += running
                }
            }
            totals[currency] = sums
        }
        var rows: [RevenuePeriod] = []
        for i in 0..<max(0, boundaries.count - 1) {
            for currency in totals.keys.sorted() {
                let sums = totals[currency]!
                rows.append(
                    RevenuePeriod(
                        start: boundaries[i], end: boundaries[i + 1], currency: currency, figures: sums[i + 1] - sums[i],
                        deferredStart: sums[i].deferred, deferredEnd: sums[i + 1].deferred))
            }
        }
        return rows
    }
}
