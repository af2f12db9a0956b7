import PostgresNIO
import Synchronization

/// Runs work on a leased connection and fails it as soon as the connection closes.
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

    func run<T: Sendable>(
        _ connection: PostgresConnection, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let id = ObjectIdentifier(connection)
        let outcome = Outcome<T>()
        let task = Task { outcome.finish(await Result(awaiting: { try await body(connection) })) }
        defer { running.withLock { $0[id]?.fail = nil } }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                outcome.attach(continuation)
                let first = running.withLock { r -> Bool in
                    let first = r[id] == nil
                    r[id] = Watched(fail: {
                        outcome.finish(.failure(StoreError.unavailable("the database connection closed")))
                        task.cancel()
                    })
                    return first
                }
                if first {
                    connection.closeFuture.whenComplete { [weak self] _ in
                        let fail = self?.running.withLock { $0.removeValue(forKey: id)?.fail } ?? nil
                        fail?()
                    }
                }
            }
        } onCancel: {
            // PostgresNIO does not stop a running query when its task is cancelled; closing the connection
            // does (the server checks for it: `client_connection_check_interval`), and the pool replaces it.
            task.cancel()
            connection.close().whenComplete { _ in }
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
