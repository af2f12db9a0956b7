import PostgresNIO
import _ConnectionPoolModule

/// Domain failures of the store; the HTTP edge maps each to the contract's error body.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `expected_version` did not match the stream (409 `version_conflict`).
    case versionConflict(subscriberID: String, expected: Int64, actual: Int64, index: Int?)
    /// The idempotency key was used before for a different event (409 `idempotency_conflict`).
    case idempotencyConflict(source: String, key: String, index: Int?)
    /// The database cannot be reached or refused work; nothing was stored (503 `unavailable`).
    case unavailable(String)
    /// The subscriber was merged into `into` and the append refuses merged subscribers (`EventIntake` turns it
    /// into `IdentityError.subscriberMerged`, 409 `subscriber_merged`).
    case subscriberMerged(subscriber: String, into: String)

    public var description: String {
        switch self {
        case .versionConflict(let s, let expected, let actual, let index):
            "\(index.map { "events[\($0)]: " } ?? "")expected_version \(expected) but subscriber \(s) is at version \(actual)"
        case .idempotencyConflict(let source, let key, let index):
            "\(index.map { "events[\($0)]: " } ?? "")idempotency_key \"\(key)\" of source \"\(source)\" was already used for a different event"
        case .unavailable(let why): "the database is unavailable: \(why)"
        case .subscriberMerged(let s, let into): "subscriber \(s) was merged into \(into)"
        }
    }
}

extension StoreError {
    /// Turns driver failures that mean "the database is not there" into `.unavailable`.
    public static func classify(_ error: any Error) -> any Error {
        if let error = error as? PSQLError {
            switch error.code {
            case .connectionError, .serverClosedConnection, .clientClosedConnection, .poolClosed, .uncleanShutdown,
                .sslUnsupported, .failedToAddSSLHandler:
                return StoreError.unavailable("\(error.code)")
            case .server:
                if let mapped = unavailable(sqlState: error.sqlState ?? "", message: error.serverMessage) { return mapped }
            default:
                break
            }
        }
        // The EventLoopFuture API (the checked COMMIT) reports with the older error type: a lost connection,
        // or the server's FATAL as it goes down ("terminating connection due to unexpected postmaster exit").
        switch error as? PostgresError {
        case .connectionClosed?:
            return StoreError.unavailable("the database connection closed")
        case .server(let server)?:
            let message = server.fields[.message] ?? "\(server)"
            if let mapped = unavailable(sqlState: server.fields[.sqlState] ?? "", message: message) { return mapped }
        default:
            break
        }
        if error is ConnectionPoolError {
            return StoreError.unavailable("no database connection (\(error))")
        }
        return error
    }

    /// A server error that means the server is going away or no longer writable, by its SQLSTATE.
    ///
    /// 08: connection exception; 57P01-57P05: admin shutdown, crash shutdown, cannot connect now…;
    /// 53: insufficient resources; 25006 read_only_sql_transaction: the server is a standby now (a failover
    /// demoted it). 40001/40P01 are retried by callers, not mapped here.
    static func unavailable(sqlState state: String, message: String) -> StoreError? {
        if state.hasPrefix("08") || state.hasPrefix("57P") || state.hasPrefix("53") {
            return .unavailable(message)
        }
        if state == "25006" {
            return .unavailable("the database is read-only (a failover is under way): \(message)")
        }
        return nil
    }

    /// Runs `body`, translating database-outage errors into `.unavailable`.
    static func mapping<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw classify(error)
        }
    }
}

extension PSQLError {
    func isUniqueViolation(of constraint: String) -> Bool {
        sqlState == "23505" && serverInfo?[.constraintName] == constraint
    }
}
