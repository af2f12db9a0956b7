import Synchronization

/// Group commit: concurrent appends wait in a queue while one transaction is running, and the next
/// transaction takes all of them at once (up to `maxEvents`).
///
/// The append lock serializes appends anyway, so instead of each request paying its own BEGIN, lock wait,
/// round trips, projection refold and commit flush, a queue of them shares one. A lone request is committed
/// at once by its own task, with no waiting for company; requests that arrive meanwhile form the next group.
///
/// Two groups may be in flight: once a group has been computed and sent (its commit calls `sent`, having
/// told `AppendMemory` what it believes the group leaves), the next group is computed on top of that belief
/// and sent on another connection, where it waits for the append lock. So the next group's Swift work and
/// round trip overlap the previous group's execution and commit flush, and the lock passes from one group
/// to the next without a trip back to this process. The database checks every belief under the lock: if the
/// group before fails, the one after is refused and redone the general way. Each caller still gets its own
/// outcome (`commit` isolates them).
final class GroupCommitter: Sendable {
    /// Commits a group; calls `sent` (at most once) when the next group may be computed on top of this
    /// one's belief, and returns each job's outcome.
    typealias Commit = @Sendable (_ jobs: [AppendJob], _ sent: @escaping @Sendable () -> Void) async -> [Result<AppendResult, any Error>]

    private struct Waiting {
        var job: AppendJob
        var continuation: CheckedContinuation<AppendResult, any Error>
    }

    private struct State {
        var queue: [Waiting] = []
        /// Groups being committed (at most `maxInFlight`).
        var inFlight = 0
        /// A group in flight has not been sent yet: the next one waits for its belief.
        var preparing = false
        var groups = 0
        var jobs = 0
        var pipelined = 0
        var mostInFlight = 0

        /// Events of the jobs in `queue`.
        var queuedEvents = 0

        /// Takes a slot for the next group when one waits and the pipeline allows it: behind a group in
        /// flight only when `pipelineEvents` wait, since a group sent early is closed to later arrivals, and
        /// many small groups cost more commits than they save.
        mutating func startsGroup(maxInFlight: Int, pipelineEvents: Int) -> Bool {
            guard !queue.isEmpty, !preparing, inFlight < maxInFlight, inFlight == 0 || queuedEvents >= pipelineEvents else {
                return false
            }
            if inFlight > 0 { pipelined += 1 }
            inFlight += 1
            mostInFlight = max(mostInFlight, inFlight)
            preparing = true
            return true
        }
    }

    let maxEvents: Int
    /// Most weight (see `weight(_:)`) one group carries, unless a single job is heavier.
    let maxWeight: Int
    /// Groups committing at once: one executing under the append lock, the next sent and waiting for it.
    let maxInFlight = 2
    /// Events that must be waiting before a group is sent behind one in flight (measured: 16 keeps groups
    /// of single appends large at 8 clients and overlaps them from about 32 clients; one waiting batch of
    /// 16 events or more is sent early; tools/bench.d/notes.md).
    let pipelineEvents: Int
    private let commit: Commit
    private let state = Mutex(State())

    init(maxEvents: Int = 2000, maxWeight: Int = 1000, pipelineEvents: Int = 16, commit: @escaping Commit) {
        self.maxEvents = maxEvents
        self.maxWeight = maxWeight
        self.pipelineEvents = pipelineEvents
        self.commit = commit
    }

    /// How many transactions committed how many jobs so far (for tests and metrics).
    var counts: (groups: Int, jobs: Int) { state.withLock { ($0.groups, $0.jobs) } }

    /// Groups started while another was in flight, and the most in flight at once (for tests and metrics).
    var pipelined: (groups: Int, mostInFlight: Int) { state.withLock { ($0.pipelined, $0.mostInFlight) } }

    func submit(_ job: AppendJob) async throws -> AppendResult {
        // Nothing in flight: this caller commits its own job at once, in its own task (no hop to another
        // task and back).
        let leads = state.withLock { s -> Bool in
            guard s.inFlight == 0 else { return false }
            s.inFlight = 1
            s.mostInFlight = max(s.mostInFlight, 1)
            s.preparing = true
            s.groups += 1
            s.jobs += 1
            return true
        }
        if leads {
            return try await commitInSlot([job])[0].get()
        }
        return try await withCheckedThrowingContinuation { continuation in
            let start = state.withLock { s -> Bool in
                s.queue.append(Waiting(job: job, continuation: continuation))
                s.queuedEvents += job.events.count
                return s.startsGroup(maxInFlight: maxInFlight, pipelineEvents: pipelineEvents)
            }
            if start { Task { await self.run() } }
        }
    }

    /// The group in flight was sent: the next may be computed and sent.
    private func sent() {
        let start = state.withLock { s -> Bool in
            s.preparing = false
            return s.startsGroup(maxInFlight: maxInFlight, pipelineEvents: pipelineEvents)
        }
        if start { Task { await self.run() } }
    }

    /// A group ended; `sent` tells whether it had released the preparing turn already.
    private func finished(sent: Bool) {
        let start = state.withLock { s -> Bool in
            s.inFlight -= 1
            if !sent { s.preparing = false }
            return s.startsGroup(maxInFlight: maxInFlight, pipelineEvents: pipelineEvents)
        }
        if start { Task { await self.run() } }
    }

    /// Commits one group in the slot taken for it.
    private func run() async {
        guard let group = nextGroup() else {
            finished(sent: false)
            return
        }
        let outcomes = await commitInSlot(group.map(\.job))
        for (waiting, outcome) in zip(group, outcomes) { waiting.continuation.resume(with: outcome) }
    }

    /// Commits jobs in the slot their caller took, passing the preparing turn on at its first `sent`, or at
    /// the end if it never comes.
    private func commitInSlot(_ jobs: [AppendJob]) async -> [Result<AppendResult, any Error>] {
        let signal = SentSignal()
        let outcomes = await commit(jobs) { if signal.fire() { self.sent() } }
        finished(sent: !signal.fire())
        return outcomes
    }

    /// The next group, or nil when none waits.
    ///
    /// Light jobs (a few windows each: an ordinary purchase) go first, in arrival order, then the others, as
    /// long as the group's weight (events × entitlements, about the windows its commit writes under the lock)
    /// stays within `maxWeight` and its events within `maxEvents`; a job heavier than that goes alone. So a
    /// flood of heavy appends (64-entitlement events, big batches) makes each commit short and lets an
    /// ordinary append into the next one, instead of queueing it behind all of them (issue 13). Concurrent
    /// requests have no order among themselves, so taking them out of arrival order changes no guarantee.
    private func nextGroup() -> [Waiting]? {
        state.withLock { s in
            guard !s.queue.isEmpty else { return nil }
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
            s.queuedEvents -= events
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

/// Fires once: tells whether a group's `sent` call was the first.
private final class SentSignal: Sendable {
    private let fired = Mutex(false)

    /// True the first time only.
    func fire() -> Bool {
        fired.withLock { f in
            defer { f = true }
            return !f
        }
    }
}
