import ArgumentParser
import Foundation
import LedgerStore
import Logging
import PostgresNIO

/// Options every command that talks to PostgreSQL shares.
struct DatabaseOptions: ParsableArguments {
    @Option(
        name: .customLong("database-url"),
        help: "postgres://user:password@host:port/database (default: $DATABASE_URL)")
    var databaseURL: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (default: $LOG_LEVEL or info)")
    var logLevel: String?

    /// Checked while parsing, so a missing database is reported with the subcommand's own usage.
    func validate() throws {
        _ = try url()
    }

    func url() throws -> DatabaseURL {
        guard let text = databaseURL ?? ProcessInfo.processInfo.environment["DATABASE_URL"], !text.isEmpty else {
            throw ValidationError("no database: pass --database-url or set DATABASE_URL (in a checkout: eval \"$(tools/pg env)\")")
        }
        do {
            return try DatabaseURL(text)
        } catch {
            throw ValidationError("\(error)")
        }
    }

    func makeLogger(_ label: String) -> Logger {
        let levelText = logLevel ?? ProcessInfo.processInfo.environment["LOG_LEVEL"] ?? "info"
        let level = Logger.Level(rawValue: levelText.lowercased()) ?? .info
        LoggingBootstrap.once(level: level)
        var logger = Logger(label: label)
        logger.logLevel = level
        return logger
    }
}

/// Bootstraps swift-log once per process (only the executable does this; libraries take a `Logger`).
enum LoggingBootstrap {
    nonisolated(unsafe) private static var done = false

    static func once(level: Logger.Level) {
        guard !done else { return }
        done = true
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }
}

/// A command failure that prints its message and exits non-zero, without a usage text.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
