import Logging
import PostgresNIO
import Synchronization

/// The PostgreSQL client as the store uses it: every operation first leases a connection, and a lease that
/// does not come within `leaseTimeout` fails with `StoreError.unavailable` instead of waiting.
///
/// PostgresNIO's pool keeps a request waiting while it retries a database that is down; a ledger's caller
/// would rather get a quick 503 and retry with its idempotency key. Only the wait for a connection is
/// bounded: a long-running read (a verify, an export) is not cut short once it has its connection.
public struct Database: Sendable {
    public let client: PostgresClient
    public let logger: Logger
    public let leaseTimeout: Duration

    public init(client: PostgresClient, logger: Logger, leaseTimeout: Duration = .seconds(3)) {
        self.client = client
        self.logger = logger
        self.leaseTimeout = leaseTimeout
    }

    /// Runs `body` on a leased connection.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let leased = LeaseFlag()
        let timeout = leaseTimeout
        return try await StoreError.mapping {
            try await withThrowingTaskGroup(of: T?.self) { group in
                group.addTask {
                    try await client.withConnection { connection in
                        leased.set()
                        return try await body(connection)
                    }
                }
                group.addTask {
                    try await Task.sleep(for: timeout)
                    if !leased.isSet {
                        throw StoreError.unavailable("no database connection within \(timeout)")
                    }
                    return nil
                }
                while let result = try await group.next() {
                    if let value = result {
                        group.cancelAll()
                        return value
                    }
                }
                throw CancellationError()
            }
        }
    }

    /// Runs `body` in a transaction on a leased connection; a thrown error rolls it back and is rethrown.
    ///
    /// COMMIT's reply is checked: PostgreSQL answers `ROLLBACK` (not an error) to a COMMIT of a transaction
    /// that a failed statement aborted, and a statement's error can go unseen when its result rows are
    /// never read. Without the check such a transaction would report success with nothing stored.
    @discardableResult
    public func transaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let logger = self.logger
        return try await withConnection { connection in
            try await connection.query("BEGIN", logger: logger)
            let value: T
            do {
                value = try await body(connection)
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
            let reply = try await connection.query("COMMIT", []).get().metadata.command
            guard reply == "COMMIT" else { throw RolledBackAtCommit(reply: reply) }
            return value
        }
    }

    /// COMMIT answered something else (`ROLLBACK`): an earlier statement of the transaction failed.
    public struct RolledBackAtCommit: Error, CustomStringConvertible {
        public var reply: String
        public var description: String { "the transaction was rolled back at COMMIT (\(reply)): one of its statements failed" }
    }
}

private final class LeaseFlag: Sendable {
    private let value = Mutex(false)
    var isSet: Bool { value.withLock { $0 } }
    func set() { value.withLock { $0 = true } }
}
