import AppleStore
import ArgumentParser
import AsyncHTTPClient
import Foundation
import GoogleStore
import LedgerCore
import LedgerServer
import LedgerWebhooks
import Logging
import StoreAdapters
import StripeStore

/// `serve`'s App Store options: whose signatures to trust, for which app, and the Server API's background work.
struct AppleServeOptions: ParsableArguments {
    @Option(
        name: .customLong("apple-root-cert"),
        help:
            "A trusted root certificate (DER or PEM) for App Store JWS; repeatable (default: $SUBLEDGER_APPLE_ROOT_CERTS, comma-separated, else Apple Root CA - G3)."
    )
    var rootCerts: [String] = []

    @Option(name: .customLong("apple-bundle-id"), help: "Refuse App Store payloads for other bundles (default: $SUBLEDGER_APPLE_BUNDLE_ID).")
    var bundleID: String?

    @Option(
        name: .customLong("apple-max-age-days"),
        help: "Refuse App Store payloads signed longer ago than this (default: $SUBLEDGER_APPLE_MAX_AGE_DAYS or 180).")
    var maxAgeDays: Int?

    @OptionGroup var api: AppleAPIKeyOptions

    @Option(
        name: .customLong("apple-backfill-interval"),
        help:
            "Read Apple's notification history this often (e.g. 1h) to recover missed notifications; needs the App Store Server API key (default: $SUBLEDGER_APPLE_BACKFILL_INTERVAL, else off)."
    )
    var backfillInterval: DurationArgument?

    @Option(
        name: .customLong("apple-consumption-policy"),
        help:
            "Answer Apple's refund consumption requests with this policy file (JSON, docs/apple.md); needs the App Store Server API key (default: $SUBLEDGER_APPLE_CONSUMPTION_POLICY, else off)."
    )
    var consumptionPolicy: String?

    func validate() throws {
        let env = EnvironmentFallback()
        _ = try AppleRootFiles.load(rootCerts)
        let days = try env.value(maxAgeDays, "SUBLEDGER_APPLE_MAX_AGE_DAYS", option: "apple-max-age-days") ?? 180
        guard (1...36_500).contains(days) else { throw ValidationError("--apple-max-age-days must be 1 to 36500") }
        try env.value(backfillInterval, "SUBLEDGER_APPLE_BACKFILL_INTERVAL", option: "apple-backfill-interval")?
            .check(.seconds(60)...(.days(10_000)), option: "apple-backfill-interval", expected: "a duration of at least 60s, such as 1h or 15m")
    }

    /// The App Store's configuration, and the Server API's HTTP client when the backfill or the consumption
    /// answers need one (the caller shuts it down when the server stops).
    func configuration(logger: Logger, reconcile: Bool = false) throws -> (AppleConfiguration, HTTPClient?) {
        let env = EnvironmentFallback()
        let bundleID = env.string(bundleID, "SUBLEDGER_APPLE_BUNDLE_ID")
        let days = try env.value(maxAgeDays, "SUBLEDGER_APPLE_MAX_AGE_DAYS", option: "apple-max-age-days") ?? 180
        var apple = AppleConfiguration(rootsDER: try AppleRootFiles.load(rootCerts), bundleID: bundleID, maxAge: .days(Int64(days)))
        let interval = try env.value(backfillInterval, "SUBLEDGER_APPLE_BACKFILL_INTERVAL", option: "apple-backfill-interval")
        var policy: AppleConsumptionPolicy?
        if let path = env.string(consumptionPolicy, "SUBLEDGER_APPLE_CONSUMPTION_POLICY") {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ValidationError("--apple-consumption-policy \(path): cannot read the file")
            }
            do {
                policy = try AppleConsumptionPolicy(json: String(decoding: data, as: UTF8.self))
            } catch {
                throw ValidationError("--apple-consumption-policy \(path): \(error)")
            }
        }
        // Reconciled when the key is given; `serve` without it reconciles the other stores.
        let reconciled = reconcile && api.isConfigured
        guard interval != nil || policy != nil || reconciled else { return (apple, nil) }
        // The App Store Server API's HTTP client lives as long as the server.
        let credentials = try api.credentials(bundleID: bundleID)
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        let client = AppStoreServerAPIClient(http: http, credentials: credentials, baseURL: api.url(sandbox: false), logger: logger)
        if let interval { apple.backfill = (client, interval.duration) }
        if let policy { apple.consumption = (client, policy) }
        if reconciled { apple.reconcileClient = client }
        // Apple's two hosts, unless a base URL says where to go for both.
        if !api.hasBaseURL {
            apple.sandboxClient = AppStoreServerAPIClient(http: http, credentials: credentials, baseURL: api.url(sandbox: true), logger: logger)
        }
        return (apple, http)
    }
}

/// `serve`'s Stripe options (docs/stripe.md).
struct StripeOptions: ParsableArguments {
    @Option(
        name: .customLong("stripe-webhook-secret"),
        help:
            "A Stripe webhook endpoint secret (whsec_…); repeatable, for rotation (default: $SUBLEDGER_STRIPE_WEBHOOK_SECRETS, comma-separated). Without one, POST /v1/stores/stripe/webhooks answers 404 not_configured."
    )
    var webhookSecrets: [String] = []

    @Option(
        name: .customLong("stripe-signature-tolerance"),
        help: "Seconds a Stripe-Signature timestamp may differ from now (default: $SUBLEDGER_STRIPE_SIGNATURE_TOLERANCE or 300).")
    var signatureTolerance: Int?

    @Option(
        name: .customLong("stripe-api-key"),
        help:
            "A Stripe API key (sk_… or a restricted rk_… with read access to customers): pending events' customers are looked up for metadata.subscriber_id (default: $SUBLEDGER_STRIPE_API_KEY; none: webhooks alone)."
    )
    var apiKey: String?

    @Option(name: .customLong("stripe-api-base-url"), help: "Stripe's API (default: $SUBLEDGER_STRIPE_API_BASE_URL or https://api.stripe.com).")
    var apiBaseURL: String?

    @Option(
        name: .customLong("stripe-account"),
        help:
            "A Stripe Connect account (acct_…) whose events are applied; repeatable (default: $SUBLEDGER_STRIPE_ACCOUNTS, comma-separated; none: events that carry an account are ignored)."
    )
    var accounts: [String] = []

    @Option(
        name: .customLong("stripe-grace-max"),
        help: "The longest a past-due Stripe subscription keeps access while Stripe retries, e.g. 30d (default: $SUBLEDGER_STRIPE_GRACE_MAX or 30d).")
    var graceMax: DurationArgument?

    func validate() throws {
        _ = try configuration()
    }

    func configuration() throws -> StripeConfiguration {
        let env = EnvironmentFallback()
        let tolerance =
            try env.value(signatureTolerance, "SUBLEDGER_STRIPE_SIGNATURE_TOLERANCE", option: "stripe-signature-tolerance")
            ?? Int(StripeSignatureVerifier.defaultTolerance)
        guard (1...86_400).contains(tolerance) else { throw ValidationError("--stripe-signature-tolerance must be 1 to 86400 seconds") }
        let base = env.string(apiBaseURL, "SUBLEDGER_STRIPE_API_BASE_URL") ?? StripeAPIClient.defaultBaseURL
        guard base.hasPrefix("https://") || base.hasPrefix("http://") else {
            throw ValidationError("--stripe-api-base-url must be an http:// or https:// URL, not '\(base)'")
        }
        var grace = StripeMappingOptions.defaultGraceMaxSeconds
        if let given = try env.value(graceMax, "SUBLEDGER_STRIPE_GRACE_MAX", option: "stripe-grace-max") {
            try given.check(.seconds(3600)...(.days(366)), option: "stripe-grace-max", expected: "a duration from 1h to 366d, such as 30d")
            grace = given.seconds
        }
        return StripeConfiguration(
            webhookSecrets: env.list(webhookSecrets, "SUBLEDGER_STRIPE_WEBHOOK_SECRETS"), signatureTolerance: Int64(tolerance),
            apiKey: env.string(apiKey, "SUBLEDGER_STRIPE_API_KEY"), apiBaseURL: base,
            settings: StripeSettings(
                accounts: env.list(accounts, "SUBLEDGER_STRIPE_ACCOUNTS"), mapping: StripeMappingOptions(graceMaxSeconds: grace)))
    }
}

/// `serve`'s outbound webhook options (docs/webhooks.md).
struct WebhookOptions: ParsableArguments {
    @Flag(
        name: .customLong("webhooks-allow-http"),
        help: "Accept http:// webhook URLs as well as https:// (also SUBLEDGER_WEBHOOKS_ALLOW_HTTP=1).")
    var allowHTTP = false

    @Flag(
        name: .customLong("webhooks-allow-private"),
        help: "Deliver webhooks to loopback, private and link-local addresses (also SUBLEDGER_WEBHOOKS_ALLOW_PRIVATE=1).")
    var allowPrivate = false

    @Option(name: .customLong("webhook-concurrency"), help: "Webhook requests in flight at once, across all endpoints.")
    var concurrency = 16

    @Option(
        name: .customLong("webhook-endpoint-concurrency"),
        help:
            "Webhook requests in flight at once to one endpoint, each for a different subscriber (default: $SUBLEDGER_WEBHOOK_ENDPOINT_CONCURRENCY or 8)."
    )
    var endpointConcurrency: Int?

    @Option(
        name: .customLong("webhook-timeout"),
        help: "Longest a webhook delivery waits for the response, e.g. 10s (connecting: at most 5s of it).")
    var timeout = DurationArgument(argument: "10s")!

    @Option(
        name: .customLong("webhook-retry-schedule"),
        help: "Delays between failed attempts, the last repeating, e.g. 1s,2s,5s,10s,20s,1m,5m,30m,2h,5h,10h (the default).")
    var retrySchedule = WebhookRetrySchedule.standardText

    @Option(
        name: .customLong("webhook-give-up-after"),
        help: "How long an endpoint may keep failing before it is paused (failing), e.g. 3d (the default).")
    var giveUpAfter = DurationArgument(argument: "3d")!

    @Option(
        name: .customLong("webhook-lease-seconds"),
        help: "Seconds a webhook endpoint's lease lasts without renewal: how soon another instance takes over a dead one's endpoints.")
    var leaseSeconds = 15

    func validate() throws {
        _ = try configuration()
    }

    func configuration() throws -> WebhookConfiguration {
        let env = EnvironmentFallback()
        let policy = WebhookDestinationPolicy(
            allowHTTP: env.flag(allowHTTP, "SUBLEDGER_WEBHOOKS_ALLOW_HTTP"), allowPrivate: env.flag(allowPrivate, "SUBLEDGER_WEBHOOKS_ALLOW_PRIVATE"))
        guard (1...1000).contains(concurrency) else { throw ValidationError("--webhook-concurrency must be 1 to 1000") }
        let perEndpoint =
            try env.value(endpointConcurrency, "SUBLEDGER_WEBHOOK_ENDPOINT_CONCURRENCY", option: "webhook-endpoint-concurrency") ?? 8
        guard (1...64).contains(perEndpoint) else { throw ValidationError("--webhook-endpoint-concurrency must be 1 to 64") }
        try timeout.check(.milliseconds(100)...(.seconds(60)), option: "webhook-timeout", expected: "a duration from 100ms to 60s, such as 10s")
        guard let delays = WebhookRetrySchedule.durations(retrySchedule) else {
            throw ValidationError("--webhook-retry-schedule must be durations separated by commas, such as 5s,5m,30m")
        }
        try giveUpAfter.check(.milliseconds(1)...(.days(10_000)), option: "webhook-give-up-after", expected: "a duration such as 3d or 72h")
        guard (3...3600).contains(leaseSeconds) else { throw ValidationError("--webhook-lease-seconds must be 3 to 3600") }
        let lease = Duration.seconds(leaseSeconds)
        // An attempt starts only with the response timeout and a margin left on the lease.
        guard lease > timeout.duration + .seconds(3) else {
            throw ValidationError("--webhook-lease-seconds must exceed the webhook timeout by more than 3 seconds")
        }
        return WebhookConfiguration(
            policy: policy, concurrency: concurrency, endpointConcurrency: perEndpoint,
            connectTimeout: min(.seconds(5), timeout.duration), responseTimeout: timeout.duration,
            retrySchedule: WebhookRetrySchedule(delays: delays, giveUpAfter: giveUpAfter.duration), leaseDuration: lease,
            leaseInterval: min(.seconds(2), lease / 5))
    }
}

/// `serve --reconcile-interval` (docs/switching.md "Reconcile").
struct ReconcileServeOptions: ParsableArguments {
    @Option(
        name: .customLong("reconcile-interval"),
        help:
            "Reconcile every store with API credentials this often, e.g. 6h (default: $SUBLEDGER_RECONCILE_INTERVAL, else off); at most 29d while Google Play is configured (Google lists voided purchases for 30 days)."
    )
    var interval: DurationArgument?

    /// The interval, checked against the stores configured: Google's voided purchases are listed for 30 days only.
    func interval(googleConfigured: Bool) throws -> Duration? {
        guard let given = try EnvironmentFallback().value(interval, "SUBLEDGER_RECONCILE_INTERVAL", option: "reconcile-interval") else {
            return nil
        }
        try given.check(.seconds(60)...(.days(10_000)), option: "reconcile-interval", expected: "a duration of at least 60s, such as 6h or 1d")
        if googleConfigured && given.duration > GoogleReconciliation.maxInterval {
            throw ValidationError(
                "--reconcile-interval \(given) is too long for Google Play: voided purchases are listed for 30 days only, so refunds between two runs would be lost; use 29d or less (6h to 1d is usual)"
            )
        }
        return given.duration
    }
}
