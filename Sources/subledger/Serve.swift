import AppleStore
import ArgumentParser
import AsyncHTTPClient
import Foundation
import GoogleStore
import Hummingbird
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerWebhooks
import Logging
import Metrics
import PostgresNIO
import Prometheus
import ServiceLifecycle
import StoreAdapters
import StripeStore

extension TransferPolicy: ExpressibleByArgument {}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the HTTP API.")

    @OptionGroup var database: DatabaseOptions

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on.")
    var port = 8080

    @Option(
        name: .customLong("db-role"),
        help: "PostgreSQL role the service acts as (SET ROLE at connection start); empty to use the login role as is.")
    var dbRole = "subledger_app"

    @Option(name: .customLong("max-body-bytes"), help: "Largest request body accepted (413 beyond).")
    var maxBodyBytes = 8 * 1024 * 1024

    @Option(name: .customLong("db-connections"), help: "Maximum PostgreSQL connections in the pool.")
    var dbConnections = 20

    @Option(
        name: .customLong("db-timeout"),
        help: "Seconds a request waits for a database connection before answering 503 unavailable.")
    var dbTimeout = 3.0

    @Option(
        name: .customLong("key-cache-seconds"),
        help: "Seconds a valid API key is trusted without asking the database again (the longest a revoked key keeps working); 0 asks every time.")
    var keyCacheSeconds = 2.0

    @Option(
        name: .customLong("entitlement-cache-mib"),
        help:
            "MiB of subscribers' ledgers kept in memory for entitlement and window reads, invalidated by appends and LISTEN/NOTIFY (docs/entitlement-cache.md); 0 reads PostgreSQL every time."
    )
    var entitlementCacheMiB = 256

    @Option(
        name: .customLong("statement-timeout"),
        help:
            "Longest a request's database statement may run before it is cancelled (503), e.g. 5s, 500ms, 2m; 0 for none (default: $SUBLEDGER_STATEMENT_TIMEOUT or 10s)."
    )
    var statementTimeout: DurationArgument?

    @Option(
        name: .customLong("read-database-url"),
        help:
            "A read replica (a streaming standby of the primary); repeatable. Entitlement, window, event, feed, export and report reads go to one that has the position they need (docs/scaling.md)."
    )
    var readDatabaseURLs: [String] = []

    @Option(
        name: .customLong("replica-wait"),
        help: "How long a read with min_position waits for a replica to reach it before reading the primary, e.g. 250ms.")
    var replicaWait = DurationArgument(argument: "250ms")!

    @Option(
        name: .customLong("transfer-policy"),
        help: ArgumentHelp(
            "When a store or an app names another subscriber for a purchase: transfer, transfer_if_no_active or keep (docs/identity.md; default: $SUBLEDGER_TRANSFER_POLICY or transfer).",
            valueName: "policy"))
    var transferPolicy: TransferPolicy?

    @Option(
        name: .customLong("reporting-currencies"),
        help: ArgumentHelp(
            "The reporting currencies whose revenue cells are kept, comma-separated ISO 4217 codes, or none (docs/reports.md; default: $SUBLEDGER_REPORTING_CURRENCIES, else those the database keeps: EUR,USD from the start).",
            valueName: "codes"))
    var reportingCurrencies: String?

    @OptionGroup(title: "App Store") var apple: AppleServeOptions
    @OptionGroup(title: "Google Play") var google: GoogleOptions
    @OptionGroup(title: "Stripe") var stripe: StripeOptions
    @OptionGroup(title: "Outbound webhooks") var webhooks: WebhookOptions
    @OptionGroup(title: "Reconciliation") var reconcile: ReconcileServeOptions

    func validate() throws {
        _ = try reportingCurrencyList()
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0–65535") }
        _ = try timeout()
        try replicaWait.check(.zero...(.days(1)), option: "replica-wait", expected: "a duration such as 250ms or 2s")
        _ = try reconcile.interval(googleConfigured: try google.configuration().serviceAccount != nil)
        for text in readDatabaseURLs {
            do { _ = try DatabaseURL(text) } catch { throw ValidationError("--read-database-url: \(error)") }
        }
    }

    func run() async throws {
        let logger = database.makeLogger("subledger")
        try await checkAddressFree()
        let schema = try Schema.bundled()
        let databases = try await connect(schema: schema, logger: logger)
        let (google, stripe, webhooks) = (try google.configuration(), try stripe.configuration(), try webhooks.configuration())
        let reconcileInterval = try reconcile.interval(googleConfigured: google.serviceAccount != nil)
        let (apple, appleHTTP) = try apple.configuration(logger: logger, reconcile: reconcileInterval != nil)
        var configuration = ServerConfiguration(
            host: host, port: port, maxBodyBytes: maxBodyBytes, databaseLeaseTimeout: databases.leaseTimeout,
            keyCacheTTL: .milliseconds(Int64(max(0, keyCacheSeconds) * 1000)), entitlementCacheBytes: max(0, entitlementCacheMiB) << 20,
            replicaWait: replicaWait.duration, apple: apple, google: google, stripe: stripe, webhooks: webhooks)
        configuration.transferPolicy =
            try EnvironmentFallback().value(transferPolicy, "SUBLEDGER_TRANSFER_POLICY", option: "transfer-policy") ?? .transfer
        configuration.reconcileInterval = reconcileInterval
        configuration.reportingCurrencies = try reportingCurrencyList()
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        do {
            let app = try buildApplication(
                configuration: configuration, primary: databases.primary, services: databases.services, replicas: databases.replicas,
                schema: schema, metrics: registry, logger: logger)
            var starting: Logger.Metadata = [
                "http.address": "\(host):\(port)", "db.url": "\(databases.url)", "db.role": "\(dbRole)",
                "db.replicas": "\(databases.replicas.map(\.name).joined(separator: ","))",
            ]
            for (store, summary) in configuration.storesSummary { starting["store.\(store)"] = "\(summary)" }
            logger.info("starting", metadata: starting)
            try await runUntilSignalled(app, logger: logger)
        } catch let error as IOError where error.errnoCode == EADDRINUSE {
            try? await appleHTTP?.shutdown()
            throw addressInUse()
        } catch {
            try? await appleHTTP?.shutdown()
            throw error
        }
        try? await appleHTTP?.shutdown()
        logger.info("stopped")
    }

    /// `--statement-timeout`, else `SUBLEDGER_STATEMENT_TIMEOUT`, else 10s; 0 for none.
    private func timeout() throws -> Duration {
        let given = try EnvironmentFallback().value(statementTimeout, "SUBLEDGER_STATEMENT_TIMEOUT", option: "statement-timeout")
        guard let given else { return .seconds(10) }
        try given.check(.zero...(.days(1)), option: "statement-timeout", expected: "a duration such as 5s, 500ms or 2m (0 for none)")
        return given.duration
    }

    /// The primary (one host: one client; several: the writable one, followed through failovers) and the
    /// replicas, as services for the application to run, once the schema is checked.
    private func connect(schema: Schema, logger: Logger) async throws -> (
        url: DatabaseURL, primary: Database, services: [any Service], replicas: [(name: String, client: PostgresClient)],
        leaseTimeout: Duration
    ) {
        let url = try database.allHosts()
        let (role, connections, timeout) = (dbRole, dbConnections, try timeout())
        let configure: @Sendable (DatabaseURL) -> PostgresClient.Configuration = {
            $0.clientConfiguration(role: role, maximumConnections: connections, statementTimeout: timeout)
        }
        // With several hosts, the schema is checked on the writable one (if any answers now).
        let checked: DatabaseURL? = url.isMultiHost ? (try? await database.url()) : url
        if let checked { try await checkSchema(configure(checked), schema: schema, logger: logger) }
        let replicas = try readDatabaseURLs.map { text in
            (
                name: try DatabaseURL(text).description,
                client: PostgresClient(configuration: configure(try DatabaseURL(text)), backgroundLogger: logger.forConnectionPool)
            )
        }
        let leaseTimeout = Duration.milliseconds(Int64(dbTimeout * 1000))
        let primary: Database
        let primaryService: any Service
        if url.isMultiHost {
            let client = PrimaryClient(url: url, logger: logger, configure: configure)
            (primary, primaryService) = (Database(provider: client, logger: logger, leaseTimeout: leaseTimeout), client)
        } else {
            let client = PostgresClient(configuration: configure(url), backgroundLogger: logger.forConnectionPool)
            (primary, primaryService) = (Database(client: client, logger: logger, leaseTimeout: leaseTimeout), client)
        }
        return (url, primary, [primaryService] + replicas.map { $0.client as any Service }, replicas, leaseTimeout)
    }

    /// Fails at once, before the database is touched, when another process already listens on the address.
    private func checkAddressFree() async throws {
        let channel: any Channel
        do {
            channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
                .bind(host: host, port: port).get()
        } catch let error as IOError where error.errnoCode == EADDRINUSE {
            throw addressInUse()
        } catch {
            // Anything else (a host name that does not resolve, a privileged port) the server reports itself.
            return
        }
        try await channel.close()
    }

    private func addressInUse() -> CommandFailure {
        CommandFailure("\(host):\(port) is already in use (another subledger serve?): stop it, or choose another port with --port")
    }

    /// Refuses to start on an edited or missing migration; a database that is down only delays readiness.
    private func checkSchema(_ configuration: PostgresClient.Configuration, schema: Schema, logger: Logger) async throws {
        let status: MigrationStatus?
        do {
            status = try await withPostgresClient(configuration, logger: logger) { client in
                try await withTimeout(seconds: 10) {
                    try await MigrationRunner(client: client, schema: schema, logger: logger).status()
                }
            }
        } catch {
            logger.warning(
                "could not check the schema at start-up; /ready stays 503 until the database answers",
                metadata: ["error.detail": "\(StoreError.classify(error))"])
            status = nil
        }
        guard let status else { return }
        if let refusal = status.refusal { throw CommandFailure("refusing to start: \(refusal)") }
    }
}

struct TimeoutError: Error, CustomStringConvertible {
    var description: String { "timed out" }
}

func withTimeout<T: Sendable>(seconds: Int, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            throw TimeoutError()
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

extension Serve {
    /// `--reporting-currencies` or `$SUBLEDGER_REPORTING_CURRENCIES`: nil when neither is set, `[]` for `none`.
    func reportingCurrencyList() throws -> [String]? {
        guard let text = EnvironmentFallback().string(reportingCurrencies, "SUBLEDGER_REPORTING_CURRENCIES") else { return nil }
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty || trimmed.lowercased() == "none" { return [] }
        let codes = trimmed.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard codes.count <= 16 else { throw ValidationError("--reporting-currencies: at most 16 currencies") }
        for code in codes where !Identifiers.isValidCurrency(code) {
            throw ValidationError("--reporting-currencies: '\(code.prefix(40))' is not an ISO 4217 code such as EUR")
        }
        return codes
    }
}
