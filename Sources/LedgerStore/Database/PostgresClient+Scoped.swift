import Logging
import PostgresNIO

/// Runs `body` with a started client and shuts the client down afterwards: for one-shot work (CLI
/// commands, tests) that has no ServiceGroup to run the client in.
public func withPostgresClient<T: Sendable>(
    _ configuration: PostgresClient.Configuration, logger: Logger,
    _ body: @escaping @Sendable (PostgresClient) async throws -> T
) async throws -> T {
    let client = PostgresClient(configuration: configuration, backgroundLogger: logger.forConnectionPool)
    return try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask {
            await client.run()
            return nil
        }
        group.addTask { try await body(client) }
        while let next = try await group.next() {
            if let result = next {
                group.cancelAll()
                return result
            }
        }
        throw CancellationError()
    }
}
