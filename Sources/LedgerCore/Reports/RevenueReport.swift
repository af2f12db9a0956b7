/// Revenue figures of one period and currency (docs/semantics.md section 6).
public struct RevenueFigures: Sendable, Hashable {
    public var billings: Int64 = 0
    public var commission: Int64 = 0
    public var refunds: Int64 = 0
    public var refundedUnrecognized: Int64 = 0
    public var refundsRecognized: Int64 = 0
    public var recognized: Int64 = 0

    public init() {}

    public var proceeds: Int64 { billings - commission }
    /// Money billed and neither recognised nor refunded yet.
    public var deferred: Int64 { billings - recognized - refundedUnrecognized }

    static func - (l: RevenueFigures, r: RevenueFigures) -> RevenueFigures {
        var d = RevenueFigures()
        d.billings = l.billings - r.billings
        d.commission = l.commission - r.commission
        d.refunds = l.refunds - r.refunds
        d.refundedUnrecognized = l.refundedUnrecognized - r.refundedUnrecognized
        d.refundsRecognized = l.refundsRecognized - r.refundsRecognized
        d.recognized = l.recognized - r.recognized
        return d
    }

    static func += (l: inout RevenueFigures, r: RevenueFigures) {
        l.billings += r.billings
        l.commission += r.commission
        l.refunds += r.refunds
        l.refundedUnrecognized += r.refundedUnrecognized
        l.refundsRecognized += r.refundsRecognized
        l.recognized += r.recognized
    }
}

/// When each part of one transaction's money moves: ratable recognition over the granted window, stopped
/// at a cut, refunds taking back deferred money first, and the rest settled at the cut.
public struct RevenueSchedule: Sendable {
    struct Flow {
        var at: Timestamp
        var figures: RevenueFigures
    }

    let transaction: RevenueTransaction
    /// Discrete movements in the order they happen (a refund before the settlement at the same instant).
    var flows: [Flow] = []

    public init(_ t: RevenueTransaction) {
        transaction = t
        var billing = RevenueFigures()
        billing.billings = t.gross
        billing.commission = t.commission
        flows.append(Flow(at: t.occurredAt, figures: billing))
        var lumps: [(at: Timestamp, isRefund: Bool, amount: Int64)] = t.refunds.map { ($0.at, true, $0.amount) }
        if t.kind == .lifetime {
            lumps.append((t.occurredAt, false, 0))
        } else if let stop = t.stop {
            lumps.append((stop, false, 0))
        }
        lumps.sort { ($0.at, $0.isRefund ? 0 : 1) < ($1.at, $1.isRefund ? 0 : 1) }
        var lumpRecognized: Int64 = 0
        var refundedUnrecognized: Int64 = 0
        for lump in lumps {
            var f = RevenueFigures()
            let recognizedSoFar = continuous(at: lump.at) + lumpRecognized
            let unrecognized = max(0, t.gross - recognizedSoFar - refundedUnrecognized)
            if lump.isRefund {
                f.refunds = lump.amount
                f.refundedUnrecognized = min(lump.amount, unrecognized)
                f.refundsRecognized = lump.amount - f.refundedUnrecognized
                refundedUnrecognized += f.refundedUnrecognized
            } else {
                f.recognized = unrecognized
                lumpRecognized += unrecognized
            }
            flows.append(Flow(at: lump.at, figures: f))
        }
    }

    /// `R(min(x, stop))`: what ratable recognition has reached at `x` (zero for lifetime purchases).
    func continuous(at x: Timestamp) -> Int64 {
        let t = transaction
        guard t.kind != .lifetime, let end = t.end else { return 0 }
        let x = t.stop.map { min(x, $0) } ?? x
        if x <= t.start { return 0 }
        if x >= end { return t.gross }
        let elapsed = Int128(x.microseconds - t.start.microseconds)
        let length = Int128(end.microseconds - t.start.microseconds)
        return Int64(Money.roundHalfUp(Int128(t.gross) * elapsed, length))
    }

    /// Everything that moved strictly before `x` (instants in `[a, b)` belong to that period).
    public func cumulative(before x: Timestamp) -> RevenueFigures {
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
    public var deferredStart: Int64
    public var deferredEnd: Int64
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
        let schedule = RevenueSchedule(transaction)
        let n = boundaries.count
        var firstMove = min(transaction.occurredAt, transaction.start)
        for r in transaction.refunds { firstMove = min(firstMove, r.at) }
        // cumulative(before: b) is zero for b <= firstMove and final for b > settledAt.
        let lo = index(after: firstMove)
        let hi = max(lo, index(after: transaction.settledAt))
        var sums = cumulative.removeValue(forKey: transaction.currency) ?? Array(repeating: RevenueFigures(), count: n)
        for i in lo..<hi { sums[i] += schedule.cumulative(before: boundaries[i]) }
        cumulative[transaction.currency] = sums
        if hi < n {
            var tail = tails.removeValue(forKey: transaction.currency) ?? Array(repeating: RevenueFigures(), count: n)
            tail[hi] += schedule.cumulative(before: Timestamp(microseconds: transaction.settledAt.microseconds + 1))
            tails[transaction.currency] = tail
        }
    }

    /// The first boundary index whose boundary is after `t` (`boundaries.count` if none).
    func index(after t: Timestamp) -> Int {
        var (lo, hi) = (0, boundaries.count)
        while lo < hi {
            let mid = (lo + hi) / 2
            if boundaries[mid] > t { hi = mid } else { lo = mid + 1 }
        }
        return lo
    }

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
                rows.append(RevenuePeriod(
                    start: boundaries[i], end: boundaries[i + 1], currency: currency, figures: sums[i + 1] - sums[i],
                    deferredStart: sums[i].deferred, deferredEnd: sums[i + 1].deferred))
            }
        }
        return rows
    }
}
