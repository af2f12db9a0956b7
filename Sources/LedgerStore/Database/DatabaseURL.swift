import Foundation
import PostgresNIO

/// A `postgres://user:password@host:port/database?sslmode=disable|prefer|require` URL, or libpq's multi-host
/// form `postgresql://user:password@h1:p1,h2:p2/database?target_session_attrs=read-write`: the service then
/// connects to whichever host is writable and follows a failover (`PrimaryClient`).
public struct DatabaseURL: Sendable, CustomStringConvertible {
    public enum ParseError: Error, CustomStringConvertible {
        case invalid(String)
        public var description: String {
            switch self {
            case .invalid(let why): "invalid database URL: \(why)"
            }
        }
    }

    /// One `host:port` of a (multi-host) URL.
    public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int
        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// Every host, in the order given; `host` and `port` are the first's.
    public var endpoints: [Endpoint]
    public var username: String
    public var password: String?
    public var database: String
    public var sslMode: String
    /// libpq's `target_session_attrs` (`any`, `read-write`, `primary`, …), when given.
    public var targetSessionAttrs: String?

    public var host: String {
        get { endpoints[0].host }
        set { endpoints[0].host = newValue }
    }

    public var port: Int {
        get { endpoints[0].port }
        set { endpoints[0].port = newValue }
    }

    /// More than one host: the writable one is looked for, and looked for again after a failover.
    public var isMultiHost: Bool { endpoints.count > 1 }

    public init(_ text: String) throws(ParseError) {
        // URLComponents knows one host only: the host list is split off and parsed here.
        guard let schemeEnd = text.range(of: "://") else { throw .invalid("expected postgres://user:password@host:port/database") }
        let afterScheme = text[schemeEnd.upperBound...]
        let authorityEnd = afterScheme.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? afterScheme.endIndex
        let authority = afterScheme[..<authorityEnd]
        let at = authority.lastIndex(of: "@")
        let hostList = at.map { authority[authority.index(after: $0)...] } ?? authority
        var endpoints: [Endpoint] = []
        for item in hostList.split(separator: ",", omittingEmptySubsequences: false) {
            endpoints.append(try Self.endpoint(item))
        }
        guard let first = endpoints.first else { throw .invalid("no host") }
        let userInfo = at.map { String(authority[..<$0]) + "@" } ?? ""
        let single = String(text[..<schemeEnd.upperBound]) + userInfo + first.description + String(afterScheme[authorityEnd...])
        guard let c = URLComponents(string: single), let scheme = c.scheme,
            scheme == "postgres" || scheme == "postgresql"
        else { throw .invalid("expected postgres://user:password@host:port/database") }
        guard let user = c.user, !user.isEmpty else { throw .invalid("no user name") }
        let database = String(c.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty else { throw .invalid("no database name") }
        self.endpoints = endpoints
        self.username = user.removingPercentEncoding ?? user
        self.password = c.password.map { $0.removingPercentEncoding ?? $0 }
        self.database = database.removingPercentEncoding ?? database
        self.sslMode = c.queryItems?.first(where: { $0.name == "sslmode" })?.value ?? "prefer"
        guard ["disable", "prefer", "require"].contains(sslMode) else {
            throw .invalid("sslmode must be disable, prefer or require")
        }
        targetSessionAttrs = c.queryItems?.first(where: { $0.name == "target_session_attrs" })?.value
        if let attrs = targetSessionAttrs, !["any", "read-write", "primary"].contains(attrs) {
            throw .invalid("target_session_attrs must be any, read-write or primary (the service writes)")
        }
    }

    private static func endpoint(_ text: Substring) throws(ParseError) -> Endpoint {
        var host = text
        var port = 5432
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { throw .invalid("unclosed [ in host '\(text)'") }
            let rest = host[host.index(after: close)...]
            host = host[host.index(after: host.startIndex)..<close]
            if !rest.isEmpty {
                guard rest.hasPrefix(":"), let p = Int(rest.dropFirst()) else { throw .invalid("bad port in '\(text)'") }
                port = p
            }
        } else if let colon = host.lastIndex(of: ":") {
            guard let p = Int(host[host.index(after: colon)...]) else { throw .invalid("bad port in '\(text)'") }
            port = p
            host = host[..<colon]
        }
        guard !host.isEmpty else { throw .invalid("no host") }
        guard (1...65535).contains(port) else { throw .invalid("port \(port) out of range") }
        return Endpoint(host: String(host), port: port)
    }

    /// The hosts of `other` added to these (repeated `--database-url`): same user, password and database.
    public func adding(_ other: DatabaseURL) throws(ParseError) -> DatabaseURL {
        guard other.username == username, other.password == password, other.database == database else {
            throw .invalid("every --database-url must name the same user, password and database (only hosts differ)")
        }
        var copy = self
        for e in other.endpoints where !copy.endpoints.contains(e) { copy.endpoints.append(e) }
        return copy
    }

    /// This URL with one host only (to connect to one member of a multi-host URL).
    public func single(_ endpoint: Endpoint) -> DatabaseURL {
        var copy = self
        copy.endpoints = [endpoint]
        return copy
    }

    /// The URL with the password hidden, for logs.
    public var description: String {
        "postgres://\(username)@\(endpoints.map(\.description).joined(separator: ","))/\(database)"
    }

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
        // A query whose connection the server closed (its work was cancelled: the HTTP client went away)
        // is abandoned within a second instead of running to its end (PostgreSQL 14+).
        config.options.additionalStartupParameters.append(("client_connection_check_interval", "1000"))
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
