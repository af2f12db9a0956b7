import Foundation
import GoogleStore
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import Logging
import NIOCore
import PostgresNIO
import StoreAdapters
import Synchronization
import Testing
import _CryptoExtras

/// Google's side, on 127.0.0.1: the OAuth token endpoint (it checks the service account's JWT assertion
/// against the account's public key), the androidpublisher routes the scenarios use (shapes from the
/// discovery document in Resources/google-androidpublisher) and a JWKS for the test-signed OIDC tokens.
final class GooglePlayStandIn: Sendable {
    struct State {
        var purchases: [String: [String: JSONValue]] = [:]
        var down = false
        var acknowledged: [String] = []
        var accessTokens: Set<String> = []
        var refusedAssertions = 0
        var apiCalls = 0
        var voided: [JSONValue] = []
        var orders: [String: JSONValue] = [:]
        /// The access token the token endpoint answers (nil: a fresh valid one each time).
        var issuedToken: String?
        var tokenRequests = 0
        /// The JWKS answers 503, after a while, while this is set.
        var jwksDown = false
        var jwksRequests = 0
        /// `orders.get` calls per order id (a retry must not repeat one per line item).
        var orderCalls: [String: Int] = [:]
        /// How long `subscriptionsv2.get` takes to answer (a hanging Play API).
        var delay: Duration = .zero
    }

    static let email = "ledger@test-project.iam.gserviceaccount.com"
    static let pushAccount = "pubsub-push@test-project.iam.gserviceaccount.com"
    static let audience = "https://ledger.example.com/v1/stores/google/notifications"
    static let package = "com.example.app"

    let serviceKey: _RSA.Signing.PrivateKey
    let oidcKey: _RSA.Signing.PrivateKey
    let state = Mutex(State())

    init() throws {
        serviceKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        oidcKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
    }

    func set(_ token: String, _ purchase: [String: JSONValue]) { state.withLock { $0.purchases[token] = purchase } }
    func setDown(_ down: Bool) { state.withLock { $0.down = down } }
    func void(_ entry: JSONValue) { state.withLock { $0.voided.append(entry) } }
    func order(_ id: String, _ order: JSONValue) { state.withLock { $0.orders[id] = order } }
    var acknowledged: [String] { state.withLock { $0.acknowledged } }

    /// The service account's key file, as Google issues it.
    func serviceAccountJSON(port: Int) -> [UInt8] {
        JSONValue.object([
            "type": "service_account", "project_id": "test-project", "private_key_id": "sa-key-1",
            "private_key": .string(serviceKey.pkcs8PEMRepresentation), "client_email": .string(Self.email),
            "token_uri": .string("http://127.0.0.1:\(port)/token"),
        ]).canonicalBytes()
    }

    func configuration(port: Int, packages: Set<String> = [package], reconcile: Duration? = nil) throws -> GooglePlayConfiguration {
        GooglePlayConfiguration(
            packageNames: packages, serviceAccount: try GoogleServiceAccount(json: serviceAccountJSON(port: port)),
            apiBaseURL: "http://127.0.0.1:\(port)", pubsubAudience: Self.audience, pubsubServiceAccount: Self.pushAccount,
            oidcJWKS: "http://127.0.0.1:\(port)/certs", retryBase: .milliseconds(100), pollInterval: .milliseconds(100),
            callBackoff: [.milliseconds(20)], reconcileInterval: reconcile)
    }

    /// An OIDC ID token as Pub/Sub sends it; `key` other than the published one makes a forgery.
    func oidcToken(
        audience: String = audience, email: String = pushAccount, expiresIn: Int64 = 3600, key: _RSA.Signing.PrivateKey? = nil,
        issuer: String = "https://accounts.google.com"
    ) throws -> String {
        let now = Int64(Date().timeIntervalSince1970)
        let header: JSONValue = ["alg": "RS256", "kid": "oidc-1", "typ": "JWT"]
        let claims: JSONValue = [
            "iss": .string(issuer), "aud": .string(audience), "email": .string(email), "email_verified": true,
            "sub": "1234567890", "iat": .number(JSONNumber(now - 10)), "exp": .number(JSONNumber(now + expiresIn)),
        ]
        let input = Base64URL.encode(header.canonicalBytes()) + "." + Base64URL.encode(claims.canonicalBytes())
        let signature = try (key ?? oidcKey).signature(for: Array(input.utf8), padding: .insecurePKCS1v1_5)
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }

    func jwks() throws -> JSONValue {
        let p = try oidcKey.publicKey.getKeyPrimitives()
        return [
            "keys": [
                [
                    "kid": "oidc-1", "kty": "RSA", "alg": "RS256", "use": "sig",
                    "n": .string(Base64URL.encode(p.modulus)), "e": .string(Base64URL.encode(p.publicExponent)),
                ]
            ]
        ]
    }

    func handleToken(_ request: Request) async throws -> Response {
        state.withLock { $0.tokenRequests += 1 }
        let form = String(buffer: try await request.body.collect(upTo: 65536))
        var fields: [String: String] = [:]
        for pair in form.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            if kv.count == 2 { fields[String(kv[0])] = String(kv[1]).removingPercentEncoding }
        }
        func refuse() -> Response {
            state.withLock { $0.refusedAssertions += 1 }
            return Self.json(["error": "invalid_grant", "error_description": "Invalid JWT Signature."], status: .badRequest)
        }
        guard fields["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer", let assertion = fields["assertion"] else { return refuse() }
        let parts = assertion.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let sig = Base64URL.decode(parts[2]), let claimBytes = Base64URL.decode(parts[1]),
            case .object(let claims)? = try? JSONParser.parse(claimBytes),
            serviceKey.publicKey.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: sig), for: Array((parts[0] + "." + parts[1]).utf8), padding: .insecurePKCS1v1_5),
            claims["iss"]?.stringValue == Self.email, claims["aud"]?.stringValue?.hasSuffix("/token") == true,
            claims["scope"]?.stringValue == "https://www.googleapis.com/auth/androidpublisher",
            let exp = claims["exp"]?.numberValue?.int64Value, exp > Int64(Date().timeIntervalSince1970)
        else { return refuse() }
        let token = state.withLock { $0.issuedToken } ?? "ya29.test-\(UUID().uuidString)"
        state.withLock { _ = $0.accessTokens.insert(token) }
        return Self.json(["access_token": .string(token), "expires_in": 3599, "token_type": "Bearer"])
    }

    func authorised(_ request: Request) -> Bool {
        guard let h = request.headers[.authorization], h.hasPrefix("Bearer ") else { return false }
        return state.withLock { $0.accessTokens.contains(String(h.dropFirst(7))) }
    }

    static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: value.canonicalBytes())))
    }

    static func unauthorised() -> Response {
        json(
            ["error": ["code": 401, "message": "Request had invalid authentication credentials.", "status": "UNAUTHENTICATED"]], status: .unauthorized
        )
    }
    static func unavailable() -> Response {
        json(["error": ["code": 503, "message": "The service is currently unavailable.", "status": "UNAVAILABLE"]], status: .serviceUnavailable)
    }

    func serve<T: Sendable>(_ body: @escaping @Sendable (Int) async throws -> T) async throws -> T {
        let router = Router()
        router.post("token") { request, _ in try await self.handleToken(request) }
        router.get("certs") { _, _ in
            let down = self.state.withLock { s -> Bool in
                s.jwksRequests += 1
                return s.jwksDown
            }
            guard !down else {
                // As a slow, failing endpoint: each fetch is held a while before it fails.
                try await Task.sleep(for: .milliseconds(300))
                return Self.unavailable()
            }
            return Self.json(try self.jwks())
        }
        router.get("androidpublisher/v3/applications/:package/purchases/subscriptionsv2/tokens/:token") { request, context in
            let down = self.state.withLock { s -> Bool in
                s.apiCalls += 1
                return s.down
            }
            if down { return Self.unavailable() }
            let delay = self.state.withLock { $0.delay }
            if delay > .zero { try await Task.sleep(for: delay) }
            guard self.authorised(request) else { return Self.unauthorised() }
            let token = context.parameters.get("token") ?? ""
            guard context.parameters.get("package") == Self.package, let p = self.state.withLock({ $0.purchases[token] }),
                p["kind"] != "androidpublisher#productPurchase"
            else {
                return Self.json(["error": ["code": 404, "message": "The purchase token was not found.", "status": "NOT_FOUND"]], status: .notFound)
            }
            return Self.json(.object(p))
        }
        router.get("androidpublisher/v3/applications/:package/orders/:order") { request, context in
            if self.state.withLock({ $0.down }) { return Self.unavailable() }
            guard self.authorised(request) else { return Self.unauthorised() }
            let id = context.parameters.get("order") ?? ""
            self.state.withLock { $0.orderCalls[id, default: 0] += 1 }
            // Google answers only for the package the order belongs to.
            guard context.parameters.get("package") == Self.package, let order = self.state.withLock({ $0.orders[id] }) else {
                return Self.json(["error": ["code": 404, "message": "Order not found.", "status": "NOT_FOUND"]], status: .notFound)
            }
            return Self.json(order)
        }
        router.get("androidpublisher/v3/applications/:package/purchases/voidedpurchases") { request, _ in
            if self.state.withLock({ $0.down }) { return Self.unavailable() }
            guard self.authorised(request) else { return Self.unauthorised() }
            // Two entries a page, so that paging is exercised.
            let all = self.state.withLock { $0.voided }
            let start = Int(request.uri.queryParameters.get("token") ?? "0") ?? 0
            let page = Array(all.dropFirst(start).prefix(2))
            var body: [String: JSONValue] = ["voidedPurchases": .array(page), "pageInfo": ["resultPerPage": 2]]
            if start + 2 < all.count { body["tokenPagination"] = ["nextPageToken": .string(String(start + 2))] }
            return Self.json(.object(body))
        }
        router.get("androidpublisher/v3/applications/:package/purchases/products/:product/tokens/:token") { request, context in
            if self.state.withLock({ $0.down }) { return Self.unavailable() }
            guard self.authorised(request) else { return Self.unauthorised() }
            let token = context.parameters.get("token") ?? ""
            guard let p = self.state.withLock({ $0.purchases[token] }), p["kind"] == "androidpublisher#productPurchase",
                p["productId"]?.stringValue == context.parameters.get("product")
            else {
                return Self.json(["error": ["code": 404, "message": "The purchase token was not found.", "status": "NOT_FOUND"]], status: .notFound)
            }
            return Self.json(.object(p))
        }
        router.post("androidpublisher/v3/applications/:package/purchases/products/:product/tokens/:token") { request, context in
            if self.state.withLock({ $0.down }) { return Self.unavailable() }
            guard self.authorised(request) else { return Self.unauthorised() }
            let action = context.parameters.get("token") ?? ""
            guard action.hasSuffix(":acknowledge") else { return Self.json(["error": ["code": 404]], status: .notFound) }
            let token = String(action.dropLast(":acknowledge".count))
            self.state.withLock { s in
                s.acknowledged.append(token)
                s.purchases[token]?["acknowledgementState"] = 1
            }
            return Response(status: .ok)
        }
        router.post("androidpublisher/v3/applications/:package/purchases/subscriptions/:product/tokens/:action") { request, context in
            if self.state.withLock({ $0.down }) { return Self.unavailable() }
            guard self.authorised(request) else { return Self.unauthorised() }
            let action = context.parameters.get("action") ?? ""
            guard action.hasSuffix(":acknowledge") else { return Self.json(["error": ["code": 404]], status: .notFound) }
            let token = String(action.dropLast(":acknowledge".count))
            self.state.withLock { s in
                s.acknowledged.append(token)
                s.purchases[token]?["acknowledgementState"] = "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED"
            }
            return Response(status: .ok)
        }
        return try await LocalHTTPServer.serve(router, label: "google-stand-in", body)
    }
}

@Suite("Google Play API", .serialized)
struct GoogleStoreAPITests {
    static let product: JSONValue = [
        "entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M", "price_minor": 999, "currency": "USD",
        "commission_rate": "0.15",
    ]
    static let lifetime: JSONValue = [
        "entitlements": ["pro"], "kind": "lifetime", "price_minor": 4999, "currency": "USD", "commission_rate": "0.15",
    ]
    static let maxProduct: JSONValue = [
        "entitlements": ["pro", "max"], "kind": "auto_renewable", "period": "P1M", "price_minor": 1999, "currency": "USD",
        "commission_rate": "0.15",
    ]

    struct Context {
        var http: any TestClientProtocol
        var api: APIHarness
        var google: GooglePlayStandIn
        var url: DatabaseURL
        /// The stand-in's port (its API, token endpoint and JWKS).
        var port = 0
    }

    /// The application with Google Play configured against the stand-in, on a fresh database.
    static func run(
        packages: Set<String> = [GooglePlayStandIn.package], configured: Bool = true, reconcile: Duration? = nil,
        clock: WallClock = .system, _ body: @escaping @Sendable (Context) async throws -> Void
    ) async throws {
        let google = try GooglePlayStandIn()
        _ = try await google.serve { port in
            try await TestDatabase.withDatabase { url in
                let keys = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { owner in
                    var keys: [APIRole: String] = [:]
                    let store = APIKeyStore(client: owner, logger: TestDatabase.logger)
                    for role in APIRole.allCases { keys[role] = try await store.create(role: role, name: "test \(role)").secret }
                    return keys
                }
                let client = PostgresClient(
                    configuration: url.clientConfiguration(role: "subledger_app", maximumConnections: 8), backgroundLogger: TestDatabase.logger)
                let app = try buildApplication(
                    configuration: ServerConfiguration(
                        maxBodyBytes: 1024 * 1024, clock: clock,
                        google: configured
                            ? try google.configuration(port: port, packages: packages, reconcile: reconcile)
                            : GooglePlayConfiguration(reconcileInterval: nil)),
                    client: client, schema: try TestDatabase.schema(), logger: TestDatabase.logger)
                try await app.test(.router) { http in
                    let api = APIHarness(keys: keys)
                    for (id, p) in [("pro.monthly", product), ("max.monthly", maxProduct), ("lifetime.pro", lifetime)] {
                        let put = try await http.execute(
                            uri: "/v1/catalog/products/\(id)", method: .put, headers: api.headers(.admin), body: LedgerServerTests.body(p))
                        #expect(put.status == .ok || put.status == .created)
                    }
                    try await body(Context(http: http, api: api, google: google, url: url, port: port))
                }
                return true
            }
        }
    }

    // MARK: shapes

    static func t(_ s: String) -> Timestamp { try! Timestamp(rfc3339: s) }

    /// A `SubscriptionPurchaseV2` (discovery document shape).
    static func purchase(
        state: String = "SUBSCRIPTION_STATE_ACTIVE", product: String = "pro.monthly", order: String?, start: String = "2026-03-01T10:00:00.123Z",
        expiry: String, autoRenew: Bool = true, account: String? = "user-1", acknowledged: Bool = false, test: Bool = false,
        linked: String? = nil, canceled: [String: JSONValue]? = nil
    ) -> [String: JSONValue] {
        var item: [String: JSONValue] = [
            "productId": .string(product), "expiryTime": .string(expiry),
            "autoRenewingPlan": [
                "autoRenewEnabled": .bool(autoRenew), "recurringPrice": ["currencyCode": "USD", "units": "9", "nanos": 990_000_000],
            ],
            "offerDetails": ["basePlanId": "monthly", "offerTags": []],
        ]
        if let order { item["latestSuccessfulOrderId"] = .string(order) }
        var p: [String: JSONValue] = [
            "kind": "androidpublisher#subscriptionPurchaseV2", "regionCode": "US", "startTime": .string(start),
            "subscriptionState": .string(state), "lineItems": [.object(item)],
            "acknowledgementState": .string(acknowledged ? "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED" : "ACKNOWLEDGEMENT_STATE_PENDING"),
        ]
        if let account { p["externalAccountIdentifiers"] = ["obfuscatedExternalAccountId": .string(account)] }
        if test { p["testPurchase"] = [:] }
        if let linked { p["linkedPurchaseToken"] = .string(linked) }
        if let canceled { p["canceledStateContext"] = .object(canceled) }
        return p
    }

    /// A Pub/Sub push of a DeveloperNotification.
    static func push(
        id: String, at: String, type: Int? = nil, token: String, package: String = GooglePlayStandIn.package,
        voided order: String? = nil
    ) -> JSONValue {
        var n: [String: JSONValue] = [
            "version": "1.0", "packageName": .string(package),
            "eventTimeMillis": .string(String(t(at).microseconds / 1000)),
        ]
        if let order {
            n["voidedPurchaseNotification"] = ["purchaseToken": .string(token), "orderId": .string(order), "productType": 1, "refundType": 1]
        } else {
            n["subscriptionNotification"] = [
                "version": "1.0", "notificationType": .number(JSONNumber(Int64(type ?? 4))), "purchaseToken": .string(token),
                "subscriptionId": "pro.monthly",
            ]
        }
        return [
            "message": [
                "data": .string(Data(JSONValue.object(n).canonicalBytes()).base64EncodedString()), "messageId": .string(id),
                "publishTime": .string(at), "attributes": [:],
            ],
            "subscription": "projects/test-project/subscriptions/play-rtdn",
        ]
    }

    /// Pushes a notification; with `settle`, waits (up to 30 s) until the background resolver has resolved
    /// what the push recorded (the push is answered 202 once it is in the inbox).
    @discardableResult
    static func send(_ c: Context, _ push: JSONValue, token: String? = nil, settle: Bool = true) async throws -> TestResponse {
        let bearer = try token ?? c.google.oidcToken()
        let r = try await c.http.execute(
            uri: "/v1/stores/google/notifications", method: .post,
            headers: [.contentType: "application/json", .authorization: "Bearer \(bearer)"], body: LedgerServerTests.body(push))
        if settle, r.status == .accepted, let id = push.objectValue?["message"]?.objectValue?["messageId"]?.stringValue {
            // Up to 30 s: on a loaded machine the resolver may take seconds (it stops as soon as it has).
            for _ in 0..<600 {
                if try await inbox(c)[id] != "received" { break }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        return r
    }

    /// The entitlement read at the ledger's head (`min_position`): the background resolver's append invalidates the
    /// server's entitlement cache just after its COMMIT, so a read that saw the inbox say "applied" could otherwise
    /// still meet the cached ledger of before (what a client that did not make the append is told to do).
    static func entitlement(_ c: Context, _ subscriber: String, _ name: String = "pro", at: String) async throws -> [String: JSONValue]? {
        let head = try await TestDatabase.run(c.url.clientConfiguration(maximumConnections: 1)) { client in
            try await client.query("SELECT coalesce(max(position), 0) FROM events").collect().first?.decode(Int64.self) ?? 0
        }
        let r = try await c.http.execute(
            uri: "/v1/subscribers/\(subscriber)/entitlements?at=\(at)&min_position=\(head)", method: .get, headers: c.api.headers(.reader))
        return try r.json.objectValue?["entitlements"]?.arrayValue?.first { $0.objectValue?["entitlement"]?.stringValue == name }?.objectValue
    }

    static func active(_ c: Context, _ subscriber: String, _ name: String = "pro", at: String) async throws -> Bool {
        try await entitlement(c, subscriber, name, at: at)?["active"] == true
    }

    static func events(_ c: Context, _ subscriber: String) async throws -> [[String: JSONValue]] {
        try await c.http.execute(uri: "/v1/subscribers/\(subscriber)/events", method: .get, headers: c.api.headers(.auditor)).events
    }

    static func inbox(_ c: Context) async throws -> [String: String] {
        try await TestDatabase.run(c.url.clientConfiguration(maximumConnections: 1)) { client in
            var out: [String: String] = [:]
            for try await (id, status) in try await client.query("SELECT message_id, status FROM store_inbox WHERE store = 'google'")
                .decode((String, String).self)
            {
                out[id] = status
            }
            return out
        }
    }

    // MARK: scenarios

    @Test("purchase, renewals, grace and recovery; acknowledged once recorded; the same push twice appends nothing")
    func lifecycle() async throws {
        try await Self.run { c in
            c.google.set("tok-a", Self.purchase(order: "GPA.1111-2222-3333-44444", expiry: "2026-04-01T10:00:00.5Z"))
            let bought = try await Self.send(c, Self.push(id: "m1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-a"))
            #expect(bought.status == .accepted)
            #expect(try bought.json.objectValue?["status"] == "received")
            #expect(try await Self.inbox(c)["m1"] == "applied")
            #expect(try await Self.active(c, "user-1", at: "2026-03-15T00:00:00Z"))
            #expect(c.google.acknowledged == ["tok-a"])

            c.google.set("tok-a", Self.purchase(order: "GPA.1111-2222-3333-44444..0", expiry: "2026-05-01T10:00:00Z", acknowledged: true))
            try await Self.send(c, Self.push(id: "m2", at: "2026-04-01T10:00:00Z", type: 2, token: "tok-a"))
            #expect(try await Self.inbox(c)["m2"] == "applied")
            #expect(try await Self.active(c, "user-1", at: "2026-04-15T00:00:00Z"))

            c.google.set(
                "tok-a",
                Self.purchase(
                    state: "SUBSCRIPTION_STATE_IN_GRACE_PERIOD", order: "GPA.1111-2222-3333-44444..0", expiry: "2026-05-08T10:00:00Z",
                    acknowledged: true))
            try await Self.send(c, Self.push(id: "m3", at: "2026-05-01T10:00:00Z", type: 6, token: "tok-a"))
            #expect(try await Self.active(c, "user-1", at: "2026-05-03T00:00:00Z"), "in grace")

            c.google.set("tok-a", Self.purchase(order: "GPA.1111-2222-3333-44444..1", expiry: "2026-06-04T10:00:00Z", acknowledged: true))
            let recovered = Self.push(id: "m4", at: "2026-05-04T10:00:00Z", type: 1, token: "tok-a")
            try await Self.send(c, recovered)
            #expect(try await Self.active(c, "user-1", at: "2026-05-20T00:00:00Z"))
            #expect(try await Self.send(c, recovered).json.objectValue?["status"] == "duplicate")

            let events = try await Self.events(c, "user-1")
            #expect(events.map { $0["type"]?.stringValue ?? "" } == ["purchase", "renewal", "billing_issue", "renewal"])
            #expect(events.allSatisfy { $0["source"] == "google" && $0["environment"] == "production" })
            #expect(events.first?.objectValue("data")?["transaction_id"] == "GPA.1111-2222-3333-44444")
            #expect(events[2].objectValue("data")?["grace_until"] == "2026-05-08T10:00:00Z")
            #expect(c.google.acknowledged == ["tok-a"], "acknowledged once")

            // Resolving again (a replay with a new message id) appends nothing new.
            try await Self.send(c, Self.push(id: "m4-replay", at: "2026-05-04T10:00:00Z", type: 1, token: "tok-a"))
            #expect(try await Self.events(c, "user-1").count == 4)
        }
    }

    @Test("account hold ends access, expiry follows; cancel then restart is no cut")
    func holdCancelRestart() async throws {
        try await Self.run { c in
            c.google.set("tok-h", Self.purchase(order: "GPA.2000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-h"))
            try await Self.send(c, Self.push(id: "h1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-h"))
            c.google.set(
                "tok-h",
                Self.purchase(
                    state: "SUBSCRIPTION_STATE_ON_HOLD", order: "GPA.2000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-h"))
            try await Self.send(c, Self.push(id: "h2", at: "2026-04-01T10:00:00Z", type: 5, token: "tok-h"))
            #expect(try await Self.active(c, "user-h", at: "2026-04-02T00:00:00Z") == false)
            c.google.set(
                "tok-h",
                Self.purchase(
                    state: "SUBSCRIPTION_STATE_EXPIRED", order: "GPA.2000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-h",
                    canceled: ["systemInitiatedCancellation": [:]]))
            try await Self.send(c, Self.push(id: "h3", at: "2026-05-01T10:00:00Z", type: 13, token: "tok-h"))
            let held = try await Self.events(c, "user-h")
            #expect(held.map { $0["type"]?.stringValue ?? "" } == ["purchase", "expiration", "expiration"])
            #expect(held.dropFirst().allSatisfy { $0.objectValue("data")?["reason"] == "billing" })

            c.google.set("tok-c", Self.purchase(order: "GPA.3000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-c"))
            try await Self.send(c, Self.push(id: "c1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-c"))
            c.google.set(
                "tok-c",
                Self.purchase(
                    state: "SUBSCRIPTION_STATE_CANCELED", order: "GPA.3000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", autoRenew: false,
                    account: "user-c", canceled: ["userInitiatedCancellation": ["cancelTime": "2026-03-10T00:00:00Z"]]))
            try await Self.send(c, Self.push(id: "c2", at: "2026-03-10T00:00:00Z", type: 3, token: "tok-c"))
            #expect(try await Self.active(c, "user-c", at: "2026-03-20T00:00:00Z"), "cancelling auto-renew is not a cut")
            c.google.set("tok-c", Self.purchase(order: "GPA.3000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-c"))
            try await Self.send(c, Self.push(id: "c3", at: "2026-03-12T00:00:00Z", type: 7, token: "tok-c"))
            let toggled = try await Self.events(c, "user-c")
            #expect(toggled.map { $0["type"]?.stringValue ?? "" } == ["purchase", "auto_renew_changed", "auto_renew_changed"])
            #expect(toggled.dropFirst().map { $0.objectValue("data")?["enabled"] } == [false, true])
            #expect(try await Self.active(c, "user-c", at: "2026-03-31T00:00:00Z"))
        }
    }

    @Test("an upgrade across linkedPurchaseToken ends the old token's time when the new one starts")
    func upgrade() async throws {
        try await Self.run { c in
            c.google.set("tok-old", Self.purchase(order: "GPA.4000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-u"))
            try await Self.send(c, Self.push(id: "u1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-old"))
            c.google.set(
                "tok-old",
                Self.purchase(
                    state: "SUBSCRIPTION_STATE_EXPIRED", order: "GPA.4000-0000-0000-00001", expiry: "2026-03-15T10:00:00Z", account: "user-u",
                    acknowledged: true, canceled: ["replacementCancellation": [:]]))
            // The new token carries no account id: it finds its subscriber through the old token.
            c.google.set(
                "tok-new",
                Self.purchase(
                    product: "max.monthly", order: "GPA.5000-0000-0000-00001", start: "2026-03-15T10:00:00Z", expiry: "2026-04-15T10:00:00Z",
                    account: nil, linked: "tok-old"))
            try await Self.send(c, Self.push(id: "u2", at: "2026-03-15T10:00:01Z", type: 4, token: "tok-new"))
            #expect(try await Self.inbox(c)["u2"] == "applied")
            #expect(try await Self.active(c, "user-u", "max", at: "2026-03-20T00:00:00Z"))
            #expect(try await Self.entitlement(c, "user-u", at: "2026-03-20T00:00:00Z")?["expires_at"] == "2026-04-15T10:00:00Z")
            let events = try await Self.events(c, "user-u")
            #expect(events.map { $0["type"]?.stringValue ?? "" } == ["purchase", "purchase", "refund"])
            #expect(events[2].objectValue("data")?["transaction_id"] == "GPA.4000-0000-0000-00001")
            #expect(events[2].objectValue("data")?["amount_minor"] == 0)
            let windows = try await c.http.execute(uri: "/v1/subscribers/user-u/windows", method: .get, headers: c.api.headers(.reader))
            let old = try #require(
                try windows.json.objectValue?["windows"]?.arrayValue?.compactMap(\.objectValue).first {
                    $0["transaction_id"] == "GPA.4000-0000-0000-00001"
                })
            #expect(old["cut_at"] == "2026-03-15T10:00:00Z", "the old token's time ends when the new one starts")
        }
    }

    @Test("a pause lapses with reason paused; the resume renews")
    func pause() async throws {
        try await Self.run { c in
            c.google.set("tok-p", Self.purchase(order: "GPA.6000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-p"))
            try await Self.send(c, Self.push(id: "p1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-p"))
            c.google.set(
                "tok-p",
                Self.purchase(
                    state: "SUBSCRIPTION_STATE_PAUSED", order: "GPA.6000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-p"))
            try await Self.send(c, Self.push(id: "p2", at: "2026-04-01T10:00:00Z", type: 10, token: "tok-p"))
            #expect(try await Self.active(c, "user-p", at: "2026-04-15T00:00:00Z") == false)
            c.google.set("tok-p", Self.purchase(order: "GPA.6000-0000-0000-00001..0", expiry: "2026-06-01T10:00:00Z", account: "user-p"))
            try await Self.send(c, Self.push(id: "p3", at: "2026-05-01T10:00:00Z", type: 2, token: "tok-p"))
            #expect(try await Self.active(c, "user-p", at: "2026-05-15T00:00:00Z"))
            let events = try await Self.events(c, "user-p")
            #expect(events.map { $0["type"]?.stringValue ?? "" } == ["purchase", "expiration", "renewal"])
            #expect(events[1].objectValue("data")?["reason"] == "paused")
        }
    }

    @Test("a voided purchase is a refund of its order; a test purchase is sandbox and stays out of reports")
    func voidedAndTest() async throws {
        try await Self.run { c in
            c.google.set("tok-v", Self.purchase(order: "GPA.7000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-v"))
            try await Self.send(c, Self.push(id: "v1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-v"))
            c.google.void([
                "kind": "androidpublisher#voidedPurchase", "purchaseToken": "tok-v", "orderId": "GPA.7000-0000-0000-00001",
                "purchaseTimeMillis": .string(String(Self.t("2026-03-01T10:00:00Z").microseconds / 1000)),
                "voidedTimeMillis": .string(String(Self.t("2026-03-10T00:00:00Z").microseconds / 1000)), "voidedSource": 0, "voidedReason": 1,
            ])
            try await Self.send(c, Self.push(id: "v2", at: "2026-03-10T00:00:00Z", token: "tok-v", voided: "GPA.7000-0000-0000-00001"))
            #expect(try await Self.active(c, "user-v", at: "2026-03-15T00:00:00Z") == false)
            let refund = try #require(try await Self.events(c, "user-v").last)
            #expect(refund["type"] == "refund")
            #expect(refund.objectValue("data")?["amount_minor"] == 999)

            c.google.set(
                "tok-t",
                Self.purchase(
                    order: "GPA.8000-0000-0000-00001", start: "2026-03-01T10:00:00Z", expiry: "2026-04-01T10:00:00Z", account: "user-t", test: true))
            try await Self.send(c, Self.push(id: "t1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-t"))
            #expect(try await Self.events(c, "user-t").map { $0["environment"] } == ["sandbox"])
            let mrr = try await c.http.execute(uri: "/v1/reports/mrr?at=2026-03-05T00:00:00Z", method: .get, headers: c.api.headers(.analyst))
            let currencies = try #require(try mrr.json.objectValue?["currencies"]?.arrayValue)
            // Only user-v's purchase was production (and refunded): the test purchase never counts.
            #expect(currencies.allSatisfy { ($0.objectValue?["active_paid"]?.numberValue?.int64Value ?? 0) <= 1 })
        }
    }

    @Test("a push token is checked against the server's configured clock, not the machine's")
    func tokenAgainstConfiguredClock() async throws {
        // Two hours ahead of the machine: a token Google issued now for an hour has expired by the server's clock.
        let now = Int64(Date().timeIntervalSince1970)
        try await Self.run(clock: .fixed(Timestamp(microseconds: (now + 7200) * 1_000_000))) { c in
            let push = Self.push(id: "c1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-c")
            let r = try await Self.send(c, push, token: try c.google.oidcToken(expiresIn: 3600))
            #expect(r.status == .unauthorized)
            #expect(try await Self.inbox(c).isEmpty)
            // Issued for three hours, it holds.
            c.google.set("tok-c", Self.purchase(order: "GPA.9000-0000-0000-00002", expiry: "2026-04-01T10:00:00Z", account: "user-c"))
            #expect(try await Self.send(c, push, token: try c.google.oidcToken(expiresIn: 3 * 3600)).status == .accepted)
        }
    }

    @Test("forged, expired, wrong-audience and missing tokens are 401 and store nothing; another package is ignored")
    func authentication() async throws {
        try await Self.run { c in
            c.google.set("tok-x", Self.purchase(order: "GPA.9000-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-x"))
            let push = Self.push(id: "x1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-x")
            let forger = try _RSA.Signing.PrivateKey(keySize: .bits2048)
            for bad in [
                try c.google.oidcToken(key: forger), try c.google.oidcToken(expiresIn: -3600),
                try c.google.oidcToken(audience: "https://elsewhere.example.com"), try c.google.oidcToken(email: "someone@example.com"),
                try c.google.oidcToken(issuer: "https://evil.example.com"), "not-a-jwt",
            ] {
                let r = try await Self.send(c, push, token: bad)
                #expect(r.status == .unauthorized)
                #expect(r.errorCode == "unauthorized")
            }
            let none = try await c.http.execute(
                uri: "/v1/stores/google/notifications", method: .post, headers: [.contentType: "application/json"], body: LedgerServerTests.body(push)
            )
            #expect(none.status == .unauthorized)
            // An API key is not a Pub/Sub token either.
            #expect(try await Self.send(c, push, token: c.api.keys[.admin]!).status == .unauthorized)
            #expect(try await Self.inbox(c).isEmpty)
            #expect(try await Self.events(c, "user-x").isEmpty)

            let other = try await Self.send(c, Self.push(id: "o1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-x", package: "com.other.app"))
            #expect(other.status == .ok)
            #expect(try other.json.objectValue?["status"] == "ignored")
            #expect(try await Self.inbox(c) == ["o1": "ignored"])
            #expect(try await Self.events(c, "user-x").isEmpty)
        }
    }

    @Test("while Google is down notifications wait in the inbox; the background resolver applies them later")
    func apiDown() async throws {
        try await Self.run { c in
            c.google.set("tok-d", Self.purchase(order: "GPA.9100-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-d"))
            c.google.setDown(true)
            let r = try await Self.send(c, Self.push(id: "d1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-d"), settle: false)
            #expect(r.status == .accepted)
            #expect(try r.json.objectValue?["status"] == "received")
            #expect(try await Self.inbox(c) == ["d1": "received"])
            #expect(try await Self.events(c, "user-d").isEmpty)
            try await Task.sleep(for: .milliseconds(400))
            #expect(try await Self.events(c, "user-d").isEmpty)
            c.google.setDown(false)
            var applied = false
            for _ in 0..<100 where !applied {
                try await Task.sleep(for: .milliseconds(100))
                applied = try await Self.inbox(c)["d1"] == "applied"
            }
            #expect(applied)
            #expect(try await Self.events(c, "user-d").map { $0["type"]?.stringValue ?? "" } == ["purchase"])
            #expect(c.google.acknowledged == ["tok-d"])
            // A redelivery by Pub/Sub after that is a duplicate.
            #expect(
                try await Self.send(c, Self.push(id: "d1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-d")).json.objectValue?["status"]
                    == "duplicate")
        }
    }

    @Test("an access token with CR LF from the token endpoint is in no answer nor inbox row, and is asked for again")
    func unusableAccessToken() async throws {
        try await Self.run { c in
            let secret = GoogleOutboundTests.secret
            c.google.state.withLock { $0.issuedToken = "ya29.\(secret)\r\nX-Injected: 1" }
            c.google.set("tok-h", Self.purchase(order: "GPA.9300-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-h"))
            let r = try await Self.send(c, Self.push(id: "h1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-h"), settle: false)
            #expect(try r.json.objectValue?["status"] == "received")
            let submit: JSONValue = [
                "subscriber_id": "user-h", "package_name": .string(GooglePlayStandIn.package), "product_id": "pro.monthly", "purchase_token": "tok-h",
            ]
            let submitted = try await c.http.execute(
                uri: "/v1/stores/google/purchases", method: .post, headers: c.api.headers(.writer), body: LedgerServerTests.body(submit))
            #expect(submitted.status == .serviceUnavailable)
            #expect(!String(buffer: submitted.body).contains(secret))
            let errors = try await TestDatabase.run(c.url.clientConfiguration(maximumConnections: 1)) { client in
                let rows = try await client.query("SELECT coalesce(last_error, '') FROM store_inbox WHERE store = 'google'")
                var out: [String] = []
                for try await e in rows.decode(String.self) { out.append(e) }
                return out
            }
            #expect(errors.count == 1 && errors.allSatisfy { !$0.isEmpty && !$0.contains(secret) })
            // Never kept: the push and the submission each asked the token endpoint (the resolver may have too).
            #expect(c.google.state.withLock { $0.tokenRequests } >= 2)
            #expect(try await Self.events(c, "user-h").isEmpty)
        }
    }

    @Test("60 pushes while the JWKS fails make one fetch, not 60")
    func jwksFetchedOnce() async throws {
        try await Self.run { c in
            c.google.state.withLock { $0.jwksDown = true }
            let push = Self.push(id: "j1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-j")
            let token = try c.google.oidcToken()
            let refused = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<60 { group.addTask { try await Self.send(c, push, token: token).status == .unauthorized } }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(refused == 60)
            #expect(c.google.state.withLock { $0.jwksRequests } <= 2)
            #expect(try await Self.inbox(c).isEmpty)
        }
    }

    @Test("a purchase without an account id waits until the app submits its token")
    func submittedPurchase() async throws {
        try await Self.run { c in
            c.google.set("tok-s", Self.purchase(order: "GPA.9200-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: nil))
            try await Self.send(c, Self.push(id: "s1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-s"))
            #expect(try await Self.inbox(c)["s1"] == "pending")
            #expect(c.google.acknowledged.isEmpty, "not acknowledged before it is recorded")
            let submit: JSONValue = [
                "subscriber_id": "user-s", "package_name": .string(GooglePlayStandIn.package), "product_id": "pro.monthly", "purchase_token": "tok-s",
            ]
            #expect(
                try await c.http.execute(
                    uri: "/v1/stores/google/purchases", method: .post, headers: c.api.headers(.reader), body: LedgerServerTests.body(submit)
                ).status == .forbidden)
            let r = try await c.http.execute(
                uri: "/v1/stores/google/purchases", method: .post, headers: c.api.headers(.writer), body: LedgerServerTests.body(submit))
            #expect(r.status == .ok)
            #expect(try r.events.map { $0["type"] } == ["purchase"])
            // A writer is answered what was stored, not the subscriber's entitlements (reader data).
            #expect(try r.json.objectValue.map { Set($0.keys) } == ["subscriber_id", "events"])
            let stored = try r.events.last?["position"]?.numberValue?.int64Value
            #expect(r.headers[ReadYourWritesAPITests.position] == stored.map(String.init))
            #expect(try await Self.inbox(c) == ["s1": "applied"])
            #expect(c.google.acknowledged == ["tok-s"])
            var wrong = submit.objectValue!
            wrong["product_id"] = "max.monthly"
            let refused = try await c.http.execute(
                uri: "/v1/stores/google/purchases", method: .post, headers: c.api.headers(.writer), body: LedgerServerTests.body(.object(wrong)))
            #expect(refused.status == .unprocessableContent)
            wrong["product_id"] = "pro.monthly"
            wrong["purchase_token"] = "tok-unknown"
            #expect(
                try await c.http.execute(
                    uri: "/v1/stores/google/purchases", method: .post, headers: c.api.headers(.writer), body: LedgerServerTests.body(.object(wrong))
                ).status == .unprocessableContent)
        }
    }

    @Test("a one-time product: purchased through a notification, acknowledged; a submitted one-time token")
    func oneTimeProducts() async throws {
        try await Self.run { c in
            func productPurchase(_ order: String, account: String?) -> [String: JSONValue] {
                var p: [String: JSONValue] = [
                    "kind": "androidpublisher#productPurchase", "productId": "lifetime.pro", "orderId": .string(order),
                    "purchaseTimeMillis": .string(String(Self.t("2026-03-01T10:00:00Z").microseconds / 1000)), "purchaseState": 0,
                    "acknowledgementState": 0, "consumptionState": 0, "regionCode": "US",
                ]
                if let account { p["obfuscatedExternalAccountId"] = .string(account) }
                return p
            }
            c.google.set("tok-l", productPurchase("GPA.9300-0000-0000-00001", account: "user-l"))
            let n: JSONValue = [
                "version": "1.0", "packageName": .string(GooglePlayStandIn.package),
                "eventTimeMillis": .string(String(Self.t("2026-03-01T10:00:01Z").microseconds / 1000)),
                "oneTimeProductNotification": ["version": "1.0", "notificationType": 1, "purchaseToken": "tok-l", "sku": "lifetime.pro"],
            ]
            let push: JSONValue = ["message": ["data": .string(Data(n.canonicalBytes()).base64EncodedString()), "messageId": "l1"]]
            try await Self.send(c, push)
            #expect(try await Self.inbox(c)["l1"] == "applied")
            #expect(try await Self.active(c, "user-l", at: "2030-01-01T00:00:00Z"))
            #expect(c.google.acknowledged == ["tok-l"])

            // Voided: the notification does not name the product; its order does, and says what was paid.
            c.google.order(
                "GPA.9300-0000-0000-00001",
                [
                    "orderId": "GPA.9300-0000-0000-00001", "purchaseToken": "tok-l", "state": "REFUNDED",
                    "total": ["currencyCode": "USD", "units": "49", "nanos": 990_000_000],
                    "lineItems": [
                        [
                            "productId": "lifetime.pro", "productTitle": "Pro forever",
                            "total": ["currencyCode": "USD", "units": "49", "nanos": 990_000_000],
                        ]
                    ],
                ])
            let voided: JSONValue = [
                "version": "1.0", "packageName": .string(GooglePlayStandIn.package),
                "eventTimeMillis": .string(String(Self.t("2026-03-20T00:00:00Z").microseconds / 1000)),
                "voidedPurchaseNotification": ["purchaseToken": "tok-l", "orderId": "GPA.9300-0000-0000-00001", "productType": 2, "refundType": 1],
            ]
            try await Self.send(c, ["message": ["data": .string(Data(voided.canonicalBytes()).base64EncodedString()), "messageId": "l2"]])
            let refund = try #require(try await Self.events(c, "user-l").last)
            #expect(refund["type"] == "refund")
            #expect(refund.objectValue("data")?["amount_minor"] == 4999)
            #expect(try await Self.active(c, "user-l", at: "2030-01-01T00:00:00Z") == false)

            c.google.set("tok-m", productPurchase("GPA.9400-0000-0000-00001", account: nil))
            let submit: JSONValue = [
                "subscriber_id": "user-m", "package_name": .string(GooglePlayStandIn.package), "product_id": "lifetime.pro",
                "purchase_token": "tok-m",
            ]
            // An admin key may read entitlements too: they come with the answer.
            let submitted = try await c.http.execute(
                uri: "/v1/stores/google/purchases", method: .post, headers: c.api.headers(.admin), body: LedgerServerTests.body(submit))
            #expect(submitted.status == .ok)
            #expect(try submitted.events.map { $0["type"] } == ["purchase"])
            #expect(try submitted.json.objectValue?["entitlements"]?.arrayValue?.first?.objectValue?["active"] == true)
            #expect(try submitted.json.objectValue?["at"]?.stringValue != nil)
            #expect(c.google.acknowledged == ["tok-l", "tok-m"])
        }
    }

    @Test("reconciliation reads voided purchases, page by page, and refunds what a missed notification did not, once")
    func reconciliation() async throws {
        try await Self.run(reconcile: .milliseconds(200)) { c in
            for (i, user) in ["user-r1", "user-r2", "user-r3"].enumerated() {
                c.google.set("tok-r\(i)", Self.purchase(order: "GPA.9600-0000-0000-0000\(i)", expiry: "2026-04-01T10:00:00Z", account: user))
                try await Self.send(c, Self.push(id: "r\(i)", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-r\(i)"))
            }
            for i in 0..<3 {
                c.google.void([
                    "kind": "androidpublisher#voidedPurchase", "purchaseToken": .string("tok-r\(i)"),
                    "orderId": .string("GPA.9600-0000-0000-0000\(i)"),
                    "purchaseTimeMillis": .string(String(Self.t("2026-03-01T10:00:00Z").microseconds / 1000)),
                    "voidedTimeMillis": .string(String(Self.t("2026-03-10T00:00:00Z").microseconds / 1000)), "voidedSource": 0, "voidedReason": 1,
                ])
            }
            // tok-r0's voiding was also notified: reconciliation must not refund it twice.
            try await Self.send(c, Self.push(id: "rv0", at: "2026-03-10T00:00:00Z", token: "tok-r0", voided: "GPA.9600-0000-0000-00000"))
            var refunded = false
            for _ in 0..<100 where !refunded {
                try await Task.sleep(for: .milliseconds(100))
                refunded = try await Self.events(c, "user-r3").contains { $0["type"] == "refund" }
            }
            #expect(refunded)
            try await Task.sleep(for: .milliseconds(500))
            for i in 1...3 {
                let refunds = try await Self.events(c, "user-r\(i)").filter { $0["type"] == "refund" }
                #expect(refunds.count == 1, "user-r\(i): one refund")
            }
            #expect(try await Self.active(c, "user-r1", at: "2026-03-15T00:00:00Z") == false)
        }
    }

    @Test("the paid amount, tax and Google's share come from orders.get; without an order the catalog's price stands")
    func orderPricing() async throws {
        try await Self.run { c in
            c.google.order(
                "GPA.9700-0000-0000-00001",
                [
                    "orderId": "GPA.9700-0000-0000-00001", "purchaseToken": "tok-o", "state": "PROCESSED",
                    "total": ["currencyCode": "EUR", "units": "5", "nanos": 490_000_000],
                    "tax": ["currencyCode": "EUR", "units": "0", "nanos": 500_000_000],
                    "developerRevenueInBuyerCurrency": ["currencyCode": "EUR", "units": "4", "nanos": 240_000_000],
                ])
            c.google.set("tok-o", Self.purchase(order: "GPA.9700-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-o"))
            try await Self.send(c, Self.push(id: "o1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-o"))
            c.google.set(
                "tok-o", Self.purchase(order: "GPA.9700-0000-0000-00001..0", expiry: "2026-05-01T10:00:00Z", account: "user-o", acknowledged: true))
            // Resolved late (the notification's time is weeks after the renewal): the period still starts
            // one catalog period before Google's expiry.
            try await Self.send(c, Self.push(id: "o2", at: "2026-04-20T00:00:00Z", type: 2, token: "tok-o"))
            let events = try await Self.events(c, "user-o")
            #expect(events.map { $0["type"]?.stringValue ?? "" } == ["purchase", "renewal"])
            // 5.49 paid (the price), 0.50 tax (included in it): 4.99 net, of which the developer gets 4.24: Google keeps
            // 0.75 / 4.99, taken on the net (ledger-semantics section 6).
            #expect(events[0].objectValue("data")?["price_minor"] == 549)
            #expect(events[0].objectValue("data")?["tax_minor"] == 50)
            #expect(events[0].objectValue("data")?["currency"] == "EUR")
            #expect(events[0].objectValue("data")?["commission_rate"] == "0.150301")
            #expect(events[0].objectValue("metadata")?["order_tax_minor"] == 50)
            #expect(events[1].objectValue("data")?["price_minor"] == 999, "no order: the catalog's price")
            #expect(events[1].objectValue("data")?["currency"] == "USD")
            #expect(events[1].objectValue("data")?["period_start"] == "2026-04-01T10:00:00Z")
        }
    }

    @Test("without configuration the routes answer 404 not_configured (401 without a token)")
    func notConfigured() async throws {
        try await Self.run(configured: false) { c in
            let push = Self.push(id: "n1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-n")
            let r = try await Self.send(c, push)
            #expect(r.status == .notFound)
            #expect(r.errorCode == "not_configured")
            let anonymous = try await c.http.execute(
                uri: "/v1/stores/google/notifications", method: .post, headers: [.contentType: "application/json"], body: LedgerServerTests.body(push)
            )
            #expect(anonymous.status == .unauthorized)
            let submit: JSONValue = ["subscriber_id": "u", "package_name": "p", "product_id": "pro.monthly", "purchase_token": "t"]
            let purchase = try await c.http.execute(
                uri: "/v1/stores/google/purchases", method: .post, headers: c.api.headers(.writer), body: LedgerServerTests.body(submit))
            #expect(purchase.status == .notFound)
            #expect(purchase.errorCode == "not_configured")
            #expect(try await Self.inbox(c).isEmpty)
        }
    }

    @Test("the stand-in's purchases use only fields of the discovery document's SubscriptionPurchaseV2")
    func shapes() throws {
        let url = try #require(
            Bundle.module.url(forResource: "androidpublisher.v3.subset", withExtension: "json", subdirectory: "Resources/google-androidpublisher"))
        let doc = try JSONParser.parse(Array(try Data(contentsOf: url)), maxDepth: 1000)
        let schemas = try #require(doc.objectValue?["schemas"]?.objectValue)
        func fields(_ name: String) -> Set<String> { Set(schemas[name]?.objectValue?["properties"]?.objectValue?.keys.map { $0 } ?? []) }
        let p = Self.purchase(order: "GPA.1", expiry: "2026-04-01T10:00:00Z", test: true, linked: "x", canceled: ["userInitiatedCancellation": [:]])
        #expect(Set(p.keys).isSubset(of: fields("SubscriptionPurchaseV2")))
        let item = try #require(p["lineItems"]?.arrayValue?.first?.objectValue)
        #expect(Set(item.keys).isSubset(of: fields("SubscriptionPurchaseLineItem")))
        #expect(
            Set(["SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_ON_HOLD", "SUBSCRIPTION_STATE_PAUSED", "SUBSCRIPTION_STATE_IN_GRACE_PERIOD"])
                .isSubset(
                    of: Set(
                        schemas["SubscriptionPurchaseV2"]?.objectValue?["properties"]?.objectValue?["subscriptionState"]?.objectValue?["enum"]?
                            .arrayValue?.compactMap(\.stringValue) ?? [])))
    }
}

extension Dictionary where Key == String, Value == JSONValue {
    func objectValue(_ key: String) -> [String: JSONValue]? { self[key]?.objectValue }
}

/// The stores as they really behave: late facts, linked tokens by cause, deferrals, month ends, one-time
/// products, voids Google must confirm, orders with two line items, unreadable money, Pub/Sub's deadline.
extension GoogleStoreAPITests {
    typealias Item = (product: String, start: String, end: String, units: String)

    /// An `Order` (`orders.get`) with one subscription line item per `items`, each with its service period.
    static func order(_ id: String, token: String, state: String = "PROCESSED", _ items: [Item], history: [String: JSONValue]? = nil) -> JSONValue {
        func money(_ units: String) -> JSONValue { ["currencyCode": "USD", "units": .string(units), "nanos": 990_000_000] }
        let total = items.compactMap { Int64($0.units) }.reduce(0, +) + Int64(items.count - 1)
        var o: [String: JSONValue] = [
            "orderId": .string(id), "purchaseToken": .string(token), "state": .string(state), "createTime": .string(items[0].start),
            "total": items.count == 1 ? money(items[0].units) : money(String(total)),
            "lineItems": .array(
                items.map { i in
                    [
                        "productId": .string(i.product), "total": money(i.units),
                        "subscriptionDetails": [
                            "basePlanId": "monthly", "offerPhase": "BASE", "servicePeriodStartTime": .string(i.start),
                            "servicePeriodEndTime": .string(i.end),
                        ],
                    ]
                }),
        ]
        if let history { o["orderHistory"] = .object(history) }
        return .object(o)
    }

    static func submit(_ c: Context, subscriber: String, product: String = "pro.monthly", token: String) async throws -> TestResponse {
        let body: JSONValue = [
            "subscriber_id": .string(subscriber), "package_name": .string(GooglePlayStandIn.package), "product_id": .string(product),
            "purchase_token": .string(token),
        ]
        return try await c.http.execute(
            uri: "/v1/stores/google/purchases", method: .post, headers: c.api.headers(.writer), body: LedgerServerTests.body(body))
    }

    static func types(_ events: [[String: JSONValue]]) -> [String] { events.map { $0["type"]?.stringValue ?? "" } }

    /// A first order with its service period, its token's state, and the push that records it.
    static func bought(_ c: Context, order o: String, token: String, account: String, from start: String, to end: String) async throws {
        c.google.order(o, Self.order(o, token: token, [("pro.monthly", start, end, "9")]))
        c.google.set(token, Self.purchase(order: o, start: start, expiry: end, account: account))
        try await Self.send(c, Self.push(id: "\(token)-bought", at: start, type: 4, token: token))
    }

    @Test("a renewal learned after its period ended is recorded, with its order's period and price (push and submitted token)")
    func lateRenewal() async throws {
        try await Self.run { c in
            let base = "GPA.1100-0000-0000-00001"
            try await Self.bought(c, order: base, token: "tok-late", account: "user-late", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z")
            // The renewal's notification is resolved after that period ended (a Pub/Sub backlog, a ledger outage).
            c.google.order(
                base + "..0", Self.order(base + "..0", token: "tok-late", [("pro.monthly", "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "8")]))
            c.google.set(
                "tok-late",
                Self.purchase(
                    state: "SUBSCRIPTION_STATE_EXPIRED", order: base + "..0", start: "2026-03-01T10:00:00Z", expiry: "2026-05-01T10:00:00Z",
                    autoRenew: false, account: "user-late", acknowledged: true, canceled: ["userInitiatedCancellation": [:]]))
            try await Self.send(c, Self.push(id: "late2", at: "2026-05-03T00:00:00Z", type: 2, token: "tok-late"))
            var events = try await Self.events(c, "user-late")
            #expect(Self.types(events) == ["purchase", "renewal"])
            let renewal = events.last?.objectValue("data")
            #expect(renewal?["period_start"] == "2026-04-01T10:00:00Z" && renewal?["period_end"] == "2026-05-01T10:00:00Z")
            #expect(renewal?["price_minor"] == 899)
            #expect(events.last?["occurred_at"] == "2026-04-01T10:00:00Z")
            #expect(try await Self.active(c, "user-late", at: "2026-04-15T00:00:00Z"))

            // The app submits the token again, a period later still: the order Google now names is recorded.
            c.google.order(
                base + "..1", Self.order(base + "..1", token: "tok-late", [("pro.monthly", "2026-05-01T10:00:00Z", "2026-06-01T10:00:00Z", "9")]))
            c.google.set(
                "tok-late",
                Self.purchase(
                    state: "SUBSCRIPTION_STATE_EXPIRED", order: base + "..1", start: "2026-03-01T10:00:00Z", expiry: "2026-06-01T10:00:00Z",
                    autoRenew: false, account: "user-late", acknowledged: true, canceled: ["userInitiatedCancellation": [:]]))
            let r = try await Self.submit(c, subscriber: "user-late", token: "tok-late")
            #expect(r.status == .ok)
            events = try await Self.events(c, "user-late")
            #expect(Self.types(events) == ["purchase", "renewal", "renewal"])
            #expect(events.last?.objectValue("data")?["period_start"] == "2026-05-01T10:00:00Z")
        }
    }

    /// A `ProductPurchase` (`purchases.products.get`).
    static func productPurchase(_ order: String, token: String, state: Int64 = 0, account: String?) -> [String: JSONValue] {
        var p: [String: JSONValue] = [
            "kind": "androidpublisher#productPurchase", "productId": "lifetime.pro", "orderId": .string(order), "purchaseToken": .string(token),
            "purchaseTimeMillis": .string(String(Self.t("2026-03-01T10:00:00Z").microseconds / 1000)),
            "purchaseState": .number(JSONNumber(state)), "acknowledgementState": 1, "consumptionState": 0, "regionCode": "US",
        ]
        if let account { p["obfuscatedExternalAccountId"] = .string(account) }
        return p
    }

    /// An `Order` of one one-time product.
    static func productOrder(_ id: String, token: String, state: String, refundedAt: String? = nil) -> JSONValue {
        var o: [String: JSONValue] = [
            "orderId": .string(id), "purchaseToken": .string(token), "state": .string(state), "createTime": "2026-03-01T10:00:00Z",
            "total": ["currencyCode": "USD", "units": "49", "nanos": 990_000_000],
            "lineItems": [
                [
                    "productId": "lifetime.pro", "productTitle": "Pro forever",
                    "total": ["currencyCode": "USD", "units": "49", "nanos": 990_000_000],
                    "oneTimePurchaseDetails": ["quantity": 1],
                ]
            ],
        ]
        if let refundedAt {
            o["orderHistory"] = ["refundEvent": ["eventTime": .string(refundedAt), "refundReason": "OTHER"]]
        }
        return .object(o)
    }

    static func productPush(id: String, at: String, token: String, type: Int64 = 1) -> JSONValue {
        let n: JSONValue = [
            "version": "1.0", "packageName": .string(GooglePlayStandIn.package), "eventTimeMillis": .string(String(t(at).microseconds / 1000)),
            "oneTimeProductNotification": [
                "version": "1.0", "notificationType": .number(JSONNumber(type)), "purchaseToken": .string(token), "sku": "lifetime.pro",
            ],
        ]
        return ["message": ["data": .string(Data(n.canonicalBytes()).base64EncodedString()), "messageId": .string(id)]]
    }

    static func voidedPush(id: String, at: String, token: String, order: String, productType: Int64) -> JSONValue {
        let n: JSONValue = [
            "version": "1.0", "packageName": .string(GooglePlayStandIn.package), "eventTimeMillis": .string(String(t(at).microseconds / 1000)),
            "voidedPurchaseNotification": [
                "purchaseToken": .string(token), "orderId": .string(order), "productType": .number(JSONNumber(productType)), "refundType": 1,
            ],
        ]
        return ["message": ["data": .string(Data(n.canonicalBytes()).base64EncodedString()), "messageId": .string(id)]]
    }

    @Test("a one-time purchase resolved after its refund is still recorded, and its refund cuts it at Google's time")
    func refundedBeforeResolved() async throws {
        try await Self.run { c in
            let order = "GPA.1200-0000-0000-00001"
            c.google.set("tok-rb", Self.productPurchase(order, token: "tok-rb", state: 1, account: "user-rb"))
            c.google.order(order, Self.productOrder(order, token: "tok-rb", state: "REFUNDED", refundedAt: "2026-03-05T00:00:00Z"))
            try await Self.send(c, Self.productPush(id: "rb1", at: "2026-03-01T10:00:01Z", token: "tok-rb"))
            #expect(Self.types(try await Self.events(c, "user-rb")) == ["purchase"])
            try await Self.send(c, Self.voidedPush(id: "rb2", at: "2026-03-06T00:00:00Z", token: "tok-rb", order: order, productType: 2))
            let events = try await Self.events(c, "user-rb")
            #expect(Self.types(events) == ["purchase", "refund"])
            #expect(events.last?["occurred_at"] == "2026-03-05T00:00:00Z", "at Google's time of the refund")
            #expect(try await Self.active(c, "user-rb", at: "2026-03-03T00:00:00Z"))
            #expect(try await Self.active(c, "user-rb", at: "2026-03-10T00:00:00Z") == false)
        }
    }

    @Test("a linked token is a refund only for a replacement: a re-subscription continues the chain")
    func linkedResubscription() async throws {
        try await Self.run { c in
            c.google.set("tok-rs1", Self.purchase(order: "GPA.1300-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-rs"))
            try await Self.send(c, Self.push(id: "rs1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-rs1"))
            c.google.set(
                "tok-rs1",
                Self.purchase(
                    state: "SUBSCRIPTION_STATE_CANCELED", order: "GPA.1300-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", autoRenew: false,
                    account: "user-rs", acknowledged: true, canceled: ["userInitiatedCancellation": [:]]))
            // Re-signed up from the Play Store before the period's end: a new token linked to the old one.
            c.google.set(
                "tok-rs2",
                Self.purchase(
                    order: "GPA.1400-0000-0000-00001", start: "2026-03-20T10:00:00Z", expiry: "2026-05-01T10:00:00Z", account: nil,
                    linked: "tok-rs1"))
            try await Self.send(c, Self.push(id: "rs2", at: "2026-03-20T10:00:01Z", type: 4, token: "tok-rs2"))
            let events = try await Self.events(c, "user-rs")
            #expect(Self.types(events) == ["purchase", "purchase"], "no refund that never happened")
            #expect(try await Self.active(c, "user-rs", at: "2026-03-25T00:00:00Z"))
        }
    }

    @Test("a developer deferral is a credit from the old expiry to the new one")
    func deferral() async throws {
        try await Self.run { c in
            let o = "GPA.1500-0000-0000-00001"
            try await Self.bought(c, order: o, token: "tok-df", account: "user-df", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z")
            c.google.set(
                "tok-df",
                Self.purchase(order: o, start: "2026-03-01T10:00:00Z", expiry: "2026-05-01T10:00:00Z", account: "user-df", acknowledged: true))
            try await Self.send(c, Self.push(id: "df2", at: "2026-03-10T00:00:00Z", type: 9, token: "tok-df"))
            let credits = try await Self.events(c, "user-df").filter { $0["type"] == "credit" }
            #expect(credits.count == 1)
            #expect(credits.first?.objectValue("data")?["window_start"] == "2026-04-01T10:00:00Z")
            #expect(credits.first?.objectValue("data")?["window_end"] == "2026-05-01T10:00:00Z")
        }
    }

    @Test("a renewal's period at a month's end is its order's, not expiry minus the catalog period")
    func monthEnd() async throws {
        try await Self.run { c in
            let o = "GPA.1600-0000-0000-00001"
            try await Self.bought(c, order: o, token: "tok-me", account: "user-me", from: "2025-12-30T10:00:00Z", to: "2026-01-30T10:00:00Z")
            c.google.order(o + "..0", Self.order(o + "..0", token: "tok-me", [("pro.monthly", "2026-01-30T10:00:00Z", "2026-02-28T10:00:00Z", "9")]))
            c.google.set(
                "tok-me",
                Self.purchase(order: o + "..0", start: "2025-12-30T10:00:00Z", expiry: "2026-02-28T10:00:00Z", account: "user-me", acknowledged: true)
            )
            try await Self.send(c, Self.push(id: "me2", at: "2026-01-30T10:00:05Z", type: 2, token: "tok-me"))
            let renewal = try await Self.events(c, "user-me").last?.objectValue("data")
            #expect(renewal?["period_start"] == "2026-01-30T10:00:00Z")
        }
    }

    @Test("reconciliation refunds a voided one-time product")
    func reconcileOneTime() async throws {
        try await Self.run(reconcile: .milliseconds(200)) { c in
            let order = "GPA.1700-0000-0000-00001"
            c.google.set("tok-ot", Self.productPurchase(order, token: "tok-ot", account: "user-ot"))
            c.google.order(order, Self.productOrder(order, token: "tok-ot", state: "PROCESSED"))
            try await Self.send(c, Self.productPush(id: "ot1", at: "2026-03-01T10:00:01Z", token: "tok-ot"))
            #expect(try await Self.active(c, "user-ot", at: "2026-03-05T00:00:00Z"))
            c.google.order(order, Self.productOrder(order, token: "tok-ot", state: "REFUNDED", refundedAt: "2026-03-10T00:00:00Z"))
            c.google.void([
                "kind": "androidpublisher#voidedPurchase", "purchaseToken": "tok-ot", "orderId": .string(order),
                "purchaseTimeMillis": .string(String(Self.t("2026-03-01T10:00:00Z").microseconds / 1000)),
                "voidedTimeMillis": .string(String(Self.t("2026-03-10T00:00:00Z").microseconds / 1000)), "voidedSource": 0, "voidedReason": 1,
            ])
            var refunded = false
            for _ in 0..<60 where !refunded {
                try await Task.sleep(for: .milliseconds(100))
                refunded = try await Self.events(c, "user-ot").contains { $0["type"] == "refund" }
            }
            #expect(refunded)
            #expect(try await Self.active(c, "user-ot", at: "2026-03-15T00:00:00Z") == false)
        }
    }

    @Test("a voided push Google does not confirm is a store_notice, not a refund")
    func unconfirmedVoid() async throws {
        try await Self.run { c in
            let o = "GPA.1800-0000-0000-00001"
            try await Self.bought(c, order: o, token: "tok-uv", account: "user-uv", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z")
            try await Self.send(c, Self.push(id: "uv2", at: "2026-03-10T00:00:00Z", token: "tok-uv", voided: o))
            let events = try await Self.events(c, "user-uv")
            #expect(Self.types(events) == ["purchase", "store_notice"])
            #expect(try await Self.active(c, "user-uv", at: "2026-03-15T00:00:00Z"))
        }
    }

    @Test("an order with two line items records both, once; a retry does not read the order again per line item")
    func twoLineItems() async throws {
        try await Self.run { c in
            let o = "GPA.1900-0000-0000-00001"
            c.google.order(
                o,
                Self.order(
                    o, token: "tok-2",
                    [
                        ("pro.monthly", "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "9"),
                        ("max.monthly", "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "19"),
                    ]))
            var p = Self.purchase(order: o, start: "2026-03-01T10:00:00Z", expiry: "2026-04-01T10:00:00Z", account: nil)
            var second = try #require(p["lineItems"]?.arrayValue?.first?.objectValue)
            second["productId"] = "max.monthly"
            p["lineItems"] = .array((p["lineItems"]?.arrayValue ?? []) + [.object(second)])
            c.google.set("tok-2", p)
            let r = try await Self.submit(c, subscriber: "user-2", token: "tok-2")
            #expect(r.status == .ok)
            #expect(try r.events.count == 2)
            #expect(c.google.state.withLock { $0.orderCalls[o] } == 1)
            let events = try await Self.events(c, "user-2")
            #expect(Set(events.compactMap { $0.objectValue("data")?["price_minor"] }) == [999, 1999])
            var q = p
            q["externalAccountIdentifiers"] = ["obfuscatedExternalAccountId": "user-2b"]
            c.google.set("tok-2b", q)
            let pushed = try await Self.send(c, Self.push(id: "two1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-2b"))
            #expect(pushed.status.code < 300)
            var applied = false
            for _ in 0..<50 where !applied {
                applied = try await Self.inbox(c)["two1"] == "applied"
                if !applied { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(applied)
        }
    }

    @Test("unreadable money in an order keeps the catalog price; a price-change consent is a store_notice")
    func unreadableMoneyAndConsent() async throws {
        try await Self.run { c in
            let o = "GPA.2100-0000-0000-00001"
            c.google.order(
                o,
                [
                    "orderId": .string(o), "purchaseToken": "tok-mn", "state": "PROCESSED",
                    "total": ["currencyCode": "USD", "units": "abc", "nanos": 0],
                ])
            c.google.set("tok-mn", Self.purchase(order: o, start: "2026-03-01T10:00:00Z", expiry: "2026-04-01T10:00:00Z", account: "user-mn"))
            try await Self.send(c, Self.push(id: "mn1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-mn"))
            #expect(try await Self.events(c, "user-mn").first?.objectValue("data")?["price_minor"] == 999)
            c.google.set(
                "tok-mn",
                Self.purchase(order: o, start: "2026-03-01T10:00:00Z", expiry: "2026-04-01T10:00:00Z", account: "user-mn", acknowledged: true))
            try await Self.send(c, Self.push(id: "mn2", at: "2026-03-05T00:00:00Z", type: 19, token: "tok-mn"))
            let notice = try await Self.events(c, "user-mn").last
            #expect(notice?["type"] == "store_notice")
            #expect(notice?.objectValue("data")?["kind"] == "price_increase_consent")
        }
    }

    @Test("a push is answered once it is in the inbox, before a hanging Play API answers")
    func pubsubDeadline() async throws {
        try await Self.run { c in
            c.google.set("tok-hg", Self.purchase(order: "GPA.2200-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-hg"))
            c.google.state.withLock { $0.delay = .seconds(3) }
            let clock = ContinuousClock()
            let started = clock.now
            let r = try await Self.send(c, Self.push(id: "hg1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-hg"), settle: false)
            #expect(clock.now - started < .seconds(2))
            #expect(r.status.code >= 200 && r.status.code < 300)
            #expect(try await Self.inbox(c)["hg1"] != nil)
            c.google.state.withLock { $0.delay = .zero }
            var applied = false
            for _ in 0..<80 where !applied {
                try await Task.sleep(for: .milliseconds(100))
                applied = try await Self.inbox(c)["hg1"] == "applied"
            }
            #expect(applied)
        }
    }
}
