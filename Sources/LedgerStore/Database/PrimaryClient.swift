import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// The primary among several hosts (a multi-host URL, repeated `--database-url`): connects to whichever
/// host is writable, and when it fails in a way that may mean a failover (a lost connection, a read-only
/// error), checks it and, if it is no longer the primary, finds the new one and rebuilds the client.
///
/// PostgresNIO connects to one host; libpq's `target_session_attrs=read-write` is done here: each host is
/// asked `pg_is_in_recovery()` and `transaction_read_only` on a connection of its own. While no primary is
/// known, `currentClient()` throws `unavailable` at once, so appends during the switch answer 503 (with
/// `Retry-After`) instead of waiting; an append whose commit was cut off is retried by its client with the
/// same idempotency key, and the new primary (a synchronous standby until now) answers it as a replay if
/// it had committed. Run it as a service: it runs the current client.
public final class PrimaryClient: ClientProvider, Service {
    private struct State {
        var client: PostgresClient?
        var endpoint: DatabaseURL.Endpoint?
        /// Ends the running client's task.
        var stop: AsyncStream<Void>.Continuation?
        var checking = false
    }

    public let url: DatabaseURL
    private let configure: @Sendable (DatabaseURL) -> PostgresClient.Configuration
    private let logger: Logger
    private let state = Mutex(State())
    private let checks: AsyncStream<Void>
    private let check: AsyncStream<Void>.Continuation
    /// Told when a new primary is in use (after the first).
    private let onSwitch: @Sendable (DatabaseURL.Endpoint) -> Void
    private let switches = Atomic<Int>(0)
    /// How often the hosts are asked again while none is writable.
    let retryInterval: Duration
    /// How long a replaced client keeps running (longer than any lease timeout).
    let retireAfter: Duration

    /// `configure` builds the client configuration for one host (role, pool size, timeouts).
    public init(
        url: DatabaseURL, logger: Logger, retryInterval: Duration = .milliseconds(250), retireAfter: Duration = .seconds(30),
        onSwitch: @escaping @Sendable (DatabaseURL.Endpoint) -> Void = { _ in },
        configure: @escaping @Sendable (DatabaseURL) -> PostgresClient.Configuration
    ) {
        self.url = url
        self.logger = logger
        self.retryInterval = retryInterval
        self.retireAfter = retireAfter
        self.onSwitch = onSwitch
        self.configure = configure
        (checks, check) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// The host in use, if any.
    public var currentEndpoint: DatabaseURL.Endpoint? { state.withLock { $0.endpoint } }

    /// How many times a new primary was taken into use after the first.
    public var failovers: Int { switches.load(ordering: .relaxed) }

    public func currentClient() throws -> PostgresClient {
        guard let client = state.withLock({ $0.client }) else {
            throw StoreError.unavailable("no writable database host (a failover may be under way)")
        }
        return client
    }

    public func connectionFailed(_ error: any Error) {
        check.yield()
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                var failures = self.checks.makeAsyncIterator()
                var first = true
                while !Task.isCancelled {
                    guard let found = await self.findPrimary() else { break }
                    let (endpoint, client) = found
                    let (stopped, stop) = AsyncStream.makeStream(of: Void.self)
                    group.addTask {
                        await withTaskGroup(of: Void.self) { running in
                            running.addTask { await client.run() }
                            running.addTask { for await _ in stopped {} }
                            await running.next()
                            running.cancelAll()
                        }
                    }
                    self.state.withLock { s in
                        s.client = client
                        s.endpoint = endpoint
                        s.stop = stop
                    }
                    self.logger.notice("database primary in use", metadata: ["db.primary": "\(endpoint)"])
                    if !first {
                        self.switches.wrappingAdd(1, ordering: .relaxed)
                        self.onSwitch(endpoint)
                    }
                    first = false
                    // Until a failure report finds the host no longer writable.
                    while await failures.next() != nil, !Task.isCancelled {
                        if await !self.isWritable(endpoint) { break }
                    }
                    let old = self.state.withLock { s -> AsyncStream<Void>.Continuation? in
                        let stop = s.stop
                        (s.client, s.endpoint, s.stop) = (nil, nil, nil)
                        return stop
                    }
                    // Requests that took the old client just before may still wait for one of its
                    // connections; a pool whose run() has ended never answers them (nor their
                    // cancellation), so it keeps running until their lease timeouts have passed.
                    let retire = self.retireAfter
                    group.addTask {
                        try? await Task.sleep(for: retire)
                        old?.finish()
                    }
                    if Task.isCancelled { break }
                    self.logger.warning("database primary lost; looking for the new one", metadata: ["db.primary": "\(endpoint)"])
                }
                let last = self.state.withLock { s -> AsyncStream<Void>.Continuation? in
                    defer { (s.client, s.endpoint, s.stop) = (nil, nil, nil) }
                    return s.stop
                }
                last?.finish()
            }
        }
    }

    /// Asks every host in order until one is writable; nil when cancelled.
    private func findPrimary() async -> (DatabaseURL.Endpoint, PostgresClient)? {
        var attempt = 0
        while !Task.isCancelled {
            for endpoint in url.endpoints where await isWritable(endpoint) {
                return (endpoint, PostgresClient(configuration: configure(url.single(endpoint)), backgroundLogger: logger))
            }
            attempt += 1
            if attempt == 1 || attempt % 20 == 0 {
                logger.warning("no writable database host yet", metadata: ["db.hosts": "\(url.endpoints.map(\.description))"])
            }
            try? await Task.sleep(for: retryInterval)
        }
        return nil
    }

    /// One short connection of its own: writable means not in recovery and not read-only.
    func isWritable(_ endpoint: DatabaseURL.Endpoint) async -> Bool {
        await Self.probe(url.single(endpoint), logger: logger) == .writable
    }

    /// What a host is, asked on a connection of its own (bounded by the connect timeout and 3 s per query).
    public enum Role: Sendable, Equatable {
        case writable
        case readOnly
        case unreachable
    }

    public static func probe(_ url: DatabaseURL, logger: Logger, timeout: Duration = .seconds(3)) async -> Role {
        do {
            // The probe's own connection: TLS only when the URL requires it (SCRAM never sends the password).
            let tls: PostgresConnection.Configuration.TLS =
                url.sslMode == "require" ? .require(try NIOSSLContext(configuration: .makeClientConfiguration())) : .disable
            var config = PostgresConnection.Configuration(
                host: url.host, port: url.port, username: url.username, password: url.password, database: url.database, tls: tls)
            config.options.connectTimeout =
                timeout < .seconds(2)
                ? .milliseconds(Int64(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)) : .seconds(2)
            let configuration = config
            return try await withThrowingTaskGroup(of: Role.self) { group in
                group.addTask {
                    let connection = try await PostgresConnection.connect(
                        on: MultiThreadedEventLoopGroup.singleton.any(), configuration: configuration, id: 0, logger: logger)
                    let answer: (Bool, Bool)?
                    do {
                        answer = try await connection.query(
                            "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'", logger: logger
                        ).collect().first?.decode((Bool, Bool).self)
                    } catch {
                        try? await connection.close()
                        throw error
                    }
                    try? await connection.close()
                    guard let (recovery, readOnly) = answer else { return .unreachable }
                    return recovery || readOnly ? .readOnly : .writable
                }
                group.addTask {
                    try await Task.sleep(for: timeout)
                    return .unreachable
                }
                defer { group.cancelAll() }
                return try await group.next() ?? .unreachable
            }
        } catch {
            return .unreachable
        }
    }
}
