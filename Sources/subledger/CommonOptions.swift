import ArgumentParser
import Foundation
import LedgerStore
import Logging
import PostgresNIO

/// Options every command that talks to PostgreSQL shares.
struct DatabaseOptions: ParsableArguments {
    @Option(
        name: .customLong("database-url"),
        help:
            "postgres://user:password@host:port/database (default: $DATABASE_URL); several hosts (h1:p1,h2:p2, or the option repeated) mean the writable one"
    )
    var databaseURLs: [String] = []

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (default: $LOG_LEVEL or info)")
    var logLevel: String?

    /// Checked while parsing, so a missing database is reported with the subcommand's own usage.
    func validate() throws {
        _ = try allHosts()
    }

    /// Every host given (`--database-url` repeated, or libpq's `h1:p1,h2:p2`), as one URL.
    func allHosts() throws -> DatabaseURL {
        let texts = databaseURLs.isEmpty ? [EnvironmentFallback().text("DATABASE_URL") ?? ""] : databaseURLs
        guard let first = texts.first, !first.isEmpty else {
            throw ValidationError("no database: pass --database-url or set DATABASE_URL (in a checkout: eval \"$(tools/pg env)\")")
        }
        do {
            var url = try DatabaseURL(first)
            for text in texts.dropFirst() { url = try url.adding(DatabaseURL(text)) }
            return url
        } catch {
            throw ValidationError("\(error)")
        }
    }

    /// The database one-shot commands use: with several hosts, the writable one (asked now).
    func url() async throws -> DatabaseURL {
        let url = try allHosts()
        guard url.isMultiHost else { return url }
        for endpoint in url.endpoints where await PrimaryClient.probe(url.single(endpoint), logger: Logger(label: "subledger")) == .writable {
            return url.single(endpoint)
        }
        throw CommandFailure("none of the database hosts \(url.endpoints.map(\.description)) is writable")
    }

    /// Fails naming what to do when the database's schema is not the one this binary ships (a migration
    /// pending, or an applied one edited), instead of with the first statement's PostgreSQL error. Skipped
    /// when the binary cannot find its schema files.
    func requireCurrentSchema(_ client: PostgresClient, logger: Logger) async throws {
        guard let schema = try? Schema.bundled() else { return }
        let status = try await MigrationRunner(client: client, schema: schema, logger: logger).status()
        if let refusal = status.refusal { throw CommandFailure(refusal) }
    }

    func makeLogger(_ label: String) -> Logger {
        let levelText = EnvironmentFallback().string(logLevel, "LOG_LEVEL") ?? "info"
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
            var handler = DeferredMetadataLogHandler(StreamLogHandler.standardError(label: label))
            handler.logLevel = level
            return handler
        }
    }
}

/// `StreamLogHandler` with its metadata held aside until a message is logged.
///
/// `StreamLogHandler` renders its metadata into text whenever the metadata changes. Hummingbird gives each
/// request's logger a request id, so every request paid for that rendering whether anything was logged or
/// not: about 1% of the server's CPU under load (profiled during single appends at 32 clients).
struct DeferredMetadataLogHandler: LogHandler {
    private var stream: StreamLogHandler
    var metadata: Logger.Metadata = [:]

    init(_ stream: StreamLogHandler) {
        self.stream = stream
    }

    var logLevel: Logger.Level {
        get { stream.logLevel }
        set { stream.logLevel = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { stream.metadataProvider }
        set { stream.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var stream = stream
        stream.metadata = metadata
        stream.log(event: event)
    }
}

/// A command failure that prints its message and exits non-zero, without a usage text.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
