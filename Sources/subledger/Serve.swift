import AppStoreServerAPI
import ArgumentParser
import AsyncHTTPClient
import Foundation
import GooglePlayClient
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
        name: .customLong("apple-root-cert"),
        help:
            "A trusted root certificate (DER or PEM) for App Store JWS; repeatable (default: $SUBLEDGER_APPLE_ROOT_CERTS, comma-separated, else Apple Root CA - G3)."
    )
    var appleRootCerts: [String] = []

    @Option(name: .customLong("apple-bundle-id"), help: "Refuse App Store payloads for other bundles (default: $SUBLEDGER_APPLE_BUNDLE_ID).")
    var appleBundleID: String?

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
    var statementTimeout: String?

    @Option(
        name: .customLong("read-database-url"),
        help:
            "A read replica (a streaming standby of the primary); repeatable. Entitlement, window, event, feed, export and report reads go to one that has the position they need (docs/scaling.md)."
    )
    var readDatabaseURLs: [String] = []

    @Option(
        name: .customLong("replica-wait"),
        help: "How long a read with min_position waits for a replica to reach it before reading the primary, e.g. 250ms.")
    var replicaWait = "250ms"

    @Option(
        name: .customLong("apple-max-age-days"),
        help: "Refuse App Store payloads signed longer ago than this (default: $SUBLEDGER_APPLE_MAX_AGE_DAYS or 180).")
    var appleMaxAgeDays: Int?

    @OptionGroup var appleAPI: AppleAPIKeyOptions

    @Option(
        name: .customLong("apple-backfill-interval"),
        help:
            "Read Apple's notification history this often (e.g. 1h) to recover missed notifications; needs the App Store Server API key (default: $SUBLEDGER_APPLE_BACKFILL_INTERVAL, else off)."
    )
    var appleBackfillInterval: String?

    @Option(
        name: .customLong("apple-consumption-policy"),
        help:
            "Answer Apple's refund consumption requests with this policy file (JSON, docs/apple.md); needs the App Store Server API key (default: $SUBLEDGER_APPLE_CONSUMPTION_POLICY, else off)."
    )
    var appleConsumptionPolicy: String?

    @Flag(
        name: .customLong("webhooks-allow-http"),
        help: "Accept http:// webhook URLs as well as https:// (also SUBLEDGER_WEBHOOKS_ALLOW_HTTP=1).")
    var webhooksAllowHTTP = false

    @Flag(
        name: .customLong("webhooks-allow-private"),
        help: "Deliver webhooks to loopback, private and link-local addresses (also SUBLEDGER_WEBHOOKS_ALLOW_PRIVATE=1).")
    var webhooksAllowPrivate = false

    @Option(name: .customLong("webhook-concurrency"), help: "Webhook requests in flight at once, across all endpoints.")
    var webhookConcurrency = 16

    @Option(
        name: .customLong("webhook-timeout"),
        help: "Longest a webhook delivery waits for the response, e.g. 10s (connecting: at most 5s of it).")
    var webhookTimeout = "10s"

    @Option(
        name: .customLong("webhook-retry-schedule"),
        help: "Delays between failed attempts, the last repeating, e.g. 1s,2s,5s,10s,20s,1m,5m,30m,2h,5h,10h (the default).")
    var webhookRetrySchedule = WebhookRetrySchedule.standardText

    @Option(
        name: .customLong("webhook-give-up-after"),
        help: "How long an endpoint may keep failing before it is paused (failing), e.g. 3d (the default).")
    var webhookGiveUpAfter = "3d"

    @Option(
        name: .customLong("webhook-lease-seconds"),
        help: "Seconds a webhook endpoint's lease lasts without renewal: how soon another instance takes over a dead one's endpoints.")
    var webhookLeaseSeconds = 15

    @Option(
        name: .customLong("stripe-webhook-secret"),
        help:
            "A Stripe webhook endpoint secret (whsec_…); repeatable, for rotation (default: $SUBLEDGER_STRIPE_WEBHOOK_SECRETS, comma-separated). Without one, POST /v1/stores/stripe/webhooks answers 404 not_configured."
    )
    var stripeWebhookSecrets: [String] = []

    @Option(
        name: .customLong("stripe-signature-tolerance"),
        help: "Seconds a Stripe-Signature timestamp may differ from now (default: $SUBLEDGER_STRIPE_SIGNATURE_TOLERANCE or 300).")
    var stripeSignatureTolerance: Int?

    @Option(
        name: .customLong("stripe-api-key"),
        help:
            "A Stripe API key (sk_… or a restricted rk_… with read access to customers): pending events' customers are looked up for metadata.subscriber_id (default: $SUBLEDGER_STRIPE_API_KEY; none: webhooks alone)."
    )
    var stripeAPIKey: String?

    @Option(name: .customLong("stripe-api-base-url"), help: "Stripe's API (default: $SUBLEDGER_STRIPE_API_BASE_URL or https://api.stripe.com).")
    var stripeAPIBaseURL: String?

    @Option(
        name: .customLong("stripe-account"),
        help:
            "A Stripe Connect account (acct_…) whose events are applied; repeatable (default: $SUBLEDGER_STRIPE_ACCOUNTS, comma-separated; none: events that carry an account are ignored)."
    )
    var stripeAccounts: [String] = []

    @Option(
        name: .customLong("stripe-grace-max"),
        help: "The longest a past-due Stripe subscription keeps access while Stripe retries, e.g. 30d (default: $SUBLEDGER_STRIPE_GRACE_MAX or 30d).")
    var stripeGraceMax: String?

    @Option(
        name: .customLong("transfer-policy"),
        help: ArgumentHelp(
            "When a store or an app names another subscriber for a purchase: transfer (default), transfer_if_no_active or keep (docs/identity.md; SUBLEDGER_TRANSFER_POLICY).",
            valueName: "policy"))
    var transferPolicy: String?

    @OptionGroup var google: GoogleOptions

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0–65535") }
        _ = try appleRoots()
    }

    func run() async throws {
        let logger = database.makeLogger("subledger")
        let url = try database.allHosts()
        try await checkAddressFree()
        let migrations = try Migration.bundled()
        let timeoutText = statementTimeout ?? ProcessInfo.processInfo.environment["SUBLEDGER_STATEMENT_TIMEOUT"] ?? "10s"
        guard let timeout = Self.duration(timeoutText) else {
            throw ValidationError("--statement-timeout must be a duration such as 5s, 500ms or 2m (0 for none), not '\(timeoutText)'")
        }
        let (role, connections) = (dbRole, dbConnections)
        let configure: @Sendable (DatabaseURL) -> PostgresClient.Configuration = {
            $0.clientConfiguration(role: role, maximumConnections: connections, statementTimeout: timeout)
        }
        // With several hosts, the schema is checked on the writable one (if any answers now).
        let checked: DatabaseURL? = url.isMultiHost ? (try? await database.url()) : url
        if let checked { try await checkSchema(configure(checked), migrations: migrations, logger: logger) }

        let maxAgeDays = appleMaxAgeDays ?? ProcessInfo.processInfo.environment["SUBLEDGER_APPLE_MAX_AGE_DAYS"].flatMap { Int($0) } ?? 180
        guard (1...36_500).contains(maxAgeDays) else { throw ValidationError("--apple-max-age-days must be 1 to 36500") }
        guard let replicaWait = Self.duration(replicaWait) else {
            throw ValidationError("--replica-wait must be a duration such as 250ms or 2s, not '\(self.replicaWait)'")
        }
        let replicas = try readDatabaseURLs.map { text in
            let replica: DatabaseURL
            do { replica = try DatabaseURL(text) } catch { throw ValidationError("--read-database-url: \(error)") }
            return (
                name: replica.description,
                client: PostgresClient(configuration: configure(replica), backgroundLogger: logger.forConnectionPool)
            )
        }
        let webhooks = try webhookConfiguration()
        let env = ProcessInfo.processInfo.environment
        let stripeSecrets =
            stripeWebhookSecrets.isEmpty
            ? (env["SUBLEDGER_STRIPE_WEBHOOK_SECRETS"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                .filter { !$0.isEmpty }
            : stripeWebhookSecrets
        let stripeTolerance =
            stripeSignatureTolerance ?? env["SUBLEDGER_STRIPE_SIGNATURE_TOLERANCE"].flatMap { Int($0) }
            ?? Int(StripeSignatureVerifier.defaultTolerance)
        guard (1...86_400).contains(stripeTolerance) else { throw ValidationError("--stripe-signature-tolerance must be 1 to 86400 seconds") }
        let stripeKey = (stripeAPIKey ?? env["SUBLEDGER_STRIPE_API_KEY"]).flatMap { $0.isEmpty ? nil : $0 }
        let stripeBase = stripeAPIBaseURL ?? env["SUBLEDGER_STRIPE_API_BASE_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? StripeAPIClient.defaultBaseURL
        guard stripeBase.hasPrefix("https://") || stripeBase.hasPrefix("http://") else {
            throw ValidationError("--stripe-api-base-url must be an http:// or https:// URL, not '\(stripeBase)'")
        }
        let stripeAccountList =
            stripeAccounts.isEmpty
            ? (env["SUBLEDGER_STRIPE_ACCOUNTS"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            : stripeAccounts
        var stripeGrace = StripeMappingOptions.defaultGraceMaxSeconds
        if let text = stripeGraceMax ?? env["SUBLEDGER_STRIPE_GRACE_MAX"], !text.isEmpty {
            guard let seconds = Self.longSeconds(text), (3600...366 * 86_400).contains(seconds) else {
                throw ValidationError("--stripe-grace-max must be a duration from 1h to 366d, such as 30d, not '\(text)'")
            }
            stripeGrace = seconds
        }
        let leaseTimeout = Duration.milliseconds(Int64(dbTimeout * 1000))
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        // One host: one client. Several: the writable one, followed through failovers (PrimaryClient).
        let primary: Database
        let primaryService: any Service
        if url.isMultiHost {
            let client = PrimaryClient(url: url, logger: logger, configure: configure)
            (primary, primaryService) = (Database(provider: client, logger: logger, leaseTimeout: leaseTimeout), client)
        } else {
            let client = PostgresClient(configuration: configure(url), backgroundLogger: logger.forConnectionPool)
            (primary, primaryService) = (Database(client: client, logger: logger, leaseTimeout: leaseTimeout), client)
        }
        let bundleID = appleBundleID ?? ProcessInfo.processInfo.environment["SUBLEDGER_APPLE_BUNDLE_ID"].flatMap { $0.isEmpty ? nil : $0 }
        var configuration = ServerConfiguration(
            host: host, port: port, maxBodyBytes: maxBodyBytes,
            databaseLeaseTimeout: leaseTimeout, appleRootsDER: try appleRoots(), appleBundleID: bundleID,
            keyCacheTTL: .milliseconds(Int64(max(0, keyCacheSeconds) * 1000)),
            entitlementCacheBytes: max(0, entitlementCacheMiB) << 20, appleMaxAge: .seconds(Int64(maxAgeDays) * 86_400),
            replicaWait: replicaWait, webhooks: webhooks, stripeWebhookSecrets: stripeSecrets,
            stripeSignatureTolerance: Int64(stripeTolerance), stripeAPIKey: stripeKey, stripeAPIBaseURL: stripeBase,
            stripe: StripeSettings(accounts: stripeAccountList, mapping: StripeMappingOptions(graceMaxSeconds: stripeGrace)),
            google: try google.configuration())
        if let text = transferPolicy ?? env["SUBLEDGER_TRANSFER_POLICY"], !text.isEmpty {
            guard let policy = TransferPolicy(rawValue: text) else {
                throw ValidationError("--transfer-policy must be transfer, transfer_if_no_active or keep, not '\(text)'")
            }
            configuration.transferPolicy = policy
        }
        // The App Store Server API, for the periodic backfill and the consumption answers: its HTTP client
        // lives as long as the server.
        var backfillInterval: Duration?
        if let text = appleBackfillInterval ?? env["SUBLEDGER_APPLE_BACKFILL_INTERVAL"], !text.isEmpty {
            guard let interval = Self.duration(text), interval >= .seconds(60) else {
                throw ValidationError("--apple-backfill-interval must be a duration of at least 60s, such as 1h or 15m, not '\(text)'")
            }
            backfillInterval = interval
        }
        var consumptionPolicy: AppleConsumptionPolicy?
        if let path = appleConsumptionPolicy ?? env["SUBLEDGER_APPLE_CONSUMPTION_POLICY"], !path.isEmpty {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ValidationError("--apple-consumption-policy \(path): cannot read the file")
            }
            do {
                consumptionPolicy = try AppleConsumptionPolicy(json: String(decoding: data, as: UTF8.self))
            } catch {
                throw ValidationError("--apple-consumption-policy \(path): \(error)")
            }
        }
        var appleHTTP: HTTPClient?
        if backfillInterval != nil || consumptionPolicy != nil {
            let credentials = try appleAPI.credentials(bundleID: bundleID)
            let http = HTTPClient(eventLoopGroupProvider: .singleton)
            appleHTTP = http
            let client = AppStoreServerAPIClient(http: http, credentials: credentials, baseURL: appleAPI.url(sandbox: false), logger: logger)
            if let backfillInterval { configuration.appleBackfill = (client, backfillInterval) }
            if let consumptionPolicy { configuration.appleConsumption = (client, consumptionPolicy) }
            // Apple's two hosts, unless a base URL says where to go for both.
            if !appleAPI.hasBaseURL {
                configuration.appleSandboxClient = AppStoreServerAPIClient(
                    http: http, credentials: credentials, baseURL: appleAPI.url(sandbox: true), logger: logger)
            }
        }
        let app = try buildApplication(
            configuration: configuration,
            primary: primary, services: [primaryService] + replicas.map { $0.client as any Service }, replicas: replicas, migrations: migrations,
            metrics: registry, logger: logger)
        var starting: Logger.Metadata = [
            "http.address": "\(host):\(port)", "db.url": "\(url)", "db.role": "\(dbRole)",
            "db.replicas": "\(replicas.map(\.name).joined(separator: ","))",
        ]
        for (store, summary) in configuration.storesSummary { starting["store.\(store)"] = "\(summary)" }
        logger.info("starting", metadata: starting)
        do {
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

    /// The webhook options, checked.
    private func webhookConfiguration() throws -> WebhookConfiguration {
        let env = ProcessInfo.processInfo.environment
        let policy = WebhookDestinationPolicy(
            allowHTTP: webhooksAllowHTTP || env["SUBLEDGER_WEBHOOKS_ALLOW_HTTP"] == "1",
            allowPrivate: webhooksAllowPrivate || env["SUBLEDGER_WEBHOOKS_ALLOW_PRIVATE"] == "1")
        guard (1...1000).contains(webhookConcurrency) else { throw ValidationError("--webhook-concurrency must be 1 to 1000") }
        guard let timeout = WebhookRetrySchedule.duration(webhookTimeout), timeout >= .milliseconds(100), timeout <= .seconds(60) else {
            throw ValidationError("--webhook-timeout must be a duration from 100ms to 60s, such as 10s")
        }
        guard let delays = WebhookRetrySchedule.durations(webhookRetrySchedule) else {
            throw ValidationError("--webhook-retry-schedule must be durations separated by commas, such as 5s,5m,30m")
        }
        guard let giveUp = WebhookRetrySchedule.duration(webhookGiveUpAfter), giveUp > .zero else {
            throw ValidationError("--webhook-give-up-after must be a duration such as 3d or 72h")
        }
        guard (3...3600).contains(webhookLeaseSeconds) else { throw ValidationError("--webhook-lease-seconds must be 3 to 3600") }
        let lease = Duration.seconds(webhookLeaseSeconds)
        // An attempt starts only with the response timeout and a margin left on the lease.
        guard lease > timeout + .seconds(3) else {
            throw ValidationError("--webhook-lease-seconds must exceed the webhook timeout by more than 3 seconds")
        }
        return WebhookConfiguration(
            policy: policy, concurrency: webhookConcurrency, connectTimeout: min(.seconds(5), timeout), responseTimeout: timeout,
            retrySchedule: WebhookRetrySchedule(delays: delays, giveUpAfter: giveUp), leaseDuration: lease,
            leaseInterval: min(.seconds(2), lease / 5))
    }

    /// `5s`, `500ms`, `2m`, `1h` or a plain number of seconds.
    /// `30d`, `12h`, `90m` or seconds, for settings measured in days.
    static func longSeconds(_ text: String) -> Int64? {
        for (suffix, unit) in [("d", Int64(86_400)), ("h", 3600), ("m", 60), ("s", 1)] where text.hasSuffix(suffix) {
            guard let n = Int64(text.dropLast()), n >= 0, n <= 10_000 * 86_400 / unit else { return nil }
            return n * unit
        }
        guard let n = Int64(text), n >= 0, n <= 10_000 * 86_400 else { return nil }
        return n
    }

    static func duration(_ text: String) -> Duration? {
        let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)]
        for (suffix, ms) in units where text.hasSuffix(suffix) {
            guard let n = Int64(text.dropLast(suffix.count)), n >= 0, n <= 86_400_000 / ms else { return nil }
            return .milliseconds(n * ms)
        }
        guard let seconds = Int64(text), seconds >= 0, seconds <= 86_400 else { return nil }
        return .seconds(seconds)
    }

    /// The configured App Store roots, read from DER or PEM files.
    private func appleRoots() throws -> [[UInt8]] {
        try AppleRootFiles.load(appleRootCerts)
    }

    /// Refuses to start on an edited or missing migration; a database that is down only delays readiness.
    private func checkSchema(_ configuration: PostgresClient.Configuration, migrations: [Migration], logger: Logger) async throws {
        let status: MigrationStatus?
        do {
            status = try await withPostgresClient(configuration, logger: logger) { client in
                try await withTimeout(seconds: 10) {
                    try await MigrationRunner(client: client, migrations: migrations, logger: logger).status()
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
