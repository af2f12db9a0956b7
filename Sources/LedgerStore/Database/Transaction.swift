import Logging
import PostgresNIO

extension PostgresClient {
    /// `withTransaction`, but rethrowing what actually went wrong instead of PostgresNIO's wrapper, so domain
    /// errors thrown inside (a version conflict, say) reach the caller as themselves.
    ///
    /// A failed COMMIT (e.g. the connection dropped) surfaces as the driver's error, which
    /// `StoreError.classify` turns into `.unavailable`: the client retries with the same idempotency key.
    func transaction<Result: Sendable>(
        logger: Logger, _ body: (PostgresConnection) async throws -> sending Result
    ) async throws -> sending Result {
        do {
            return try await withTransaction(logger: logger, body)
        } catch let error as PostgresTransactionError {
            throw error.closureError ?? error.beginError ?? error.commitError ?? error
        }
    }
}
