import Foundation
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
        let renewed = try GoogleSubscriptionMapper.resolve(try Self.notification(type: 2), purchase: Self.state("SUBSCRIPTION_STATE_ACTIVE"))
        #expect(renewed.drafts.map(\.type) == [.renewal])
        #expect(renewed.drafts.map(\.idempotencyKey) == ["google:order:GPA.1..0"])
        #expect(renewed.drafts.first?.originalTransactionID == "GPA.1")
        #expect(renewed.environment == .production && renewed.acknowledgeProductID == nil)
        let again = try GoogleSubscriptionMapper.resolve(try Self.notification(type: 2), purchase: Self.state("SUBSCRIPTION_STATE_ACTIVE"))
        #expect(again.drafts == renewed.drafts)

        let first = try GoogleSubscriptionMapper.resolve(
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

        let hold = try GoogleSubscriptionMapper.resolve(try Self.notification(type: 5), purchase: Self.state("SUBSCRIPTION_STATE_ON_HOLD"))
        #expect(hold.drafts.map(\.type) == [.expiration] && hold.drafts.first?.data["reason"] == "billing")
        let grace = try GoogleSubscriptionMapper.resolve(
            try Self.notification(type: 6), purchase: Self.state("SUBSCRIPTION_STATE_IN_GRACE_PERIOD", expiry: "2026-04-08T10:00:00Z"))
        #expect(grace.drafts.first?.type == .billingIssue && grace.drafts.first?.data["grace_until"] == "2026-04-08T10:00:00Z")
        let pending = try GoogleSubscriptionMapper.resolve(
            try Self.notification(type: 4), purchase: Self.state("SUBSCRIPTION_STATE_PENDING", order: nil))
        #expect(pending.drafts.isEmpty, "no access until paid")
        let deferred = try GoogleSubscriptionMapper.resolve(
            try Self.notification(type: 9), purchase: Self.state("SUBSCRIPTION_STATE_ACTIVE", order: "GPA.1..0", expiry: "2026-06-01T10:00:00Z"))
        #expect(deferred.drafts.map(\.type) == [.renewal, .credit])
        #expect(deferred.drafts.last?.data["window_end"] == "2026-06-01T10:00:00Z")
        let revoked = try GoogleSubscriptionMapper.resolve(try Self.notification(type: 12), purchase: Self.state("SUBSCRIPTION_STATE_EXPIRED"))
        #expect(revoked.drafts.map(\.idempotencyKey).contains("google:refund:GPA.1..0"))

        #expect(throws: StoreMappingError.self) {
            try GoogleSubscriptionMapper.resolve(try Self.notification(type: 2), purchase: ["subscriptionState": "SUBSCRIPTION_STATE_ACTIVE"])
        }
        #expect(throws: StoreMappingError.self) {
            try GoogleSubscriptionMapper.resolve(
                try Self.notification(type: 2), purchase: Self.state("SUBSCRIPTION_STATE_ACTIVE", order: String(repeating: "9", count: 300)))
        }
        #expect(GoogleSubscriptionMapper.baseOrder("GPA.1234-5678-9012-34567..12") == "GPA.1234-5678-9012-34567")
        let end = try Timestamp(rfc3339: "2026-03-31T10:00:00Z")
        #expect(GoogleSubscriptionMapper.periodStart(expiry: end, period: ISODuration("P1M")!)?.rfc3339 == "2026-02-28T10:00:00Z")
        #expect(GoogleSubscriptionMapper.periodStart(expiry: end, period: ISODuration("P1W")!)?.rfc3339 == "2026-03-24T10:00:00Z")
        #expect(GoogleSubscriptionMapper.periodStart(expiry: end, period: ISODuration("P999999Y")!) == nil)
        #expect(GoogleSubscriptionMapper.periodStart(expiry: Timestamp.minimum, period: ISODuration("P1M")!) == nil)
        let late = GoogleSubscriptionMapper.withCatalogPeriod(renewed.drafts[0], period: ISODuration("P1M"))
        let april = try Timestamp(rfc3339: "2026-04-01T10:00:00Z")
        #expect(late.data["period_start"] == "2026-04-01T10:00:00Z")
        #expect(late.occurredAt == april)
    }
}
