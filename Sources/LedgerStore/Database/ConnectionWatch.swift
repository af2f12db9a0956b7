import NIOCore
import PostgresNIO
import Synchronization

/// Leases a connection and runs work on it, failing the work as soon as the connection closes.
///
/// PostgresNIO (1.33) writes a query to its channel without a promise; a query written just as the server
/// ends the connection (PostgreSQL killed or failed over between two statements of a transaction) is never
/// answered nor failed, so its caller waits forever. In a group commit that would hold every later append
/// (seen in tools/ha-check: the primary killed between a transaction's lock and its INSERT). So the work
/// runs in a task of its own, and the connection's close (one callback per connection, not per lease)
/// answers the caller with `unavailable` at once; the stuck task is cancelled and left to end on its own,
/// and the lease goes back to the pool, which discards the closed connection. Work cancelled by its caller
/// (an HTTP client that went away) closes its connection, which is what stops the query on the server.
final class ConnectionWatch: Sendable {
    static let shared = ConnectionWatch()

    /// Per open connection: how to fail the work running on it now, if any.
    private let running = Mutex<[ObjectIdentifier: Watched]>([:])

    private struct Watched {
        var fail: (@Sendable () -> Void)?
    }

    /// Leases a connection of `client` and runs `body` on it, in one task of its own: the caller is answered
    /// by the body's result, by the connection's close (`unavailable`), or, when no connection came within
    /// `timeout`, by `unavailable` (the lease request withdrawn). The deadline is a timer of the event loop
    /// the caller runs on, not a racing task: a lone append used to pay a task group of two children (lease
    /// and timer) plus the watch's task, each a thread wake-up (BENCHMARKS.md, issue 38).
    func lease<T: Sendable>(
        from client: PostgresClient, within timeout: Duration,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let outcome = Outcome<T>()
        let lease = Lease()
        let task = Task {
            let result = await Result(awaiting: {
                try await client.withConnection { connection in
                    guard lease.leased(connection) else { throw CancellationError() }
                    return try await self.watching(connection, outcome: outcome, lease: lease) { try await body(connection) }
                }
            })
            outcome.finish(result)
        }
        lease.task = task
        // `any()` of NIO's group is the loop the caller runs on, when it runs on one (Swift Concurrency does in
        // `serve`): the timer then costs no wake-up of another thread.
        let loop = PostgresClient.defaultEventLoopGroup.any()
        let deadline = loop.scheduleTask(in: .nanoseconds(Self.nanoseconds(timeout))) {
            if lease.expire() {
                outcome.finish(.failure(StoreError.unavailable("no database connection within \(timeout)")))
                task.cancel()
            }
        }
        defer { deadline.cancel() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in outcome.attach(continuation) }
        } onCancel: {
            // PostgresNIO does not stop a running query when its task is cancelled; closing the connection
            // does (the server checks for it: `client_connection_check_interval`), and the pool replaces it.
            task.cancel()
            lease.connection?.close().whenComplete { _ in }
        }
    }

    static func nanoseconds(_ d: Duration) -> Int64 {
        let (seconds, attoseconds) = d.components
        return seconds.multipliedReportingOverflow(by: 1_000_000_000).overflow
            ? .max : seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    /// Runs `work` with `connection`'s close failing `outcome` at once.
    private func watching<T: Sendable>(
        _ connection: PostgresConnection, outcome: Outcome<T>, lease: Lease, _ work: () async throws -> T
    ) async throws -> T {
        let id = ObjectIdentifier(connection)
        let first = running.withLock { r -> Bool in
            let first = r[id] == nil
            r[id] = Watched(fail: {
                outcome.finish(.failure(StoreError.unavailable("the database connection closed")))
                lease.task?.cancel()
            })
            return first
        }
        if first {
            connection.closeFuture.whenComplete { [weak self] _ in
                let fail = self?.running.withLock { $0.removeValue(forKey: id)?.fail } ?? nil
                fail?()
            }
        }
        defer { running.withLock { $0[id]?.fail = nil } }
        return try await work()
    }

    /// One lease's state: its task, the connection once leased, and whether its deadline passed first.
    private final class Lease: Sendable {
        private let state = Mutex<(task: Task<Void, Never>?, connection: PostgresConnection?, expired: Bool)>((nil, nil, false))

        var task: Task<Void, Never>? {
            get { state.withLock { $0.task } }
            set { state.withLock { $0.task = newValue } }
        }
        var connection: PostgresConnection? { state.withLock { $0.connection } }

        /// The connection came: false when the deadline passed first (the caller was answered already).
        func leased(_ connection: PostgresConnection) -> Bool {
            state.withLock { s in
                guard !s.expired else { return false }
                s.connection = connection
                return true
            }
        }

        /// The deadline passed: true when no connection had come.
        func expire() -> Bool {
            state.withLock { s in
                guard s.connection == nil, !s.expired else { return false }
                s.expired = true
                return true
            }
        }
    }

    /// The work's result or the connection's close, whichever comes first, delivered once.
    private final class Outcome<T: Sendable>: Sendable {
        private let state = Mutex<(result: Result<T, any Error>?, continuation: CheckedContinuation<T, any Error>?)>((nil, nil))

        func attach(_ continuation: CheckedContinuation<T, any Error>) {
            let ready = state.withLock { s -> Result<T, any Error>? in
                if let result = s.result {
                    s.result = nil
                    return result
                }
                s.continuation = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }

        func finish(_ result: Result<T, any Error>) {
            let waiting = state.withLock { s -> CheckedContinuation<T, any Error>? in
                guard let continuation = s.continuation else {
                    if s.result == nil { s.result = result }
                    return nil
                }
                s.continuation = nil
                s.result = nil
                return continuation
            }
            waiting?.resume(with: result)
        }
    }
}

extension Result where Failure == any Error {
    init(awaiting body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
