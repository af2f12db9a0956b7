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
    private struct State {
        var end: AppendWriter.LogEnd?
        var streams: [String: [RecordedEvent]] = [:]
        var events = 0
        /// Folds of remembered streams (each checked against its stream's head before use).
        var folds: [String: ProjectionWriter.Previous] = [:]
        /// Groups sent and not yet answered, oldest first: where each would leave the log, its streams and folds.
        var pending: [(end: AppendWriter.LogEnd, streams: [String: [RecordedEvent]], folds: [String: ProjectionWriter.Previous])] = []
        /// Groups to send the general way before trying the one-trip path again, and the next such pause:
        /// when other processes append all the time, the belief is wrong more often than not.
        var pause = 0
        var nextPause = 1
    }

    private struct Counts {
        var oneTrip = 0
        var refused = 0
    }

    private let counts = Mutex(Counts())

    /// Groups committed in one round trip, and beliefs the database refused (for tests and metrics).
    var tally: (oneTrip: Int, refused: Int) { counts.withLock { ($0.oneTrip, $0.refused) } }

    /// Most events held in remembered streams (about 2 KiB each, measured).
    let maxEvents: Int
    private let state = Mutex(State())

    init(maxEvents: Int = 10_000) {
        self.maxEvents = maxEvents
    }

    /// The believed log end and the remembered streams among `subscribers`, as the groups in flight would
    /// leave them; nil while the end is unknown.
    func belief(
        for subscribers: Set<String>
    ) -> (end: AppendWriter.LogEnd, streams: [String: [RecordedEvent]], folds: [String: ProjectionWriter.Previous])? {
        state.withLock { s in
            guard let end = s.pending.last?.end ?? s.end, s.pause == 0 else {
                s.pause = max(0, s.pause - 1)
                return nil
            }
            var streams: [String: [RecordedEvent]] = [:]
            var folds: [String: ProjectionWriter.Previous] = [:]
            for subscriber in subscribers {
                if let group = s.pending.last(where: { $0.streams[subscriber] != nil }) {
                    streams[subscriber] = group.streams[subscriber]
                    folds[subscriber] = group.folds[subscriber]
                } else if let events = s.streams[subscriber] {
                    streams[subscriber] = events
                    folds[subscriber] = s.folds[subscriber]
                }
            }
            return (end, streams, folds)
        }
    }

    /// A group is being sent: believed to commit until its answer comes (`learn`), or the belief is dropped
    /// (`refused`, `forget`).
    func propose(end: AppendWriter.LogEnd, streams: [String: [RecordedEvent]], folds: [String: ProjectionWriter.Previous] = [:]) {
        state.withLock { $0.pending.append((end, streams, folds)) }
    }

    /// Learns what a committed append left: the log's end and the touched streams, whole. `oneTrip`: the
    /// append went in one trip (the belief held), which ends any pause. Answers may be learnt out of order
    /// (two groups in flight): nothing older than what is known replaces it.
    func learn(
        end: AppendWriter.LogEnd, streams: [String: [RecordedEvent]], folds: [String: ProjectionWriter.Previous] = [:], oneTrip: Bool
    ) {
        if oneTrip { counts.withLock { $0.oneTrip += 1 } }
        state.withLock { s in
            if end.position >= s.end?.position ?? .min { s.end = end }
            s.pending.removeAll { $0.end.position <= end.position }
            if oneTrip { s.nextPause = 1 }
            for (subscriber, events) in streams where (events.last?.version ?? 0) >= (s.streams[subscriber]?.last?.version ?? 0) {
                s.events += events.count - (s.streams[subscriber]?.count ?? 0)
                s.streams[subscriber] = events
                s.folds[subscriber] = folds[subscriber]
            }
            // Evicts arbitrary streams until within the budget: they are read again when next needed.
            while s.events > maxEvents, let (subscriber, events) = s.streams.first {
                s.streams[subscriber] = nil
                s.folds[subscriber] = nil
                s.events -= events.count
            }
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
