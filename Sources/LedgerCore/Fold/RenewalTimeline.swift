/// `will_renew` as a function of the instant T (docs/semantics.md section 3, "Entitlement state at a time
/// T"), built once per fold so that a read at any T is a binary search (`SubscriberLedger.willRenew`).
///
/// An entitlement will renew at T when an auto-renewable transaction's window or a grace window covers T,
/// its auto-renew is on at T (the last `auto_renew_changed` at or before T since its latest auto-renewable
/// `purchase`; on when there is none) and no `expiration` or `cancellation` at or before T ended its
/// subscription after its latest auto-renewable `purchase` or `renewal`. A refund ends it by cutting the
/// window that held it.
enum RenewalTimeline {
    /// What an event did to one entitlement's renewal.
    enum Change: Sendable, Hashable {
        /// An auto-renewable `purchase`: a subscription starts, auto-renew on.
        case purchase
        /// An auto-renewable `renewal`: the subscription goes on (ended no more), auto-renew as it was.
        case renewal
        /// `auto_renew_changed`.
        case autoRenew(Bool)
        /// An `expiration` or a `cancellation`: the subscription ended.
        case end
    }

    struct Step: Sendable, Hashable {
        var at: Timestamp
        var position: Int64
        var change: Change
    }

    /// Two lists of steps in fold order, merged in fold order.
    static func merged(_ a: [Step], _ b: [Step]) -> [Step] {
        guard !b.isEmpty else { return a }
        guard !a.isEmpty else { return b }
        var out: [Step] = []
        out.reserveCapacity(a.count + b.count)
        var (i, j) = (0, 0)
        while i < a.count || j < b.count {
            if j == b.count || (i < a.count && (a[i].at, a[i].position) < (b[j].at, b[j].position)) {
                out.append(a[i])
                i += 1
            } else {
                out.append(b[j])
                j += 1
            }
        }
        return out
    }

    /// The instants at which `will_renew` turns on and off, alternately (on first), given the entitlement's
    /// steps in fold order and the intervals its renewable windows (not void) cover. O(n log n).
    static func toggles(steps: [Step], covered intervals: [(Timestamp, Timestamp?)]) -> [Timestamp] {
        // Whether auto-renew is on and the subscription not ended, from each step's instant on (true before any).
        var renews: [(at: Timestamp, value: Bool)] = []
        renews.reserveCapacity(steps.count)
        var (on, ended) = (true, false)
        for step in steps {
            switch step.change {
            case .purchase: (on, ended) = (true, false)
            case .renewal: ended = false
            case .autoRenew(let enabled): on = enabled
            case .end: ended = true
            }
            renews.append((step.at, on && !ended))
        }
        // The covered intervals as disjoint runs (overlapping or touching ones merged), by start.
        var runs: [(start: Timestamp, end: Timestamp?)] = []
        for (start, end) in intervals.sorted(by: { $0.0 < $1.0 }) {
            if let last = runs.last {
                guard let lastEnd = last.end else { break }  // a run that never ends covers the rest
                if start <= lastEnd {
                    runs[runs.count - 1].end = end.map { max($0, lastEnd) }
                    continue
                }
            }
            runs.append((start, end))
        }
        // Both functions change only at these instants: the product is evaluated at each, in order.
        var instants = renews.map(\.at)
        for run in runs {
            instants.append(run.start)
            if let end = run.end { instants.append(end) }
        }
        instants.sort()
        var toggles: [Timestamp] = []
        var (value, next, renewing, run) = (false, 0, true, 0)
        for t in instants {
            while next < renews.count && renews[next].at <= t {
                renewing = renews[next].value
                next += 1
            }
            while run < runs.count, let end = runs[run].end, end <= t { run += 1 }
            let now = renewing && run < runs.count && runs[run].start <= t
            if now != value {
                toggles.append(t)
                value = now
            }
        }
        return toggles
    }
}
