import AppStoreServerAPI
import GooglePlayClient
import Hummingbird
import LedgerCore
import LedgerStore
import LedgerWebhooks
import Logging
import PostgresNIO
import Prometheus
import ServiceLifecycle
import StoreAdapters

/// What `subledger serve` is told on its command line.
public struct ServerConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// Request bodies above this are refused with 413 before they are read.
    public var maxBodyBytes: Int
    /// How long a request waits for a database connection before answering 503 `unavailable`.
    public var databaseLeaseTimeout: Duration
    /// Trusted roots for App Store JWS, DER-encoded; empty means Apple Root CA - G3.
    public var appleRootsDER: [[UInt8]]
    /// When set, App Store payloads for another bundle are refused.
    public var appleBundleID: String?
    /// Oldest App Store `signedDate` accepted (default 180 days, the reach of Apple's notification history).
    public var appleMaxAge: Duration
    /// How long a valid API key is trusted without asking the database again: the longest a revoked key
    /// keeps working. Zero asks on every request.
    public var keyCacheTTL: Duration
    /// Bytes (estimated) of subscribers' ledgers kept in memory for entitlement reads; zero reads
    /// PostgreSQL every time. See docs/entitlement-cache.md.
    public var entitlementCacheBytes: Int
    /// How long a read that needs a position waits for a replica to reach it before reading the primary.
    public var replicaWait: Duration
    /// Outbound webhooks: which URLs are allowed, timeouts, retries, leases (docs/webhooks.md).
    public var webhooks: WebhookConfiguration
    /// The App Store Server API client and how often to read the notification history (docs/apple.md);
    /// nil: no periodic backfill.
    public var appleBackfill: (client: AppStoreServerAPIClient, interval: Duration)?
    /// The App Store Server API client and the developer's policy for answering refund consumption
    /// requests; nil: they are recorded, not answered.
    public var appleConsumption: (client: AppStoreServerAPIClient, policy: AppleConsumptionPolicy)?
    /// Apple's sandbox host, for consumption requests about sandbox transactions (nil: `appleConsumption`'s
    /// client answers them, e.g. when a base URL is configured).
    public var appleSandboxClient: AppStoreServerAPIClient?
    /// Stripe webhook endpoint secrets (`whsec_…`), several during a rotation; empty: the Stripe route answers 404.
    public var stripeWebhookSecrets: [String]
    /// Seconds a `Stripe-Signature` timestamp may differ from now (docs/stripe.md).
    public var stripeSignatureTolerance: Int64
    /// A Stripe API key: pending events' customers are looked up for `metadata.subscriber_id`. Nil: webhooks alone.
    public var stripeAPIKey: String?
    /// Stripe's API (`https://api.stripe.com`; tests point it at a local stand-in).
    public var stripeAPIBaseURL: String
    /// How often pending Stripe customers are looked up.
    public var stripeLookupInterval: Duration
    /// The Connect accounts whose Stripe events are applied, and the longest past-due grace (docs/stripe.md).
    public var stripe: StripeSettings
    /// What happens when a store or an app names another subscriber for a purchase (docs/identity.md).
    public var transferPolicy: TransferPolicy = .transfer
    /// Google Play: package names, the service account, Pub/Sub push verification (docs/google.md).
    public var google: GooglePlayConfiguration

    public init(
        host: String = "127.0.0.1", port: Int = 8080, maxBodyBytes: Int = 8 * 1024 * 1024,
        databaseLeaseTimeout: Duration = .seconds(3), appleRootsDER: [[UInt8]] = [], appleBundleID: String? = nil,
        keyCacheTTL: Duration = .seconds(2), entitlementCacheBytes: Int = 256 << 20,
        appleMaxAge: Duration = AppleNotificationReader.defaultMaxAge, replicaWait: Duration = .milliseconds(250),
        webhooks: WebhookConfiguration = WebhookConfiguration(), stripeWebhookSecrets: [String] = [],
        stripeSignatureTolerance: Int64 = StripeSignatureVerifier.defaultTolerance, stripeAPIKey: String? = nil,
        stripeAPIBaseURL: String = StripeAPIClient.defaultBaseURL, stripeLookupInterval: Duration = .seconds(60),
        stripe: StripeSettings = StripeSettings(),
        google: GooglePlayConfiguration = GooglePlayConfiguration()
    ) {
        self.google = google
        self.stripeAPIKey = stripeAPIKey
        self.stripeAPIBaseURL = stripeAPIBaseURL
        self.stripeLookupInterval = stripeLookupInterval
        self.stripe = stripe
        self.stripeWebhookSecrets = stripeWebhookSecrets
        self.stripeSignatureTolerance = stripeSignatureTolerance
        self.replicaWait = replicaWait
        self.webhooks = webhooks
        self.appleMaxAge = appleMaxAge
        self.keyCacheTTL = keyCacheTTL
        self.entitlementCacheBytes = entitlementCacheBytes
        self.appleRootsDER = appleRootsDER
        self.appleBundleID = appleBundleID
        self.host = host
        self.port = port
        self.maxBodyBytes = maxBodyBytes
        self.databaseLeaseTimeout = databaseLeaseTimeout
    }
}

/// The ledger's HTTP application: routes, auth and error mapping over a PostgreSQL client.
///
/// The client is added to the application's services so it starts before the server accepts requests
/// and shuts down gracefully after it (SIGTERM/SIGINT). `replicas` (named, for logs and metrics) serve
/// reads that their position allows (`ReadRouter`); they are run as services too.
public func buildApplication(
    configuration: ServerConfiguration,
    client: PostgresClient,
    replicas: [(name: String, client: PostgresClient)] = [],
    migrations: [Migration],
    metrics registry: PrometheusCollectorRegistry? = nil,
    logger: Logger
) throws -> some ApplicationProtocol {
    try buildApplication(
        configuration: configuration, primary: Database(client: client, logger: logger, leaseTimeout: configuration.databaseLeaseTimeout),
        services: [client as any Service] + replicas.map { $0.client as any Service }, replicas: replicas, migrations: migrations, metrics: registry,
        logger: logger)
}

/// The application over a primary `Database` whose client the caller provides as one of `services` (a
/// failover-aware primary, `PrimaryClient`, is one).
public func buildApplication(
    configuration: ServerConfiguration,
    primary database: Database,
    services clientServices: [any Service],
    replicas: [(name: String, client: PostgresClient)] = [],
    migrations: [Migration],
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
    let intake = makeIntake(database: database, readRouter: readRouter, cache: cache, transferPolicy: configuration.transferPolicy)
    let (router, routerServices) = try buildRouterAndServices(
        configuration: configuration, database: database, readRouter: readRouter, migrations: migrations, metrics: registry,
        cache: cache, intake: intake, logger: logger)
    var services = clientServices + routerServices
    if let key = configuration.stripeAPIKey {
        services.append(
            StripeCustomerLookup(
                client: StripeAPIClient(apiKey: key, baseURL: configuration.stripeAPIBaseURL), intake: intake,
                interval: configuration.stripeLookupInterval, options: configuration.stripe.mapping, logger: logger))
    }
    services.append(DatabaseWatch(database: database))
    services.append(StoreInboxGauges(inbox: intake.inbox, logger: logger))
    services.append(RevenueDayWorker(database: database))
    if let cache {
        services.append(ProjectionChanges(database: database, cache: cache, onPosition: { readRouter.observedPrimary($0) }))
    }
    services.append(ReadRouterMonitor(router: readRouter, onFloor: { cache?.forgetChanges(upTo: $0) }))
    services.append(
        WebhookDeliveryService(store: WebhookStore(database: database), configuration: configuration.webhooks, logger: logger))
    if let apple = configuration.appleBackfill {
        let backfill = AppleBackfill(client: apple.client, reader: try appleReader(configuration), intake: intake, logger: logger)
        services.append(
            AppleBackfillService(backfill: backfill, marks: StoreSyncMarks(database: database), interval: apple.interval, logger: logger))
    }
    if let apple = configuration.appleConsumption {
        services.append(
            AppleConsumptionResponder(
                client: apple.client, sandboxClient: configuration.appleSandboxClient, policy: apple.policy, database: database,
                logger: logger))
    }
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
    migrations: [Migration],
    metrics registry: PrometheusCollectorRegistry? = nil,
    cache: LedgerCache? = nil,
    intake: EventIntake? = nil,
    logger: Logger
) throws -> Router<LedgerRequestContext> {
    try buildRouterAndServices(
        configuration: configuration, database: database, readRouter: readRouter, migrations: migrations, metrics: registry,
        cache: cache, intake: intake, logger: logger
    ).router
}

/// The router and the background services its routes need (Google Play's inbox resolver).
func buildRouterAndServices(
    configuration: ServerConfiguration,
    database: Database,
    readRouter: ReadRouter,
    migrations: [Migration],
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

    let stripeVersions = StripeVersionWatch()
    OperationsRoutes(
        migrations: MigrationRunner(database: database, migrations: migrations), registry: registry, cache: cache,
        readRouter: readRouter, stripeVersions: stripeVersions
    ).register(on: router)
    DashboardRoutes(assets: try DashboardAssets.load()).register(on: router)

    let v1 = router.group("v1").add(
        middleware: AuthMiddleware(keys: APIKeyStore(database: database), cache: APIKeyCache(ttl: configuration.keyCacheTTL)))
    let intake = intake ?? makeIntake(database: database, readRouter: readRouter, cache: cache)
    let store = intake.store
    let catalog = intake.catalog
    EventRoutes(intake: intake, router: readRouter, maxBodyBytes: configuration.maxBodyBytes).register(on: v1)
    SubscriberRoutes(reader: ProjectionReader(router: readRouter, cache: cache)).register(on: v1)
    RevenueCatCompatRoutes(store: store, router: readRouter).register(on: v1)
    IdentityRoutes(
        identity: IdentityStore(intake: intake, database: database, defaultPolicy: configuration.transferPolicy),
        maxBodyBytes: configuration.maxBodyBytes
    ).register(on: v1)
    CatalogRoutes(catalog: catalog, maxBodyBytes: configuration.maxBodyBytes).register(on: v1)
    AuditRoutes(
        store: store, router: readRouter,
        checkpoints: CheckpointStore(database: database), verifier: ChainVerifier(database: database)
    ).register(on: v1)
    ReportRoutes(router: readRouter).register(on: v1)
    WebhookRoutes(store: WebhookStore(database: database), policy: configuration.webhooks.policy, maxBodyBytes: configuration.maxBodyBytes)
        .register(on: v1)
    AppleStoreRoutes(
        reader: try appleReader(configuration),
        intake: intake, router: readRouter, maxBodyBytes: configuration.maxBodyBytes
    ).register(on: v1)
    StoreInboxRoutes(inbox: intake.inbox).register(on: v1)
    // Outside the v1 group: Stripe authenticates with its signature, not an API key.
    StripeStoreRoutes(
        verifier: StripeSignatureVerifier(secrets: configuration.stripeWebhookSecrets, tolerance: configuration.stripeSignatureTolerance),
        intake: intake, router: readRouter, maxBodyBytes: configuration.maxBodyBytes, settings: configuration.stripe, versions: stripeVersions,
        // Asked while Stripe waits for the answer: one attempt, a short timeout.
        prices: configuration.stripeAPIKey.map {
            StripeAPIClient(apiKey: $0, baseURL: configuration.stripeAPIBaseURL, timeout: .seconds(5), attempts: 1)
        }
    ).register(on: router)
    var services: [any Service] = []
    let google = configuration.google
    let play =
        google.acceptsPushes || google.serviceAccount != nil
        ? GooglePlay(configuration: google, intake: intake, logger: logger) : nil
    if let play, google.serviceAccount != nil {
        services.append(GoogleResolverService(play: play, inbox: intake.inbox))
        if let interval = google.reconcileInterval { services.append(GoogleReconcileService(play: play, interval: interval)) }
    }
    let googleRoutes = GoogleStoreRoutes(
        play: play, reader: ProjectionReader(router: readRouter, cache: cache), router: readRouter, maxBodyBytes: configuration.maxBodyBytes)
    // The RTDN push authenticates with Google's OIDC token (outside the v1 group); the purchases route takes a key.
    googleRoutes.register(on: v1)
    googleRoutes.registerPush(on: router)
    return (router, services)
}

/// The App Store payload reader: Apple's root (or the configured test roots), the bundle, the age limit.
func appleReader(_ configuration: ServerConfiguration) throws -> AppleNotificationReader {
    let roots = configuration.appleRootsDER.isEmpty ? [try AppleJWSVerifier.appleRootG3DER()] : configuration.appleRootsDER
    return AppleNotificationReader(
        verifier: try AppleJWSVerifier(rootsDER: roots), bundleID: configuration.appleBundleID, maxAge: configuration.appleMaxAge)
}

/// One store, so appends from every route (and background worker) share one group-commit queue; one intake
/// for every source. The cache forgets what an append changed (remembering where, for replicas), and the read
/// router learns a position the primary has committed.
func makeIntake(database: Database, readRouter: ReadRouter, cache: LedgerCache?, transferPolicy: TransferPolicy = .transfer) -> EventIntake {
    let store = EventStore(
        database: database,
        onCommit: { changes in
            cache?.invalidate(changes)
            if let last = changes.values.max() { readRouter.observedPrimary(last) }
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
