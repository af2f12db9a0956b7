/// The group committer's decisions, apart from tasks, locks, continuations and the database: every event
/// (a request arrives, a group is sent or ends, the run loop starts or is asked to stop) returns what to do,
/// as postgres-nio's connection pool does, so each rule is tested alone (`GroupCommitStateMachineTests`).
///
/// `Waiter` is what the committer keeps per queued request (its job and continuation); tests use plain values.
struct GroupCommitStateMachine<Waiter> {
    struct Entry {
        var waiter: Waiter
        var events: Int
        /// Events × entitlements: about the windows the job's commit writes under the lock.
        var weight: Int
    }

    /// Where the run loop (`GroupCommitter.run`, a service of the ServiceGroup) stands.
    enum Lifecycle: Equatable {
        /// Not started (a one-shot command or a test without a runner): a request that finds nothing in flight
        /// commits itself; one that would wait is refused, since nothing would start its group.
        case unattended
        case running
        /// Graceful shutdown: the queue is drained and the groups in flight end before the loop returns.
        case draining
        /// The loop has returned: appends are refused (the server is going away).
        case stopped
    }

    /// Why a request is refused.
    enum Refusal: Equatable {
        /// It would wait for a group, and no run loop runs to start one.
        case notRunning
        /// The run loop has returned (shutdown).
        case stopped
    }

    enum ArriveAction: Equatable {
        /// Nothing in flight: the caller commits its own job at once, in its own task (a slot is taken for it).
        case commitNow
        /// A group is in flight: the caller queues its job (`enqueue`) and waits for its outcome.
        case enqueue
        case refuse(Refusal)
    }

    enum EnqueueAction: Equatable {
        /// Queued; `startGroup` tells the committer to wake the run loop for a group.
        case wait(startGroup: Bool)
        case refuse(Refusal)
    }

    enum Action: Equatable {
        case none
        /// A slot was taken: the run loop takes the next group (`takeGroup`) and commits it.
        case startGroup
        /// Draining is done: nothing queued, nothing in flight; the run loop may return.
        case stopRun
    }

    let maxEvents: Int
    let maxWeight: Int
    /// Groups committing at once: one executing under the append lock, the next sent and waiting for it.
    let maxInFlight: Int
    /// Events that must be waiting before a group is sent behind one in flight.
    let pipelineEvents: Int
    /// A job of at most this weight is light (goes first).
    let lightWeight: Int

    private(set) var lifecycle = Lifecycle.unattended
    private(set) var queue: [Entry] = []
    /// Events of the jobs in `queue`.
    private(set) var queuedEvents = 0
    /// Groups being committed (at most `maxInFlight`), their slots taken.
    private(set) var inFlight = 0
    /// A group in flight has not been sent yet: the next one waits for its belief.
    private(set) var preparing = false
    private(set) var groups = 0
    private(set) var jobs = 0
    private(set) var pipelined = 0
    private(set) var mostInFlight = 0

    init(maxEvents: Int = 2000, maxWeight: Int = 1000, maxInFlight: Int = 2, pipelineEvents: Int = 16, lightWeight: Int = 8) {
        self.maxEvents = maxEvents
        self.maxWeight = maxWeight
        self.maxInFlight = maxInFlight
        self.pipelineEvents = pipelineEvents
        self.lightWeight = lightWeight
    }

    /// The run loop starts; false if it runs already or has stopped (a committer runs once).
    mutating func runStarted() -> Bool {
        guard lifecycle == .unattended else { return false }
        lifecycle = .running
        return true
    }

    /// A request arrives.
    mutating func arrive() -> ArriveAction {
        if lifecycle == .stopped { return .refuse(.stopped) }
        guard inFlight == 0 else { return .enqueue }
        inFlight = 1
        mostInFlight = max(mostInFlight, 1)
        preparing = true
        groups += 1
        jobs += 1
        return .commitNow
    }

    /// A request that found a group in flight queues its job. Without a run loop nothing would start its
    /// group: refused.
    mutating func enqueue(_ entry: Entry) -> EnqueueAction {
        switch lifecycle {
        case .stopped: return .refuse(.stopped)
        case .unattended: return .refuse(.notRunning)
        case .running, .draining: break
        }
        queue.append(entry)
        queuedEvents += entry.events
        return .wait(startGroup: takesSlot())
    }

    /// The group in flight was sent: the next may be computed on top of its belief.
    mutating func sent() -> Action {
        preparing = false
        return takesSlot() ? .startGroup : .none
    }

    /// A group ended; `sent` tells whether it had released the preparing turn already.
    mutating func finished(sent: Bool) -> Action {
        inFlight -= 1
        if !sent { preparing = false }
        if takesSlot() { return .startGroup }
        return drained ? .stopRun : .none
    }

    /// The next group for a slot taken by `startGroup`, or nil when none waits (then call `finished(sent: false)`).
    ///
    /// Light jobs (a few windows each: an ordinary purchase) go first, in arrival order, then the others, as
    /// long as the group's weight stays within `maxWeight` and its events within `maxEvents`; a job heavier
    /// than that goes alone. So a flood of heavy appends makes each commit short and lets an ordinary append
    /// into the next one (issue 13). Concurrent requests have no order among themselves, so taking them out of
    /// arrival order changes no guarantee.
    mutating func takeGroup() -> [Waiter]? {
        guard !queue.isEmpty else { return nil }
        var taken: [Int] = []
        var (events, weight) = (0, 0)
        for lightPass in [true, false] {
            for (i, entry) in queue.enumerated() where (entry.weight <= lightWeight) == lightPass {
                if !taken.isEmpty && (events + entry.events > maxEvents || weight + entry.weight > maxWeight) { continue }
                taken.append(i)
                (events, weight) = (events + entry.events, weight + entry.weight)
            }
        }
        taken.sort()
        let group = taken.map { queue[$0].waiter }
        for i in taken.reversed() { queue.remove(at: i) }
        queuedEvents -= events
        groups += 1
        jobs += group.count
        return group
    }

    /// Graceful shutdown asked: drain what is queued and in flight, then stop.
    mutating func shutdown() -> Action {
        switch lifecycle {
        case .running:
            lifecycle = .draining
            return drained ? .stopRun : .none
        case .unattended, .draining, .stopped:
            return .none
        }
    }

    /// The run loop returned (drained, or cancelled): what still waits is to be failed.
    mutating func runEnded() -> [Waiter] {
        lifecycle = .stopped
        let left = queue.map(\.waiter)
        queue.removeAll()
        queuedEvents = 0
        return left
    }

    private var drained: Bool { lifecycle == .draining && inFlight == 0 && queue.isEmpty }

    /// Takes a slot for the next group when one waits and the pipeline allows it: behind a group in flight
    /// only when `pipelineEvents` wait, since a group sent early is closed to later arrivals, and many small
    /// groups cost more commits than they save.
    private mutating func takesSlot() -> Bool {
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

extension GroupCommitStateMachine: Sendable where Waiter: Sendable {}
extension GroupCommitStateMachine.Entry: Sendable where Waiter: Sendable {}
