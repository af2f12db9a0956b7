import Foundation
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import NIOCore
import Testing

/// RevenueCat's REST API v1 customer info (`GET /v1/subscribers/{app_user_id}`), modelled here from RevenueCat's
/// documentation of that response, independently of the ledger's serializer: required members are
/// non-optional, dates are ISO 8601 as RevenueCat writes them, enumerations closed.
enum RevenueCatV1 {
    struct Response: Decodable {
        let requestDate: Date
        let requestDateMs: Int64
        let subscriber: Subscriber
    }

    struct Subscriber: Decodable {
        let entitlements: [String: Entitlement]
        let firstSeen: Date
        let lastSeen: Date?
        let managementUrl: String?
        let nonSubscriptions: [String: [NonSubscription]]
        let originalAppUserId: String
        let originalApplicationVersion: String?
        let originalPurchaseDate: Date?
        let otherPurchases: [String: OtherPurchase]
        let subscriptions: [String: Subscription]
    }

    struct Entitlement: Decodable {
        let expiresDate: Date?
        let gracePeriodExpiresDate: Date?
        let productIdentifier: String
        let purchaseDate: Date
    }

    enum Store: String, Decodable {
        case appStore = "app_store"
        case macAppStore = "mac_app_store"
        case playStore = "play_store"
        case amazon, stripe, promotional, paddle
        case rcBilling = "rc_billing"
    }

    enum PeriodType: String, Decodable { case normal, trial, intro, promotional }

    enum OwnershipType: String, Decodable {
        case purchased = "PURCHASED"
        case familyShared = "FAMILY_SHARED"
    }

    struct Subscription: Decodable {
        let expiresDate: Date?
        let purchaseDate: Date
        let originalPurchaseDate: Date
        let periodType: PeriodType
        let store: Store
        let isSandbox: Bool
        let unsubscribeDetectedAt: Date?
        let billingIssuesDetectedAt: Date?
        let gracePeriodExpiresDate: Date?
        let refundedAt: Date?
        let ownershipType: OwnershipType
        let autoResumeDate: Date?
        let storeTransactionId: String?
    }

    struct NonSubscription: Decodable {
        let id: String
        let purchaseDate: Date
        let originalPurchaseDate: Date?
        let store: Store
        let isSandbox: Bool
    }

    struct OtherPurchase: Decodable { let purchaseDate: Date }

    static func decode(_ bytes: [UInt8]) throws -> Response {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(Response.self, from: Data(bytes))
    }
}

@Suite("RevenueCat-compatible customer info")
struct RevenueCatCompatAPITests {
    static func get(_ http: any TestClientProtocol, _ api: APIHarness, _ uri: String, role: APIRole? = .reader) async throws -> TestResponse {
        try await http.execute(uri: uri, method: .get, headers: api.headers(role))
    }

    /// The subscriber's compat answer, decoded with RevenueCat's schema, after checking that its entitlements are
    /// the ones `GET /v1/subscribers/{id}/entitlements` answers at its `request_date`; and how many are active.
    static func sameEntitlements(
        _ subscriber: String, _ http: any TestClientProtocol, _ api: APIHarness
    ) async throws -> (RevenueCatV1.Response, Int) {
        let path = subscriber.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? subscriber
        let answer = try await get(http, api, "/v1/compat/revenuecat/subscribers/\(path)")
        #expect(answer.status == .ok)
        let info = try RevenueCatV1.decode(Array(buffer: answer.body))
        #expect(info.subscriber.originalAppUserId == subscriber)
        #expect(abs(info.requestDate.timeIntervalSince1970 * 1000 - Double(info.requestDateMs)) < 1000)
        let at = String(ISO8601DateFormatter().string(from: info.requestDate))
        let ours = try await get(http, api, "/v1/subscribers/\(path)/entitlements?at=\(at)")
        let states = try ours.json.objectValue?["entitlements"]?.arrayValue?.compactMap(\.objectValue) ?? []
        #expect(Set(states.compactMap { $0["entitlement"]?.stringValue }) == Set(info.subscriber.entitlements.keys))
        var active = 0
        for state in states {
            let name = state["entitlement"]!.stringValue!
            let theirs = try #require(info.subscriber.entitlements[name])
            let isActive = theirs.expiresDate.map { $0 > info.requestDate } ?? true
            #expect(isActive == (state["active"] == true), "\(subscriber) \(name)")
            if isActive { active += 1 }
            if let expires = state["expires_at"]?.stringValue {
                let t = try Timestamp(rfc3339: expires)
                #expect(theirs.expiresDate.map { Int64($0.timeIntervalSince1970) } == t.microseconds / 1_000_000, "\(subscriber) \(name)")
            } else if state["active"] == true {
                #expect(theirs.expiresDate == nil)
            }
            if let product = state["product_id"]?.stringValue {
                #expect(theirs.productIdentifier == product)
            } else {
                #expect(theirs.productIdentifier == "rc_promo_\(name)_custom")
            }
            #expect((theirs.gracePeriodExpiresDate != nil) == (state["in_grace"] == true))
        }
        return (info, active)
    }

    @Test(
        "for every subscriber of a generated ledger (credits, packs, refunds and reversals, cancellations, grace): the same entitlements as GET /v1/subscribers/{id}/entitlements"
    )
    func sameEntitlementsGeneratedLedger() async throws {
        // The generated ledger's events, each subscriber's in one of RevenueCat's stores.
        let events = GeneratedLedger.events(seed: 36, subscribers: 80, eventsPerSubscriber: 1...14).map { e in
            let store = ["apple", "google", "stripe"][Int(e.subscriberID.utf8.last! % 3)]
            return NewEvent(
                subscriberID: e.subscriberID, type: e.type, occurredAt: e.occurredAt, source: store, environment: e.environment,
                idempotencyKey: e.idempotencyKey, data: e.data, metadata: e.metadata)
        }
        try await APIHarness.run { http, api in
            try await TestDatabase.run(api.url!.clientConfiguration(maximumConnections: 4)) { owner in
                let store = EventStore(client: owner, logger: TestDatabase.logger)
                _ = try await store.importBatch(events)
                _ = try await Rebuilder(client: owner, logger: TestDatabase.logger).rebuild()
            }
            var subscribers = 0
            for subscriber in Set(events.map(\.subscriberID)).sorted() {
                _ = try await Self.sameEntitlements(subscriber, http, api)
                subscribers += 1
            }
            #expect(subscribers == 80)
        }
    }

    @Test(
        "for every subscriber of a generated RevenueCat history: RevenueCat's own schema decodes the answer, with the entitlements GET /v1/subscribers/{id}/entitlements answers"
    )
    func sameEntitlements() async throws {
        let now = Timestamp(microseconds: Int64(Date().timeIntervalSince1970 * 1_000_000))
        let generator = RevenueCatExportGenerator(seed: 361, subscribers: 120, exportTime: now)
        let csv = RevenueCatExportGenerator.csv(generator.rows, version: .v7)
        try await APIHarness.run { http, api in
            try await TestDatabase.run(api.url!.clientConfiguration(maximumConnections: 4)) { owner in
                let bytes = Array(csv.utf8)
                let done = Flag()
                _ = try await RevenueCatImport(client: owner, logger: TestDatabase.logger).run(
                    [RevenueCatImport.Input(name: "export.csv") { done.once() ? bytes : [] }], options: .init(asOf: now))
            }
            var active = 0
            for subscriber in Set(generator.rows.map(\.appUserID)).sorted() {
                let (info, held) = try await Self.sameEntitlements(subscriber, http, api)
                active += held
                // Every product the subscriber bought is a subscription, in its store.
                let rows = generator.rows.filter { $0.appUserID == subscriber }
                #expect(Set(info.subscriber.subscriptions.keys) == Set(rows.map(\.productID)))
                for (product, subscription) in info.subscriber.subscriptions {
                    let last = rows.filter { $0.productID == product }.max { $0.start < $1.start }!
                    #expect(subscription.store.rawValue == last.store)
                    #expect(subscription.isSandbox == last.isSandbox)
                    #expect(Int64(subscription.purchaseDate.timeIntervalSince1970) == last.start.microseconds / 1_000_000)
                    #expect((subscription.refundedAt != nil) == (last.refundedAt != nil))
                    #expect(subscription.periodType == (last.isTrial ? .trial : .normal))
                }
            }
            #expect(active > 10)
        }
    }

    @Test("a trial, a renewal, auto-renew off and a billing issue read as RevenueCat says them; keys are needed, readers may")
    func scenario() async throws {
        try await APIHarness.run { http, api in
            func post(_ event: JSONValue) async throws {
                let r = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(event))
                #expect(r.status == .created)
            }
            func transaction(_ type: String, _ id: String, _ start: String, _ end: String, offer: String) -> JSONValue {
                [
                    "subscriber_id": "$RCAnonymousID:abc123", "type": .string(type), "occurred_at": .string(start), "source": "apple",
                    "environment": "production", "idempotency_key": .string("apple:txn:\(id)"),
                    "data": [
                        "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": .string(id), "kind": "auto_renewable",
                        "offer": .string(offer), "period_start": .string(start), "period_end": .string(end), "period": "P1M",
                        "price_minor": offer == "trial" ? 0 : 999, "currency": "USD",
                    ],
                ]
            }
            try await post(transaction("purchase", "1000", "2099-01-01T00:00:00Z", "2099-01-08T00:00:00Z", offer: "trial"))
            try await post(transaction("renewal", "1001", "2099-01-08T00:00:00Z", "2099-02-08T00:00:00Z", offer: "none"))
            let path = "/v1/compat/revenuecat/subscribers/$RCAnonymousID:abc123"
            #expect(try await Self.get(http, api, path, role: nil).status == .unauthorized)
            #expect(try await Self.get(http, api, path, role: .analyst).status == .forbidden)
            let future = try RevenueCatV1.decode(Array(buffer: try await Self.get(http, api, path).body))
            // Not yet begun (2099): nothing bought yet, the entitlement is not held yet.
            #expect(future.subscriber.subscriptions.isEmpty)
            let notYet = try #require(future.subscriber.entitlements["pro"])
            #expect(notYet.expiresDate.map { $0 <= future.requestDate } == true)

            // Now a history that has begun.
            let subscriber = "compat-1"
            func event(_ type: String, _ key: String, _ at: String, _ data: JSONValue) -> JSONValue {
                [
                    "subscriber_id": .string(subscriber), "type": .string(type), "occurred_at": .string(at), "source": "google",
                    "environment": "sandbox", "idempotency_key": .string(key), "data": data,
                ]
            }
            try await post(
                event(
                    "purchase", "p1", "2026-01-01T00:00:00Z",
                    [
                        "product_id": "pro.yearly", "entitlements": ["pro"], "transaction_id": "GPA.1", "kind": "auto_renewable",
                        "period_start": "2026-01-01T00:00:00Z", "period_end": "2099-01-01T00:00:00Z", "period": "P1Y",
                        "price_minor": 4999, "currency": "EUR",
                    ]))
            try await post(
                event(
                    "auto_renew_changed", "off1", "2026-02-01T00:00:00Z",
                    ["enabled": false, "product_id": "pro.yearly", "entitlements": ["pro"]]))
            try await post(
                event(
                    "billing_issue", "b1", "2026-03-01T00:00:00Z",
                    ["product_id": "pro.yearly", "entitlements": ["pro"]]))
            try await post(
                event(
                    "purchase", "l1", "2026-01-05T00:00:00Z",
                    [
                        "product_id": "lifetime.pack", "entitlements": ["extras"], "transaction_id": "GPA.2", "kind": "lifetime", "price_minor": 1999,
                        "currency": "EUR",
                    ]))
            let info = try RevenueCatV1.decode(Array(buffer: try await Self.get(http, api, "/v1/compat/revenuecat/subscribers/\(subscriber)").body))
            let pro = try #require(info.subscriber.entitlements["pro"])
            #expect(pro.productIdentifier == "pro.yearly")
            #expect(pro.expiresDate == ISO8601DateFormatter().date(from: "2099-01-01T00:00:00Z"))
            #expect(pro.purchaseDate == ISO8601DateFormatter().date(from: "2026-01-01T00:00:00Z"))
            #expect(info.subscriber.entitlements["extras"]?.expiresDate == nil)
            let sub = try #require(info.subscriber.subscriptions["pro.yearly"])
            #expect(sub.store == .playStore && sub.isSandbox && sub.periodType == .normal)
            #expect(sub.unsubscribeDetectedAt == ISO8601DateFormatter().date(from: "2026-02-01T00:00:00Z"))
            #expect(sub.billingIssuesDetectedAt == ISO8601DateFormatter().date(from: "2026-03-01T00:00:00Z"))
            #expect(sub.refundedAt == nil && sub.storeTransactionId == "GPA.1")
            #expect(info.subscriber.nonSubscriptions["lifetime.pack"]?.count == 1)
            #expect(info.subscriber.managementUrl == "https://play.google.com/store/account/subscriptions")
            #expect(info.subscriber.firstSeen == ISO8601DateFormatter().date(from: "2026-01-01T00:00:00Z"))

            // An unknown subscriber is a new customer: 200, nothing held.
            let unknown = try RevenueCatV1.decode(Array(buffer: try await Self.get(http, api, "/v1/compat/revenuecat/subscribers/nobody").body))
            #expect(unknown.subscriber.entitlements.isEmpty && unknown.subscriber.subscriptions.isEmpty)
        }
    }
}

/// True the first time only.
final class Flag: @unchecked Sendable {
    private var done = false
    func once() -> Bool {
        defer { done = true }
        return !done
    }
}
