import Synchronization

/// Group commit: concurrent appends wait in a queue while one transaction is running, and the next
/// transaction takes all of them at once (up to `maxEvents`).
///
/// The append lock serializes appends anyway, so instead of each request paying its own BEGIN, lock wait,
/// round trips, projection refold and commit flush, a queue of them shares one. One drain task runs at a
/// time: a lone request is committed at once by its own task, with no waiting for company; requests that
/// arrive meanwhile form the next group, committed by a drain task. Each caller still gets its own outcome (`commit` isolates them).
final class GroupCommitter: Sendable {
    typealias Commit = @Sendable ([AppendJob]) async -> [Result<AppendResult, any Error>]

    private struct Waiting {
        var job: AppendJob
        var continuation: CheckedContinuation<AppendResult, any Error>
    }

    private struct State {
        var queue: [Waiting] = []
        var draining = false
        var groups = 0
        var jobs = 0
    }

    let maxEvents: Int
    /// Most weight (see `weight(_:)`) one group carries, unless a single job is heavier.
    let maxWeight: Int
    private let commit: Commit
    private let state = Mutex(State())

    init(maxEvents: Int = 2000, maxWeight: Int = 1000, commit: @escaping Commit) {
        self.maxEvents = maxEvents
        self.maxWeight = maxWeight
        self.commit = commit
    }

    /// How many transactions committed how many jobs so far (for tests and metrics).
    var counts: (groups: Int, jobs: Int) { state.withLock { ($0.groups, $0.jobs) } }

    func submit(_ job: AppendJob) async throws -> AppendResult {
        // Nobody committing: this caller commits its own job at once, in its own task (no hop to another
        // task and back), and hands whatever arrived meanwhile to a drain task.
        let leads = state.withLock { s -> Bool in
            guard !s.draining else { return false }
            s.draining = true
            s.groups += 1
            s.jobs += 1
            return true
        }
        if leads {
            let outcome = await commit([job])[0]
            if hasWaiting() { Task { await self.drain() } }
            return try outcome.get()
        }
        return try await withCheckedThrowingContinuation { continuation in
            let start = state.withLock { s -> Bool in
                s.queue.append(Waiting(job: job, continuation: continuation))
                guard !s.draining else { return false }
                s.draining = true
                return true
            }
            if start { Task { await self.drain() } }
        }
    }

    /// After a leader's commit: true (and still draining) when jobs wait, else the drain ends here.
    private func hasWaiting() -> Bool {
        state.withLock { s in
            if s.queue.isEmpty { s.draining = false }
            return !s.queue.isEmpty
        }
    }

    private func drain() async {
        while let group = nextGroup() {
            let outcomes = await commit(group.map(\.job))
            for (waiting, outcome) in zip(group, outcomes) { waiting.continuation.resume(with: outcome) }
        }
    }

    /// The next group, or nil, ending the drain, when none waits.
    ///
    /// Light jobs (a few windows each: an ordinary purchase) go first, in arrival order, then the others, as
    /// long as the group's weight (events × entitlements, about the windows its commit writes under the lock)
    /// stays within `maxWeight` and its events within `maxEvents`; a job heavier than that goes alone. So a
    /// flood of heavy appends (64-entitlement events, big batches) makes each commit short and lets an
    /// ordinary append into the next one, instead of queueing it behind all of them (issue 13). Concurrent
    /// requests have no order among themselves, so taking them out of arrival order changes no guarantee.
    private func nextGroup() -> [Waiting]? {
        state.withLock { s in
            guard !s.queue.isEmpty else {
                s.draining = false
                return nil
            }
            var taken: [Int] = []
            var (events, weight) = (0, 0)
            for lightPass in [true, false] {
                for (i, w) in s.queue.enumerated() where (Self.weight(w.job) <= Self.lightWeight) == lightPass {
                    let (e, g) = (w.job.events.count, Self.weight(w.job))
                    if !taken.isEmpty && (events + e > maxEvents || weight + g > maxWeight) { continue }
                    taken.append(i)
                    (events, weight) = (events + e, weight + g)
                }
            }
            taken.sort()
            let group = taken.map { s.queue[$0] }
            for i in taken.reversed() { s.queue.remove(at: i) }
            s.groups += 1
            s.jobs += group.count
            return group
        }
    }

    /// A job of at most this weight is light.
    static let lightWeight = 8

    /// Events × entitlements (at least one per event): the rows a commit of the job writes, roughly.
    static func weight(_ job: AppendJob) -> Int {
        job.events.reduce(0) { $0 + max(1, $1.data["entitlements"]?.arrayValue?.count ?? 1) }
    }
}
