import LedgerCore
import Synchronization

/// What this process believes about the log, so that an append can be computed before the append lock and
/// sent in one round trip (`AppendWriter.appendInOneTrip`): the log's end as its last append left it, and
/// the whole streams of recently touched subscribers.
///
/// Only a belief: the database checks it under the lock and refuses the write when it is wrong (another
/// process appended, a stream changed), and the append then takes the general path, which reads the truth
/// and teaches it back. Groups sent but not yet answered are believed to commit (`propose`), so that the
/// next group can be computed while they execute; if one fails, the groups computed on top of it are
/// refused in turn. Bounded by `maxEvents` held, whatever the ledger's size. Forgotten whenever an
/// append's outcome is unknown (an outage), so a belief never outlives a write it cannot account for.
final class AppendMemory: Sendable {
    /// A remembered stream, its fold, and when it was learnt (its place in `State.order`).
    private struct Remembered {
        var events: [StreamEvent]
        var fold: ProjectionWriter.Previous?
        var stamp: Int
    }

    private struct State {
        var end: AppendWriter.LogEnd?
        var streams: [String: Remembered] = [:]
        var events = 0
        /// Streams in the order they were learnt, oldest first from `orderStart`; an entry whose stamp no
        /// longer matches its stream's was learnt again later and is skipped. Eviction takes the oldest:
        /// taking the dictionary's first entries instead emptied the low buckets and packed the rest, and
        /// look-ups then probed long runs of full buckets (8% of a batch append's CPU).
        var order: [(subscriber: String, stamp: Int)] = []
        var orderStart = 0
        var nextStamp = 0
        /// Groups sent and not yet answered, oldest first: where each would leave the log, its streams and folds.
        var pending: [(end: AppendWriter.LogEnd, streams: [String: [StreamEvent]], folds: [String: ProjectionWriter.Previous])] = []
        /// Groups to send the general way before trying the one-trip path again, and the next such pause:
        /// when other processes append all the time, the belief is wrong more often than not.
        var pause = 0
        var nextPause = 1

        /// Drops the order's skipped entries once they outnumber the live ones (amortized O(1) per learn).
        mutating func compactOrder() {
            let live = order.count - orderStart
            guard live > 2 * streams.count + 1024 || (orderStart > 1024 && orderStart * 2 > order.count) else { return }
            order = order[orderStart...].filter { streams[$0.subscriber]?.stamp == $0.stamp }
            orderStart = 0
        }
    }

    private struct Counts {
        var oneTrip = 0
        var refused = 0
    }

    private let counts = Mutex(Counts())

    /// Groups committed in one round trip, and beliefs the database refused (for tests and metrics).
    var tally: (oneTrip: Int, refused: Int) { counts.withLock { ($0.oneTrip, $0.refused) } }

    /// Most events held in remembered streams (measured at about 2 KiB each as whole events; `StreamEvent`s are smaller).
    let maxEvents: Int
    private let state = Mutex(State())

    init(maxEvents: Int = 10_000) {
        self.maxEvents = maxEvents
    }

    /// The believed log end and the remembered streams among `subscribers`, as the groups in flight would
    /// leave them; nil while the end is unknown.
    func belief(
        for subscribers: Set<String>
    ) -> (end: AppendWriter.LogEnd, streams: [String: [StreamEvent]], folds: [String: ProjectionWriter.Previous])? {
        state.withLock { s in
            guard let end = s.pending.last?.end ?? s.end, s.pause == 0 else {
                s.pause = max(0, s.pause - 1)
                return nil
            }
            var streams: [String: [StreamEvent]] = [:]
            var folds: [String: ProjectionWriter.Previous] = [:]
            for subscriber in subscribers {
                if let group = s.pending.last(where: { $0.streams[subscriber] != nil }) {
                    streams[subscriber] = group.streams[subscriber]
                    folds[subscriber] = group.folds[subscriber]
                } else if let remembered = s.streams[subscriber] {
                    streams[subscriber] = remembered.events
                    folds[subscriber] = remembered.fold
                }
            }
            return (end, streams, folds)
        }
    }

    /// A group is being sent: believed to commit until its answer comes (`learn`), or the belief is dropped
    /// (`refused`, `forget`).
    func propose(end: AppendWriter.LogEnd, streams: [String: [StreamEvent]], folds: [String: ProjectionWriter.Previous] = [:]) {
        state.withLock { $0.pending.append((end, streams, folds)) }
    }

    /// Learns what a committed append left: the log's end and the touched streams, whole. `oneTrip`: the
    /// append went in one trip (the belief held), which ends any pause. Answers may be learnt out of order
    /// (two groups in flight): nothing older than what is known replaces it.
    func learn(
        end: AppendWriter.LogEnd, streams: [String: [StreamEvent]], folds: [String: ProjectionWriter.Previous] = [:], oneTrip: Bool
    ) {
        if oneTrip { counts.withLock { $0.oneTrip += 1 } }
        state.withLock { s in
            if end.position >= s.end?.position ?? .min { s.end = end }
            s.pending.removeAll { $0.end.position <= end.position }
            if oneTrip { s.nextPause = 1 }
            for (subscriber, events) in streams {
                let known = s.streams[subscriber]?.events
                guard (events.last?.version ?? 0) >= (known?.last?.version ?? 0) else { continue }
                s.events += events.count - (known?.count ?? 0)
                s.nextStamp += 1
                s.streams[subscriber] = Remembered(events: events, fold: folds[subscriber], stamp: s.nextStamp)
                s.order.append((subscriber, s.nextStamp))
            }
            // Evicts the streams learnt longest ago until within the budget: they are read again when next needed.
            while s.events > maxEvents, s.orderStart < s.order.count {
                let (subscriber, stamp) = s.order[s.orderStart]
                s.orderStart += 1
                if let remembered = s.streams[subscriber], remembered.stamp == stamp {
                    s.streams[subscriber] = nil
                    s.events -= remembered.events.count
                }
            }
            s.compactOrder()
        }
    }

    /// Forgets everything: the next append takes the general path and learns again.
    func forget() {
        state.withLock { $0 = State() }
    }

    /// The database refused the belief: forgets it and sends the next few groups the general way (a pause
    /// that doubles, up to 64 groups, while the belief keeps failing).
    func refused() {
        counts.withLock { $0.refused += 1 }
        state.withLock { s in
            let next = min(64, s.nextPause * 2)
            s = State()
            s.pause = next / 2
            s.nextPause = next
        }
    }
}
