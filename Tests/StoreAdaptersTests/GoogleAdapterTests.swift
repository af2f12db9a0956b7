import Foundation
import GoogleStore
import LedgerCore
import StoreAdapters
import Testing
import _CryptoExtras

/// The pure parts of the Google Play adapter: OIDC verification, reading pushes, the state mapping.
@Suite("Google Play adapter")
struct GoogleAdapterTests {
    static let key = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    static let now: Int64 = 1_780_000_000

    static func b64url(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func jwks() throws -> GoogleJWKS {
        let p = try key.publicKey.getKeyPrimitives()
        let doc: JSONValue = [
            "keys": [
                ["kid": "k1", "kty": "RSA", "n": .string(b64url(p.modulus)), "e": .string(b64url(p.publicExponent))],
                ["kid": "ec", "kty": "EC", "crv": "P-256"],
            ]
        ]
        return try GoogleJWKS(json: doc.canonicalBytes())
    }

    static func token(header: [String: JSONValue] = ["alg": "RS256", "kid": "k1"], claims overrides: [String: JSONValue] = [:]) throws -> String {
        var claims: [String: JSONValue] = [
            "iss": "accounts.google.com", "aud": "aud-1", "email": "push@p.iam.gserviceaccount.com", "email_verified": true,
            "iat": .number(JSONNumber(now - 5)), "exp": .number(JSONNumber(now + 3600)),
        ]
        for (k, v) in overrides { claims[k] = v }
        let input = b64url(JSONValue.object(header).canonicalBytes()) + "." + b64url(JSONValue.object(claims).canonicalBytes())
        return input + "." + b64url(try key.signature(for: Array(input.utf8), padding: .insecurePKCS1v1_5).rawRepresentation)
    }

    static let verifier = GoogleOIDCVerifier(audience: "aud-1", serviceAccountEmail: "push@p.iam.gserviceaccount.com")

    @Test("a Pub/Sub OIDC token verifies; every claim that is wrong refuses it")
    func oidc() throws {
        let keys = try Self.jwks()
        #expect(keys.keys.count == 1, "non-RSA keys are skipped")
        _ = try Self.verifier.verify(try Self.token(), keys: keys, now: Self.now)
        _ = try Self.verifier.verify(try Self.token(claims: ["aud": ["other", "aud-1"]]), keys: keys, now: Self.now)
        let refused: [String] = [
            try Self.token(header: ["alg": "none", "kid": "k1"]),
            try Self.token(header: ["alg": "RS256", "kid": "unknown"]),
            try Self.token(header: ["alg": "HS256", "kid": "k1"]),
            try Self.token(claims: ["iss": "https://accounts.example.com"]),
            try Self.token(claims: ["aud": "aud-2"]),
            try Self.token(claims: ["email": "other@p.iam.gserviceaccount.com"]),
            try Self.token(claims: ["email_verified": false]),
            try Self.token(claims: ["exp": .number(JSONNumber(Self.now - 120))]),
            try Self.token(claims: ["exp": .null]),
            try Self.token(claims: ["iat": .number(JSONNumber(Self.now + 3600))]),
            String(try Self.token().dropLast(4)) + "AAAA",
            "a.b", "", String(repeating: "a", count: 9000),
        ]
        for t in refused {
            #expect(throws: GoogleTokenError.self) { try Self.verifier.verify(t, keys: keys, now: Self.now) }
        }
        #expect(GoogleOIDCVerifier.keyID(of: try Self.token()) == "k1")
        #expect(GoogleOIDCVerifier.keyID(of: "garbage") == nil)
    }

    static func push(_ n: JSONValue, id: JSONValue = "m-1") -> [String: JSONValue] {
        ["message": ["data": .string(Data(n.canonicalBytes()).base64EncodedString()), "messageId": id]]
    }

    @Test("pushes are read with limits and clear field names")
    func pushes() throws {
        let n = try GoogleNotification(
            pushBody: Self.push([
                "packageName": "com.example", "eventTimeMillis": "1780000000123",
                "subscriptionNotification": ["notificationType": 4, "purchaseToken": "tok", "subscriptionId": "pro.monthly"],
            ]))
        #expect(n.kind == "subscription" && n.subtype == "4" && n.purchaseToken == "tok" && n.productID == "pro.monthly")
        #expect(n.eventTime == Timestamp(microseconds: 1_780_000_000_123_000))
        let voided = try GoogleNotification(
            pushBody: Self.push([
                "packageName": "com.example", "eventTimeMillis": "1780000000123",
                "voidedPurchaseNotification": ["purchaseToken": "tok", "orderId": "GPA.1", "productType": 1, "refundType": 1],
            ]))
        #expect(voided.kind == "voided_purchase" && voided.orderID == "GPA.1")
        let test = try GoogleNotification(
            pushBody: Self.push(["packageName": "com.example", "eventTimeMillis": 1, "testNotification": ["version": "1.0"]]))
        #expect(test.kind == "test" && !test.needsAPI)

        func field(_ body: [String: JSONValue]) -> String? {
            do {
                _ = try GoogleNotification(pushBody: body)
                return nil
            } catch {
                return error.field
            }
        }
        #expect(field([:]) == "message")
        #expect(field(["message": ["data": "e30=", "messageId": ""]]) == "message.messageId")
        #expect(
            field(Self.push(["packageName": "p", "eventTimeMillis": "1"], id: .string(String(repeating: "x", count: 201)))) == "message.messageId")
        #expect(field(["message": ["data": "%%%", "messageId": "m"]]) == "message.data")
        #expect(field(["message": ["data": .string(Data("[1]".utf8).base64EncodedString()), "messageId": "m"]]) == "message.data")
        #expect(field(Self.push(["eventTimeMillis": "1"])) == "message.data.packageName")
        #expect(field(Self.push(["packageName": "p", "eventTimeMillis": "9223372036854775807"])) == "message.data.eventTimeMillis")
        #expect(field(Self.push(["packageName": "p", "eventTimeMillis": "-99999999999999999"])) == "message.data.eventTimeMillis")
        #expect(
            field(Self.push(["packageName": "p", "eventTimeMillis": "1", "subscriptionNotification": ["notificationType": 4]]))
                == "message.data.subscriptionNotification.purchaseToken")
        #expect(
            field(
                Self.push([
                    "packageName": "p", "eventTimeMillis": "1",
                    "subscriptionNotification": ["notificationType": 4, "purchaseToken": .string(String(repeating: "t", count: 1025))],
                ])) == "message.data.subscriptionNotification.purchaseToken")
        #expect(
            field(Self.push(["packageName": "p", "eventTimeMillis": "1", "voidedPurchaseNotification": ["purchaseToken": "t"]]))
                == "message.data.voidedPurchaseNotification")
    }

    @Test("Google's RFC 3339 times with nanoseconds")
    func times() {
        #expect(GoogleTime.parse("2026-03-01T10:00:00.123456789Z")?.rfc3339 == "2026-03-01T10:00:00.123456Z")
        #expect(GoogleTime.parse("2026-03-01T10:00:00Z")?.rfc3339 == "2026-03-01T10:00:00Z")
        #expect(GoogleTime.parse("2026-03-01T10:00:00.5Z")?.rfc3339 == "2026-03-01T10:00:00.500Z")
        #expect(GoogleTime.parse("yesterday") == nil)
        #expect(GoogleTime.parse(nil) == nil)
        #expect(GoogleTime.millis(Int64.max) == nil)
    }

    @Test("Google's Money in minor units: exponents, rounding, hostile values")
    func money() {
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "USD", "units": "9", "nanos": 990_000_000])! == (999, "USD"))
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "JPY", "units": "1200"])! == (1200, "JPY"))
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "KWD", "units": "1", "nanos": 234_500_000])! == (1235, "KWD"))
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "USD", "units": "0", "nanos": 4_999_999])! == (0, "USD"))
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "USD", "units": "92233720368547758"]) == nil)
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "USD", "units": "-1"]) == nil)
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "USD", "nanos": 1_000_000_000]) == nil)
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "dollars", "units": "1"]) == nil)
        #expect(GoogleOrderPricing.minorUnits(nil) == nil)
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "USD", "units": "abc"]) == nil, "unreadable is no price, not 0")
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "USD", "units": "12345678901234567890"]) == nil)
        #expect(GoogleOrderPricing.minorUnits(["currencyCode": "USD", "units": "1", "nanos": "x"]) == nil)
        var draft = EventDraft(
            type: .purchase, occurredAt: .minimum, environment: .production, idempotencyKey: "k", productID: "p", originalTransactionID: nil,
            data: [:], metadata: [:])
        GoogleOrderPricing.recordedApply(order: ["total": ["currencyCode": "USD", "units": "abc"]], to: &draft)
        #expect(draft.data["price_minor"] == nil, "the catalog's price stands")
    }

    static func notification(type: Int, at: String = "2026-04-01T10:00:00Z") throws -> GoogleNotification {
        try GoogleNotification(
            messageID: "m-\(type)",
            notification: [
                "packageName": "com.example", "eventTimeMillis": .string(String(try Timestamp(rfc3339: at).microseconds / 1000)),
                "subscriptionNotification": ["notificationType": .number(JSONNumber(Int64(type))), "purchaseToken": "tok"],
            ])
    }

    static func state(_ s: String, order: String? = "GPA.1..0", expiry: String = "2026-05-01T10:00:00Z", extra: [String: JSONValue] = [:]) -> [String:
        JSONValue]
    {
        var item: [String: JSONValue] = ["productId": "pro.monthly", "expiryTime": .string(expiry), "autoRenewingPlan": ["autoRenewEnabled": true]]
        if let order { item["latestSuccessfulOrderId"] = .string(order) }
        var p: [String: JSONValue] = ["subscriptionState": .string(s), "startTime": "2026-03-01T10:00:00Z", "lineItems": [.object(item)]]
        for (k, v) in extra { p[k] = v }
        return p
    }

    @Test("the state mapping: keys from Google's order ids, the same state twice gives the same drafts")
    func mapping() throws {
        let renewed = try GoogleSubscriptionMapper.recordedResolve(try Self.notification(type: 2), purchase: Self.state("SUBSCRIPTION_STATE_ACTIVE"))
        #expect(renewed.drafts.map(\.type) == [.renewal])
        #expect(renewed.drafts.map(\.idempotencyKey) == ["google:order:GPA.1..0"])
        #expect(renewed.drafts.first?.originalTransactionID == "GPA.1")
        #expect(renewed.environment == .production && renewed.acknowledgeProductID == nil)
        let again = try GoogleSubscriptionMapper.recordedResolve(try Self.notification(type: 2), purchase: Self.state("SUBSCRIPTION_STATE_ACTIVE"))
        #expect(again.drafts == renewed.drafts)

        let first = try GoogleSubscriptionMapper.recordedResolve(
            try Self.notification(type: 4, at: "2026-03-01T10:00:01Z"),
            purchase: Self.state(
                "SUBSCRIPTION_STATE_ACTIVE", order: "GPA.1",
                extra: [
                    "acknowledgementState": "ACKNOWLEDGEMENT_STATE_PENDING", "testPurchase": [:],
                    "externalAccountIdentifiers": ["obfuscatedExternalAccountId": "user-9"],
                ]))
        #expect(first.drafts.map(\.type) == [.purchase])
        #expect(first.drafts.first?.data["period_start"] == "2026-03-01T10:00:00Z")
        #expect(first.environment == .sandbox && first.drafts.allSatisfy { $0.environment == .sandbox })
        #expect(first.acknowledgeProductID == "pro.monthly" && first.subscriberHint == "user-9")

        let hold = try GoogleSubscriptionMapper.recordedResolve(try Self.notification(type: 5), purchase: Self.state("SUBSCRIPTION_STATE_ON_HOLD"))
        #expect(hold.drafts.map(\.type) == [.expiration] && hold.drafts.first?.data["reason"] == "billing")
        let grace = try GoogleSubscriptionMapper.recordedResolve(
            try Self.notification(type: 6), purchase: Self.state("SUBSCRIPTION_STATE_IN_GRACE_PERIOD", expiry: "2026-04-08T10:00:00Z"))
        #expect(grace.drafts.first?.type == .billingIssue && grace.drafts.first?.data["grace_until"] == "2026-04-08T10:00:00Z")
        let pending = try GoogleSubscriptionMapper.recordedResolve(
            try Self.notification(type: 4), purchase: Self.state("SUBSCRIPTION_STATE_PENDING", order: nil))
        #expect(pending.drafts.isEmpty, "no access until paid")
        let deferred = try GoogleSubscriptionMapper.recordedResolve(
            try Self.notification(type: 9), purchase: Self.state("SUBSCRIPTION_STATE_ACTIVE", order: "GPA.1..0", expiry: "2026-06-01T10:00:00Z"),
            orders: ["GPA.1..0": Self.order("GPA.1..0", "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z")])
        #expect(deferred.drafts.map(\.type) == [.renewal, .credit])
        #expect(deferred.drafts.first?.data["period_end"] == "2026-05-01T10:00:00Z", "the paid period, not the deferred expiry")
        #expect(deferred.drafts.last?.data["window_start"] == "2026-05-01T10:00:00Z", "from the old expiry, not the notification")
        #expect(deferred.drafts.last?.data["window_end"] == "2026-06-01T10:00:00Z")
        let unknown = try GoogleSubscriptionMapper.recordedResolve(
            try Self.notification(type: 9), purchase: Self.state("SUBSCRIPTION_STATE_ACTIVE", order: "GPA.1..0", expiry: "2026-06-01T10:00:00Z"))
        #expect(unknown.drafts.map(\.type).contains(.storeNotice) && !unknown.drafts.map(\.type).contains(.credit))
        let revoked = try GoogleSubscriptionMapper.recordedResolve(
            try Self.notification(type: 12), purchase: Self.state("SUBSCRIPTION_STATE_EXPIRED"))
        #expect(revoked.drafts.map(\.idempotencyKey).contains("google:refund:GPA.1..0"))

        #expect(throws: StoreMappingError.self) {
            try GoogleSubscriptionMapper.recordedResolve(try Self.notification(type: 2), purchase: ["subscriptionState": "SUBSCRIPTION_STATE_ACTIVE"])
        }
        #expect(throws: StoreMappingError.self) {
            try GoogleSubscriptionMapper.recordedResolve(
                try Self.notification(type: 2), purchase: Self.state("SUBSCRIPTION_STATE_ACTIVE", order: String(repeating: "9", count: 300)))
        }
        #expect(GoogleSubscriptionMapper.baseOrder("GPA.1234-5678-9012-34567..12") == "GPA.1234-5678-9012-34567")
        let end = try Timestamp(rfc3339: "2026-03-31T10:00:00Z")
        #expect(GoogleSubscriptionMapper.periodStart(expiry: end, period: ISODuration("P1M")!)?.rfc3339 == "2026-02-28T10:00:00Z")
        #expect(GoogleSubscriptionMapper.periodStart(expiry: end, period: ISODuration("P1W")!)?.rfc3339 == "2026-03-24T10:00:00Z")
        #expect(GoogleSubscriptionMapper.periodStart(expiry: end, period: ISODuration("P999999Y")!) == nil)
        #expect(GoogleSubscriptionMapper.periodStart(expiry: Timestamp.minimum, period: ISODuration("P1M")!) == nil)
    }

    /// An `Order` with one subscription line item and its service period.
    static func order(_ id: String, _ start: String, _ end: String, product: String = "pro.monthly") -> [String: JSONValue] {
        [
            "orderId": .string(id), "state": "PROCESSED", "total": ["currencyCode": "USD", "units": "9", "nanos": 990_000_000],
            "lineItems": [
                [
                    "productId": .string(product), "total": ["currencyCode": "USD", "units": "9", "nanos": 990_000_000],
                    "subscriptionDetails": ["servicePeriodStartTime": .string(start), "servicePeriodEndTime": .string(end)],
                ]
            ],
        ]
    }

    @Test("a late renewal is recorded over its order's period; month ends come from the order or the previous expiry")
    func lateAndMonthEnd() throws {
        // Learned weeks after its period ended, and the subscription has expired since.
        let late = try GoogleSubscriptionMapper.recordedResolve(
            try Self.notification(type: 2, at: "2026-05-20T00:00:00Z"), purchase: Self.state("SUBSCRIPTION_STATE_EXPIRED"),
            orders: ["GPA.1..0": Self.order("GPA.1..0", "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z")])
        #expect(late.drafts.map(\.type) == [.renewal])
        #expect(late.drafts.first?.data["period_start"] == "2026-04-01T10:00:00Z")
        #expect(late.drafts.first?.occurredAt == (try Timestamp(rfc3339: "2026-04-01T10:00:00Z")))
        #expect(late.drafts.first?.data["price_minor"] == 999)
        // Without any order, the catalog period still records it.
        let bare = try GoogleSubscriptionMapper.recordedResolve(
            try Self.notification(type: 2, at: "2026-05-20T00:00:00Z"), purchase: Self.state("SUBSCRIPTION_STATE_EXPIRED"),
            periods: ["pro.monthly": ISODuration("P1M")!])
        #expect(bare.drafts.first?.data["period_start"] == "2026-04-01T10:00:00Z")
        // Jan 30 → Feb 28: the previous order's end, not Feb 28 less a month.
        let clamped = try GoogleSubscriptionMapper.recordedResolve(
            try Self.notification(type: 2, at: "2026-01-30T10:00:05Z"),
            purchase: Self.state("SUBSCRIPTION_STATE_ACTIVE", order: "GPA.1..0", expiry: "2026-02-28T10:00:00Z"),
            orders: ["GPA.1": Self.order("GPA.1", "2025-12-30T10:00:00Z", "2026-01-30T10:00:00Z")], periods: ["pro.monthly": ISODuration("P1M")!])
        #expect(clamped.drafts.first?.data["period_start"] == "2026-01-30T10:00:00Z")
        #expect(GoogleSubscriptionMapper.previousOrder("GPA.1..0") == "GPA.1")
        #expect(GoogleSubscriptionMapper.previousOrder("GPA.1..12") == "GPA.1..11")
        #expect(GoogleSubscriptionMapper.previousOrder("GPA.1") == nil)
    }

    @Test("a linked token is a replacement only when Google says the old one was replaced")
    func linkCauses() {
        func plan(_ prepaid: Bool, extra: [String: JSONValue] = [:]) -> [String: JSONValue] {
            var item: [String: JSONValue] = ["productId": "pro.monthly"]
            item[prepaid ? "prepaidPlan" : "autoRenewingPlan"] = [:]
            for (k, v) in extra { item[k] = v }
            return ["lineItems": [.object(item)]]
        }
        var replaced = plan(false)
        replaced["canceledStateContext"] = ["replacementCancellation": [:]]
        #expect(GoogleSubscriptionMapper.linkCause(new: plan(false), old: replaced) == .replacement)
        #expect(
            GoogleSubscriptionMapper.linkCause(
                new: plan(false, extra: ["itemReplacement": ["replacementMode": "WITH_TIME_PRORATION"]]), old: plan(false))
                == .replacement)
        #expect(
            GoogleSubscriptionMapper.linkCause(new: plan(false, extra: ["itemReplacement": ["replacementMode": "DEFERRED"]]), old: plan(false))
                == .resubscription)
        var resigned = plan(false)
        resigned["canceledStateContext"] = ["userInitiatedCancellation": [:]]
        #expect(GoogleSubscriptionMapper.linkCause(new: plan(false), old: resigned) == .resubscription)
        #expect(GoogleSubscriptionMapper.linkCause(new: plan(true), old: plan(true)) == .topUp)
        #expect(GoogleSubscriptionMapper.linkCause(new: plan(false), old: plan(true)) == .conversion)
        #expect(GoogleSubscriptionMapper.linkCause(new: plan(true), old: replaced) == .conversion)
    }

    @Test("two line items of one order are two facts with two keys, each priced by its line item")
    func twoLineItems() throws {
        var p = Self.state("SUBSCRIPTION_STATE_ACTIVE", order: "GPA.2")
        var addon = try #require(p["lineItems"]?.arrayValue?.first?.objectValue)
        addon["productId"] = "addon.monthly"
        p["lineItems"] = .array((p["lineItems"]?.arrayValue ?? []) + [.object(addon)])
        var order = Self.order("GPA.2", "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z")
        var second = try #require(order["lineItems"]?.arrayValue?.first?.objectValue)
        second["productId"] = "addon.monthly"
        second["total"] = ["currencyCode": "USD", "units": "2", "nanos": 990_000_000]
        order["lineItems"] = .array((order["lineItems"]?.arrayValue ?? []) + [.object(second)])
        order["total"] = ["currencyCode": "USD", "units": "12", "nanos": 980_000_000]
        let r = try GoogleSubscriptionMapper.recordedResolve(try Self.notification(type: 4), purchase: p, orders: ["GPA.2": order])
        #expect(r.drafts.map(\.idempotencyKey) == ["google:order:GPA.2:pro.monthly", "google:order:GPA.2:addon.monthly"])
        #expect(r.drafts.map { $0.data["price_minor"] } == [999, 299])
    }
}
