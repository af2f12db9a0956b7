import Logging
import PostgresNIO

/// The PostgreSQL client as the store uses it: every operation first leases a connection, and a lease that
/// does not come within `leaseTimeout` fails with `StoreError.unavailable` instead of waiting.
///
/// PostgresNIO's pool keeps a request waiting while it retries a database that is down; a ledger's caller
/// would rather get a quick 503 and retry with its idempotency key. Only the wait for a connection is
/// bounded: a long-running read (a verify, an export) is not cut short once it has its connection.
public struct Database: Sendable {
    let provider: any ClientProvider
    public let logger: Logger
    public let leaseTimeout: Duration

    public init(client: PostgresClient, logger: Logger, leaseTimeout: Duration = .seconds(3)) {
        self.init(provider: FixedClient(client: client), logger: logger, leaseTimeout: leaseTimeout)
    }

    /// A database whose client can change (`PrimaryClient`: the writable host of several).
    public init(provider: any ClientProvider, logger: Logger, leaseTimeout: Duration = .seconds(3)) {
        self.provider = provider
        self.logger = logger
        self.leaseTimeout = leaseTimeout
    }

    /// Runs `body` on a leased connection.
    ///
    /// A failure that means the server is gone or no longer writable (a lost connection, SQLSTATE 25006
    /// `read_only_sql_transaction`) is reported to the provider, which then looks for the primary again.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await leasing(body)
        } catch {
            if case .unavailable = error as? StoreError { provider.connectionFailed(error) }
            throw error
        }
    }

    private func leasing<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let timeout = leaseTimeout
        return try await StoreError.mapping {
            try await ConnectionWatch.shared.lease(from: try provider.currentClient(), within: timeout, body)
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

/// Supplies the client a `Database` leases from, and hears when it failed in a way that may mean the
/// server is gone or no longer the primary.
public protocol ClientProvider: Sendable {
    /// The client to use now; throws `StoreError.unavailable` while there is none (a failover under way).
    func currentClient() throws -> PostgresClient
    func connectionFailed(_ error: any Error)
}

/// One client for good (a single-host URL).
struct FixedClient: ClientProvider {
    let client: PostgresClient
    func currentClient() throws -> PostgresClient { client }
    func connectionFailed(_ error: any Error) {}
}
