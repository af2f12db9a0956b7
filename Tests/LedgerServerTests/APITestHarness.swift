import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import NIOCore
import PostgresNIO
import Prometheus
import Testing

/// The real application on a fresh database, served as the service role (`subledger_app`) as in production,
/// with one key per role.
struct APIHarness {
    var keys: [APIRole: String]
    /// The fresh database's URL (as its owner).
    var url: DatabaseURL? = nil

    static func run(
        maxBodyBytes: Int = 1024 * 1024, appleRootsDER: [[UInt8]] = [], stripeSecrets: [String] = [StripeHelpers.secret],
        stripeAPIKey: String? = nil, stripeAPIBaseURL: String = "https://api.stripe.com", stripe: StripeSettings = StripeSettings(),
        live: Bool = false, reconcileInterval: Duration? = nil, reportingCurrencies: [String]? = nil,
        metrics: PrometheusCollectorRegistry? = nil,
        prepare: (@Sendable (DatabaseURL) async throws -> Void)? = nil,
        _ body: @escaping @Sendable (any TestClientProtocol, APIHarness) async throws -> Void
    ) async throws {
        try await TestDatabase.withDatabase { url in
            try await prepare?(url)
            let keys = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { owner in
                var keys: [APIRole: String] = [:]
                let store = APIKeyStore(client: owner, logger: TestDatabase.logger)
                for role in APIRole.allCases { keys[role] = try await store.create(role: role, name: "test \(role)").secret }
                return keys
            }
            let client = PostgresClient(
                configuration: url.clientConfiguration(role: "subledger_app", maximumConnections: 20),
                backgroundLogger: TestDatabase.logger)
            // The App Store scenarios are dated 2026: accept signatures of any age (the limit has its own tests).
            // A connection may take a while on a loaded machine (tests run in parallel): a lease timeout
            // above the production default, so a slow lease is not mistaken for an outage.
            var configuration = ServerConfiguration(
                maxBodyBytes: maxBodyBytes, databaseLeaseTimeout: .seconds(15),
                apple: AppleConfiguration(rootsDER: appleRootsDER, maxAge: .seconds(100 * 365 * 86_400)),
                stripe: StripeConfiguration(
                    webhookSecrets: stripeSecrets, apiKey: stripeAPIKey, apiBaseURL: stripeAPIBaseURL,
                    lookupInterval: .milliseconds(100), settings: stripe))
            configuration.reconcileInterval = reconcileInterval
            configuration.reportingCurrencies = reportingCurrencies
            let app = try buildApplication(
                configuration: configuration,
                client: client,
                schema: try TestDatabase.schema(), metrics: metrics, logger: TestDatabase.logger)
            // Background services (the Stripe customer look-up) run only in a live application.
            // A live application also serves a real socket (`http.port`), for tests that need one.
            try await app.test(stripeAPIKey == nil && !live ? .router : .live) { http in
                try await body(http, APIHarness(keys: keys, url: url))
            }
            return true
        }
    }

    func headers(_ role: APIRole?) -> HTTPFields {
        var h: HTTPFields = [.contentType: "application/json"]
        if let role { h[.authorization] = "Bearer \(keys[role]!)" }
        return h
    }
}

extension TestResponse {
    var json: JSONValue {
        get throws { try JSONParser.parse(Array(buffer: body)) }
    }

    /// The contract's error code, if the body is an error.
    var errorCode: String? {
        (try? json.objectValue?["error"]?.objectValue?["code"]?.stringValue) ?? nil
    }

    var errorField: String? {
        (try? json.objectValue?["error"]?.objectValue?["field"]?.stringValue) ?? nil
    }

    var events: [[String: JSONValue]] {
        get throws { try json.objectValue?["events"]?.arrayValue?.compactMap(\.objectValue) ?? [] }
    }
}

/// JSON text of a valid event (a purchase), with overrides applied to the top level.
func eventJSON(subscriber: String = "sub-1", key: String = "k1", overrides: [String: JSONValue] = [:]) -> [String: JSONValue] {
    var event: [String: JSONValue] = [
        "subscriber_id": .string(subscriber), "type": "purchase", "occurred_at": "2026-03-01T10:00:00Z",
        "source": "web", "environment": "production", "idempotency_key": .string(key),
        "data": [
            "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": .string("t-\(key)"),
            "kind": "auto_renewable", "period_start": "2026-03-01T10:00:00Z", "period_end": "2026-04-01T10:00:00Z",
            "period": "P1M", "price_minor": 999, "currency": "USD", "commission_rate": "0.30",
        ],
    ]
    for (k, v) in overrides { event[k] = v }
    return event
}

func body(_ value: JSONValue) -> ByteBuffer { ByteBuffer(bytes: value.canonicalBytes()) }
func body(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }
