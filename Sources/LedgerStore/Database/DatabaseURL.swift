import Foundation
import PostgresNIO

/// A `postgres://user:password@host:port/database?sslmode=disable|prefer|require` URL.
public struct DatabaseURL: Sendable, CustomStringConvertible {
    public enum ParseError: Error, CustomStringConvertible {
        case invalid(String)
        public var description: String {
            switch self {
            case .invalid(let why): "invalid database URL: \(why)"
            }
        }
    }

    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    public var sslMode: String

    public init(_ text: String) throws(ParseError) {
        guard let c = URLComponents(string: text), let scheme = c.scheme,
            scheme == "postgres" || scheme == "postgresql"
        else { throw .invalid("expected postgres://user:password@host:port/database") }
        guard let host = c.host, !host.isEmpty else { throw .invalid("no host") }
        guard let user = c.user, !user.isEmpty else { throw .invalid("no user name") }
        let database = String(c.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty else { throw .invalid("no database name") }
        self.host = host
        self.port = c.port ?? 5432
        self.username = user.removingPercentEncoding ?? user
        self.password = c.password.map { $0.removingPercentEncoding ?? $0 }
        self.database = database.removingPercentEncoding ?? database
        self.sslMode = c.queryItems?.first(where: { $0.name == "sslmode" })?.value ?? "prefer"
        guard ["disable", "prefer", "require"].contains(sslMode) else {
            throw .invalid("sslmode must be disable, prefer or require")
        }
    }

    /// The URL with the password hidden, for logs.
    public var description: String { "postgres://\(username)@\(host):\(port)/\(database)" }

    /// A client configuration; `role`, when given, is the role every connection acts as (`SET ROLE` at
    /// connection start-up), so a deployment can log in as the schema owner yet serve as the restricted role.
    /// The client configuration; `statementTimeout` (the server's request queries) cancels any statement
    /// that runs longer, so that one request can neither hold the append lock nor fill the disk for long.
    public func clientConfiguration(
        role: String? = nil, maximumConnections: Int = 20, statementTimeout: Duration? = nil
    ) -> PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS
        switch sslMode {
        case "disable": tls = .disable
        case "require": tls = .require(.makeClientConfiguration())
        default: tls = isLoopback ? .disable : .prefer(.makeClientConfiguration())
        }
        var config = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        if let role, !role.isEmpty {
            config.options.additionalStartupParameters.append(("role", role))
        }
        config.options.additionalStartupParameters.append(("application_name", "subledger"))
        if let statementTimeout, statementTimeout > .zero {
            let ms = statementTimeout.components.seconds * 1000 + statementTimeout.components.attoseconds / 1_000_000_000_000_000
            config.options.additionalStartupParameters.append(("statement_timeout", "\(max(1, ms))"))
        }
        config.options.maximumConnections = maximumConnections
        config.options.connectTimeout = .seconds(3)
        // Every release of a pooled connection schedules PostgresNIO's idle (60 s) and keep-alive (30 s)
        // timers; a cancelled sleep keeps its memory until its deadline, so at thousands of queries per
        // second those timers held hundreds of MiB (docs/event-store.md, "Connections"). A short idle
        // timeout bounds that to a few seconds of queries; a connection that died while idle fails its next
        // query and is replaced, so the keep-alive ping is not needed.
        config.options.connectionIdleTimeout = .seconds(5)
        config.options.keepAliveBehavior = nil
        return config
    }

    private var isLoopback: Bool { host == "localhost" || host == "127.0.0.1" || host == "::1" }

    /// The same server and credentials, another database (tests create one per case).
    public func with(database: String) -> DatabaseURL {
        var copy = self
        copy.database = database
        return copy
    }
}
