import Hummingbird
import LedgerCore
import LedgerStore
import LedgerWebhooks
import Logging
import PostgresNIO
import Prometheus
import ServiceLifecycle

/// The ledger's HTTP application: routes, auth and error mapping over a PostgreSQL client.
///
/// The client is added to the application's services so it starts before the server accepts requests
/// and shuts down gracefully after it (SIGTERM/SIGINT). `replicas` (named, for logs and metrics) serve
/// reads that their position allows (`ReadRouter`); they are run as services too.
public func buildApplication(
    configuration: ServerConfiguration,
    client: PostgresClient,
    replicas: [(name: String, client: PostgresClient)] = [],
    schema: Schema,
    metrics registry: PrometheusCollectorRegistry? = nil,
    logger: Logger
) throws -> some ApplicationProtocol {
    try buildApplication(
        configuration: configuration, primary: Database(client: client, logger: logger, leaseTimeout: configuration.databaseLeaseTimeout),
        services: [client as any Service] + replicas.map { $0.client as any Service }, replicas: replicas, schema: schema, metrics: registry,
        logger: logger)
}

/// The application over a primary `Database` whose client the caller provides as one of `services` (a
/// failover-aware primary, `PrimaryClient`, is one).
public func buildApplication(
    configuration: ServerConfiguration,
    primary database: Database,
    services clientServices: [any Service],
    replicas: [(name: String, client: PostgresClient)] = [],
    schema: Schema,
    metrics registry: PrometheusCollectorRegistry? = nil,
    logger: Logger
) throws -> some ApplicationProtocol {
    let cache =
        configuration.entitlementCacheBytes > 0
        ? LedgerCache(byteBudget: configuration.entitlementCacheBytes, tracksRecentChanges: !replicas.isEmpty) : nil
    // A replica that does not answer quickly is set aside and the primary answers: a short lease timeout.
    let readRouter = ReadRouter(
        primary: database,
        replicas: replicas.map { ($0.name, Database(client: $0.client, logger: logger, leaseTimeout: .milliseconds(500))) },
        replicaWait: configuration.replicaWait)
    let rollups = ReportRollupWorker(database: database)
    let intake = makeIntake(
        database: database, readRouter: readRouter, cache: cache, clock: configuration.clock, transferPolicy: configuration.transferPolicy,
        onCommitted: { rollups.wake() })
    let (router, routerServices) = try buildRouterAndServices(
        configuration: configuration, database: database, readRouter: readRouter, schema: schema, metrics: registry,
        cache: cache, intake: intake, logger: logger)
    // The append engine after the database clients, so a graceful shutdown (in reverse order: the HTTP
    // server first) finishes its groups in flight before the clients close.
    var services = clientServices + [intake.store as any Service] + routerServices
    services.append(DatabaseWatch(database: database))
    services.append(StoreInboxGauges(inbox: intake.inbox, logger: logger))
    services.append(rollups)
    services.append(RevenueDayWorker(database: database))
    services.append(ConvertedRevenueWorker(database: database, currencies: configuration.reportingCurrencies))
    services.append(ConvertedLTVWorker(database: database))
    if let cache {
        services.append(ProjectionChanges(database: database, cache: cache, onPosition: { readRouter.observedPrimary($0) }))
    }
    services.append(ReadRouterMonitor(router: readRouter, onFloor: { cache?.forgetChanges(upTo: $0) }))
    services.append(
        WebhookDeliveryService(store: WebhookStore(database: database), configuration: configuration.webhooks, logger: logger))
    return Application(
        router: router,
        // A client that sends nothing for 30 s (a slow-loris, a dead peer) is disconnected.
        server: .http1(configuration: .init(additionalChannelHandlers: [ClientDisconnectHandler()], idleTimeout: .seconds(30))),
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "subledger"),
        services: services,
        logger: logger
    )
}

/// The router alone, for tests that drive it without a socket. A `cache` serves reads only while a
/// `ProjectionChanges` service runs for it (buildApplication adds one).
func buildRouter(
    configuration: ServerConfiguration,
    database: Database,
    readRouter: ReadRouter,
    schema: Schema,
    metrics registry: PrometheusCollectorRegistry? = nil,
    cache: LedgerCache? = nil,
    intake: EventIntake? = nil,
    logger: Logger
) throws -> Router<LedgerRequestContext> {
    try buildRouterAndServices(
        configuration: configuration, database: database, readRouter: readRouter, schema: schema, metrics: registry,
        cache: cache, intake: intake, logger: logger
    ).router
}

/// The router and the background services of its stores (StoreModule).
func buildRouterAndServices(
    configuration: ServerConfiguration,
    database: Database,
    readRouter: ReadRouter,
    schema: Schema,
    metrics registry: PrometheusCollectorRegistry? = nil,
    cache: LedgerCache? = nil,
    intake: EventIntake? = nil,
    logger: Logger
) throws -> (router: Router<LedgerRequestContext>, services: [any Service]) {
    let router = Router(context: LedgerRequestContext.self)
    // Metrics outside the error mapping, so that every response is counted under the status it was sent
    // with (a 403 thrown as an APIError is a 403, not the 500 Hummingbird assumes for unknown errors).
    if registry != nil { router.add(middleware: MetricsMiddleware()) }
    router.add(middleware: ErrorMiddleware())

    let intake = intake ?? makeIntake(database: database, readRouter: readRouter, cache: cache, clock: configuration.clock)
    let stores = try storeModules(
        StoreContext(configuration: configuration, database: database, readRouter: readRouter, cache: cache, intake: intake, logger: logger))
    OperationsRoutes(
        migrations: MigrationRunner(database: database, schema: schema), registry: registry, cache: cache,
        readRouter: readRouter, stores: stores
    ).register(on: router)
    DashboardRoutes(assets: try DashboardAssets.load()).register(on: router)

    let v1 = router.group("v1").add(
        middleware: AuthMiddleware(keys: APIKeyStore(database: database), cache: APIKeyCache(ttl: configuration.keyCacheTTL)))
    let store = intake.store
    let catalog = intake.catalog
    EventRoutes(intake: intake, router: readRouter, maxBodyBytes: configuration.maxBodyBytes).register(on: v1)
    SubscriberRoutes(reader: ProjectionReader(router: readRouter, cache: cache), clock: configuration.clock).register(on: v1)
    RevenueCatCompatRoutes(store: store, router: readRouter, clock: configuration.clock).register(on: v1)
    IdentityRoutes(
        identity: IdentityStore(intake: intake, database: database, defaultPolicy: configuration.transferPolicy),
        maxBodyBytes: configuration.maxBodyBytes
    ).register(on: v1)
    CatalogRoutes(catalog: catalog, maxBodyBytes: configuration.maxBodyBytes).register(on: v1)
    AuditRoutes(
        store: store, router: readRouter,
        checkpoints: CheckpointStore(database: database), verifier: ChainVerifier(database: database)
    ).register(on: v1)
    ReportRoutes(router: readRouter, clock: configuration.clock).register(on: v1)
    FXRoutes(database: database, router: readRouter, maxBodyBytes: configuration.maxBodyBytes).register(on: v1)
    WebhookRoutes(store: WebhookStore(database: database), policy: configuration.webhooks.policy, maxBodyBytes: configuration.maxBodyBytes)
        .register(on: v1)
    StoreInboxRoutes(inbox: intake.inbox).register(on: v1)
    ReconciliationRoutes(records: ReconciliationStore(database: database)).register(on: v1)
    for module in stores { module.register(v1: v1, root: router) }
    var services = stores.flatMap(\.services)
    if let interval = configuration.reconcileInterval {
        let reconciled = stores.compactMap(\.reconciliation)
        if reconciled.isEmpty {
            logger.warning("--reconcile-interval is set, but no store has API credentials: nothing is reconciled")
        } else {
            let reconciler = Reconciler(intake: intake, records: ReconciliationStore(database: database), logger: logger)
            services.append(ReconcileService(reconciler: reconciler, stores: reconciled, interval: interval, logger: logger))
        }
    }
    return (router, services)
}

/// One store, so appends from every route (and background worker) share one group-commit queue; one intake
/// for every source. The cache forgets what an append changed (remembering where, for replicas), and the read
/// router learns a position the primary has committed, and the report rollup worker is woken.
func makeIntake(
    database: Database, readRouter: ReadRouter, cache: LedgerCache?, clock: WallClock, transferPolicy: TransferPolicy = .transfer,
    onCommitted: @escaping @Sendable () -> Void = {}
) -> EventIntake {
    let store = EventStore(
        database: database, clock: clock,
        onCommit: { changes in
            cache?.invalidate(changes)
            if let last = changes.values.max() {
                readRouter.observedPrimary(last)
                onCommitted()
            }
        })
    return EventIntake(store: store, catalog: CatalogStore(database: database), database: database, transferPolicy: transferPolicy)
}

/// Runs `service` (the application) until SIGTERM or SIGINT, saying when a signal starts the graceful shutdown.
public func runUntilSignalled(_ service: some Service, logger: Logger) async throws {
    let group = ServiceGroup(
        configuration: .init(
            services: [service, ShutdownNotice(logger: logger)], gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
    try await group.run()
}

/// The last service of the group, so the first to hear of a graceful shutdown: it logs that one has begun.
struct ShutdownNotice: Service {
    let logger: Logger

    func run() async throws {
        do {
            try await gracefulShutdown()
        } catch {
            return
        }
        logger.info("shutting down: finishing requests in flight, then closing database connections")
    }
}
