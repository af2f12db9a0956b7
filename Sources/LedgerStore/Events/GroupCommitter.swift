import ServiceLifecycle
import Synchronization

/// Group commit: concurrent appends wait in a queue while one transaction is running, and the next
/// transaction takes all of them at once (up to `maxEvents`).
///
/// The append lock serializes appends anyway, so instead of each request paying its own BEGIN, lock wait,
/// round trips, projection refold and commit flush, a queue of them shares one. A lone request is committed
/// at once by its own task, with no waiting for company; requests that arrive meanwhile form the next group,
/// which the run loop (`run()`, a service of the server's ServiceGroup, or `EventStore.running` in a
/// one-shot command) commits in a child task of its own.
///
/// Two groups may be in flight: once a group has been computed and sent (its commit calls `sent`, having
/// told `AppendMemory` what it believes the group leaves), the next group is computed on top of that belief
/// and sent on another connection, where it waits for the append lock. So the next group's Swift work and
/// round trip overlap the previous group's execution and commit flush, and the lock passes from one group
/// to the next without a trip back to this process. The database checks every belief under the lock: if the
/// group before fails, the one after is refused and redone the general way. Each caller still gets its own
/// outcome (`commit` isolates them). The decisions are `GroupCommitStateMachine`'s.
final class GroupCommitter: Sendable {
    /// Commits a group; calls `sent` (at most once) when the next group may be computed on top of this
    /// one's belief, and returns each job's outcome.
    typealias Commit = @Sendable (_ jobs: [AppendJob], _ sent: @escaping @Sendable () -> Void) async -> [Result<AppendResult, any Error>]

    struct Waiting: Sendable {
        var job: AppendJob
        var continuation: CheckedContinuation<AppendResult, any Error>
    }

    /// What the run loop is woken for.
    private enum Wakeup { case startGroup, stop }

    /// A request that would wait for a group while no run loop runs: a programming error of the caller.
    struct NotRunning: Error, CustomStringConvertible {
        var description: String {
            "the append engine is not running: run the EventStore in the ServiceGroup, or inside EventStore.running { }"
        }
    }

    private let commit: Commit
    private let state: Mutex<GroupCommitStateMachine<Waiting>>
    private let wakeups: AsyncStream<Wakeup>
    private let wake: AsyncStream<Wakeup>.Continuation

    /// `pipelineEvents`: events that must be waiting before a group is sent behind one in flight (measured:
    /// 16 keeps groups of single appends large at 8 clients and overlaps them from about 32 clients;
    /// tools/bench.d/notes.md).
    init(maxEvents: Int = 2000, maxWeight: Int = 1000, pipelineEvents: Int = 16, commit: @escaping Commit) {
        self.commit = commit
        self.state = Mutex(GroupCommitStateMachine(maxEvents: maxEvents, maxWeight: maxWeight, pipelineEvents: pipelineEvents))
        (wakeups, wake) = AsyncStream.makeStream(of: Wakeup.self)
    }

    /// How many transactions committed how many jobs so far (for tests and metrics).
    var counts: (groups: Int, jobs: Int) { state.withLock { ($0.groups, $0.jobs) } }

    /// Whether the run loop runs and takes groups (not before it started, nor once a shutdown began).
    var isRunning: Bool { state.withLock { $0.lifecycle == .running } }

    /// Groups started while another was in flight, and the most in flight at once (for tests and metrics).
    var pipelined: (groups: Int, mostInFlight: Int) { state.withLock { ($0.pipelined, $0.mostInFlight) } }

    /// Commits the groups that waiting requests form, each in a child task, until a graceful shutdown has
    /// drained the queue and the groups in flight (no acknowledged append is cut short), or until cancelled
    /// (then what still waits fails as unavailable). Runs once.
    func run() async throws {
        guard state.withLock({ $0.runStarted() }) else { throw AlreadyRunning() }
        await withDiscardingTaskGroup { group in
            await withGracefulShutdownHandler {
                for await wakeup in wakeups {
                    switch wakeup {
                    case .startGroup: group.addTask { await self.commitNextGroup() }
                    case .stop: return
                    }
                }
            } onGracefulShutdown: {
                self.perform(self.state.withLock { $0.shutdown() })
            }
        }
        let left = state.withLock { $0.runEnded() }
        for waiting in left { waiting.continuation.resume(throwing: Self.error(.stopped)) }
    }

    struct AlreadyRunning: Error {}

    /// Runs `body` with the loop running, and cancels the loop after it (nothing `body` awaited is left).
    func running<T>(_ body: () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.run() }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    func submit(_ job: AppendJob) async throws -> AppendResult {
        // Nothing in flight: this caller commits its own job at once, in its own task (no hop to another
        // task and back).
        switch state.withLock({ $0.arrive() }) {
        case .commitNow: return try await commitInSlot([job])[0].get()
        case .refuse(let refusal): throw Self.error(refusal)
        case .enqueue: break
        }
        return try await withCheckedThrowingContinuation { continuation in
            let entry = GroupCommitStateMachine.Entry(
                waiter: Waiting(job: job, continuation: continuation), events: job.events.count, weight: Self.weight(job))
            switch state.withLock({ $0.enqueue(entry) }) {
            case .wait(let startGroup): if startGroup { wake.yield(.startGroup) }
            case .refuse(let refusal): continuation.resume(throwing: Self.error(refusal))
            }
        }
    }

    private static func error(_ refusal: GroupCommitStateMachine<Waiting>.Refusal) -> any Error {
        switch refusal {
        case .notRunning: NotRunning()
        case .stopped: StoreError.unavailable("the server is shutting down")
        }
    }

    /// The group in flight was sent: the next may be computed and sent.
    private func sent() {
        perform(state.withLock { $0.sent() })
    }

    private func perform(_ action: GroupCommitStateMachine<Waiting>.Action) {
        switch action {
        case .none: break
        case .startGroup: wake.yield(.startGroup)
        case .stopRun: wake.yield(.stop)
        }
    }

    /// Commits the next group in the slot taken for it (a child task of the run loop).
    private func commitNextGroup() async {
        guard let group = state.withLock({ $0.takeGroup() }) else {
            perform(state.withLock { $0.finished(sent: false) })
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
        let sentBefore = !signal.fire()
        perform(state.withLock { $0.finished(sent: sentBefore) })
        return outcomes
    }

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
