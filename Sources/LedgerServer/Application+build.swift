import Hummingbird
import LedgerCore
import LedgerStore
import Logging
import PostgresNIO
import Prometheus

/// What `subledger serve` is told on its command line.
public struct ServerConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// Request bodies above this are refused with 413 before they are read.
    public var maxBodyBytes: Int

    public init(host: String = "127.0.0.1", port: Int = 8080, maxBodyBytes: Int = 8 * 1024 * 1024) {
        self.host = host
        self.port = port
        self.maxBodyBytes = maxBodyBytes
    }
}

/// The ledger's HTTP application: routes, auth and error mapping over a PostgreSQL client.
///
/// The client is added to the application's services so it starts before the server accepts requests
/// and shuts down gracefully after it (SIGTERM/SIGINT).
public func buildApplication(
    configuration: ServerConfiguration,
    client: PostgresClient,
    migrations: [Migration],
    metrics registry: PrometheusCollectorRegistry? = nil,
    logger: Logger
) -> some ApplicationProtocol {
    let router = buildRouter(
        configuration: configuration, client: client, migrations: migrations, metrics: registry, logger: logger)
    return Application(
        router: router,
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "subledger"),
        services: [client],
        logger: logger
    )
}

/// The router alone, for tests that drive it without a socket.
public func buildRouter(
    configuration: ServerConfiguration,
    client: PostgresClient,
    migrations: [Migration],
    metrics registry: PrometheusCollectorRegistry? = nil,
    logger: Logger
) -> Router<LedgerRequestContext> {
    let router = Router(context: LedgerRequestContext.self)
    router.add(middleware: ErrorMiddleware())
    if registry != nil { router.add(middleware: MetricsMiddleware()) }

    OperationsRoutes(
        migrations: MigrationRunner(client: client, migrations: migrations, logger: logger), registry: registry
    ).register(on: router)

    let v1 = router.group("v1").add(middleware: AuthMiddleware(keys: APIKeyStore(client: client, logger: logger)))
    EventRoutes(store: EventStore(client: client, logger: logger), maxBodyBytes: configuration.maxBodyBytes)
        .register(on: v1)
    return router
}
