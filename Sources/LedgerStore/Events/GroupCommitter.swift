import Synchronization

/// Group commit: concurrent appends wait in a queue while one transaction is running, and the next
/// transaction takes all of them at once (up to `maxEvents`).
///
/// The append lock serializes appends anyway, so instead of each request paying its own BEGIN, lock wait,
/// round trips, projection refold and commit flush, a queue of them shares one. One drain task runs at a
/// time: a lone request starts it and is committed at once, with no waiting for company; requests that
/// arrive meanwhile form the next group. Each caller still gets its own outcome (`commit` isolates them).
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
    private let commit: Commit
    private let state = Mutex(State())

    init(maxEvents: Int = 2000, commit: @escaping Commit) {
        self.maxEvents = maxEvents
        self.commit = commit
    }

    /// How many transactions committed how many jobs so far (for tests and metrics).
    var counts: (groups: Int, jobs: Int) { state.withLock { ($0.groups, $0.jobs) } }

    func submit(_ job: AppendJob) async throws -> AppendResult {
        try await withCheckedThrowingContinuation { continuation in
            let start = state.withLock { s -> Bool in
                s.queue.append(Waiting(job: job, continuation: continuation))
                guard !s.draining else { return false }
                s.draining = true
                return true
            }
            if start { Task { await self.drain() } }
        }
    }

    private func drain() async {
        while let group = nextGroup() {
            let outcomes = await commit(group.map(\.job))
            for (waiting, outcome) in zip(group, outcomes) { waiting.continuation.resume(with: outcome) }
        }
    }

    /// The waiting jobs in arrival order up to `maxEvents` (at least one), or nil, ending the drain, when
    /// none waits.
    private func nextGroup() -> [Waiting]? {
        state.withLock { s in
            guard !s.queue.isEmpty else {
                s.draining = false
                return nil
            }
            var count = 0
            var events = 0
            while count < s.queue.count, count == 0 || events + s.queue[count].job.events.count <= maxEvents {
                events += s.queue[count].job.events.count
                count += 1
            }
            let group = Array(s.queue.prefix(count))
            s.queue.removeFirst(count)
            s.groups += 1
            s.jobs += count
            return group
        }
    }
}
