import Logging
import PostgresNIO
import ServiceLifecycle

/// Says once when PostgreSQL stops answering and once when it answers again.
///
/// The connection pool's own logger is kept at warning (`Logger.forConnectionPool`) because PostgresNIO logs
/// every failed connection attempt, a line a second through an outage; this service gives the operator the
/// two lines that matter, whether or not requests are coming in.
public struct DatabaseWatch: Service {
    let database: Database
    let interval: Duration

    public init(database: Database, interval: Duration = .seconds(2)) {
        self.database = database
        self.interval = interval
    }

    public func run() async throws {
        let logger = database.logger
        await cancelWhenGracefulShutdown {
            var downSince: ContinuousClock.Instant? = nil
            while !Task.isCancelled {
                do {
                    try await database.withConnection { connection in _ = try await connection.query("SELECT 1", logger: logger).collect() }
                    if let since = downSince {
                        let seconds = (ContinuousClock.now - since).components.seconds
                        logger.info("database reachable again", metadata: ["db.outage_seconds": "\(seconds)"])
                        downSince = nil
                    }
                } catch  where Task.isCancelled {
                    return
                } catch {
                    if downSince == nil {
                        logger.warning(
                            "database unreachable: requests answer 503 and /ready is 503 until it is back",
                            metadata: ["db.error": "\(StoreError.classify(error))"])
                        downSince = .now
                    }
                }
                try? await Task.sleep(for: interval)
            }
        }
    }
}

extension Logger {
    /// The logger for a PostgresClient's pool: warnings and worse, unless debug or trace was asked for.
    public var forConnectionPool: Logger {
        var copy = self
        if copy.logLevel > .debug { copy.logLevel = max(copy.logLevel, .warning) }
        return copy
    }
}
