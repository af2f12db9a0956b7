import AppleStore
import GoogleStore
import LedgerStore
import LedgerWebhooks
import StoreAdapters
import StripeStore

/// What `subledger serve` is told on its command line: the server's own settings, one sub-configuration per
/// store and one for outbound webhooks, so a store's settings travel together and a new store adds one member.
public struct ServerConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// Request bodies above this are refused with 413 before they are read.
    public var maxBodyBytes: Int
    /// How long a request waits for a database connection before answering 503 `unavailable`.
    public var databaseLeaseTimeout: Duration
    /// How long a valid API key is trusted without asking the database again: the longest a revoked key
    /// keeps working. Zero asks on every request.
    public var keyCacheTTL: Duration
    /// Bytes (estimated) of subscribers' ledgers kept in memory for entitlement reads; zero reads
    /// PostgreSQL every time. See docs/entitlement-cache.md.
    public var entitlementCacheBytes: Int
    /// How long a read that needs a position waits for a replica to reach it before reading the primary.
    public var replicaWait: Duration
    /// "Now" for `recorded_at` and for reads without `at` (tests set it).
    public var clock: WallClock
    public var apple: AppleConfiguration
    public var google: GooglePlayConfiguration
    public var stripe: StripeConfiguration
    /// Outbound webhooks: which URLs are allowed, timeouts, retries, leases (docs/webhooks.md).
    public var webhooks: WebhookConfiguration
    /// What happens when a store or an app names another subscriber for a purchase (docs/identity.md).
    public var transferPolicy: TransferPolicy = .transfer
    /// How often `serve` reconciles each configured store (nil: never; docs/switching.md "Reconcile").
    public var reconcileInterval: Duration?
    /// The reporting currencies whose revenue cells the server keeps (docs/reports.md, "Reporting currency from
    /// cells"); nil keeps those the database names (EUR and USD from the start).
    public var reportingCurrencies: [String]?

    public init(
        host: String = "127.0.0.1", port: Int = 8080, maxBodyBytes: Int = 8 * 1024 * 1024,
        databaseLeaseTimeout: Duration = .seconds(3), keyCacheTTL: Duration = .seconds(2), entitlementCacheBytes: Int = 256 << 20,
        replicaWait: Duration = .milliseconds(250), clock: WallClock = .system, apple: AppleConfiguration = AppleConfiguration(),
        google: GooglePlayConfiguration = GooglePlayConfiguration(), stripe: StripeConfiguration = StripeConfiguration(),
        webhooks: WebhookConfiguration = WebhookConfiguration()
    ) {
        self.host = host
        self.port = port
        self.maxBodyBytes = maxBodyBytes
        self.databaseLeaseTimeout = databaseLeaseTimeout
        self.keyCacheTTL = keyCacheTTL
        self.entitlementCacheBytes = entitlementCacheBytes
        self.replicaWait = replicaWait
        self.clock = clock
        self.apple = apple
        self.google = google
        self.stripe = stripe
        self.webhooks = webhooks
    }
}

/// The App Store: whose signatures are trusted, for which app, how old, and the Server API's background work.
public struct AppleConfiguration: Sendable {
    /// Trusted roots for App Store JWS, DER-encoded; empty means Apple Root CA - G3.
    public var rootsDER: [[UInt8]]
    /// When set, App Store payloads for another bundle are refused.
    public var bundleID: String?
    /// Oldest App Store `signedDate` accepted (default 180 days, the reach of Apple's notification history).
    public var maxAge: Duration
    /// The App Store Server API client and how often to read the notification history (docs/apple.md);
    /// nil: no periodic backfill.
    public var backfill: (client: AppStoreServerAPIClient, interval: Duration)?
    /// The App Store Server API client and the developer's policy for answering refund consumption
    /// requests; nil: they are recorded, not answered.
    public var consumption: (client: AppStoreServerAPIClient, policy: AppleConsumptionPolicy)?
    /// The App Store Server API client scheduled reconciliations ask (nil: the App Store is not reconciled).
    public var reconcileClient: AppStoreServerAPIClient?
    /// Apple's sandbox host, for consumption requests about sandbox transactions (nil: `consumption`'s client
    /// answers them, e.g. when a base URL is configured).
    public var sandboxClient: AppStoreServerAPIClient?

    public init(
        rootsDER: [[UInt8]] = [], bundleID: String? = nil, maxAge: Duration = AppleNotificationReader.defaultMaxAge,
        backfill: (client: AppStoreServerAPIClient, interval: Duration)? = nil,
        consumption: (client: AppStoreServerAPIClient, policy: AppleConsumptionPolicy)? = nil, sandboxClient: AppStoreServerAPIClient? = nil
    ) {
        self.rootsDER = rootsDER
        self.bundleID = bundleID
        self.maxAge = maxAge
        self.backfill = backfill
        self.consumption = consumption
        self.sandboxClient = sandboxClient
    }
}

/// Stripe: the webhook secrets that sign events, the optional customer look-up, the Connect accounts and the
/// past-due grace (docs/stripe.md).
public struct StripeConfiguration: Sendable {
    /// Webhook endpoint secrets (`whsec_…`), several during a rotation; empty: the Stripe route answers 404.
    public var webhookSecrets: [String]
    /// Seconds a `Stripe-Signature` timestamp may differ from now.
    public var signatureTolerance: Int64
    /// A Stripe API key: pending events' customers are looked up for `metadata.subscriber_id`. Nil: webhooks alone.
    public var apiKey: String?
    /// Stripe's API (`https://api.stripe.com`; tests point it at a local stand-in).
    public var apiBaseURL: String
    /// How often pending Stripe customers are looked up.
    public var lookupInterval: Duration
    /// The Connect accounts whose events are applied, and the longest past-due grace.
    public var settings: StripeSettings

    public init(
        webhookSecrets: [String] = [], signatureTolerance: Int64 = StripeSignatureVerifier.defaultTolerance, apiKey: String? = nil,
        apiBaseURL: String = StripeAPIClient.defaultBaseURL, lookupInterval: Duration = .seconds(60), settings: StripeSettings = StripeSettings()
    ) {
        self.webhookSecrets = webhookSecrets
        self.signatureTolerance = signatureTolerance
        self.apiKey = apiKey
        self.apiBaseURL = apiBaseURL
        self.lookupInterval = lookupInterval
        self.settings = settings
    }
}
