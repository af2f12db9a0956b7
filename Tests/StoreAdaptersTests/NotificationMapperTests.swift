import AppleStore
import Foundation
import LedgerCore
import StoreAdapters
import Testing

/// Signed notifications of every type, through verification, mapping and catalog completion.
struct SignedNotifications {
    let signer: AppleTestSigner
    let reader: AppleNotificationReader
    static let products: [String: Product] = [
        "pro.monthly": Product(
            productID: "pro.monthly", revision: 1, entitlements: ["pro"], kind: .autoRenewable, period: ISODuration("P1M"),
            priceMinor: 999, currency: "USD", commissionRate: JSONNumber(jsonText: "0.3")!)
    ]

    init() throws {
        signer = try AppleTestSigner()
        reader = AppleNotificationReader(verifier: try AppleJWSVerifier(rootsDER: [signer.rootDER]), bundleID: "com.example.app")
    }

    static func t(_ s: String) -> Timestamp { try! Timestamp(rfc3339: s) }
    static func ms(_ s: String) -> JSONValue { .number(JSONNumber(t(s).microseconds / 1000)) }

    static func transaction(_ txn: String, original: String = "1000", from: String, to: String, extra: [String: JSONValue] = [:]) -> [String:
        JSONValue]
    {
        var t: [String: JSONValue] = [
            "transactionId": .string(txn), "originalTransactionId": .string(original), "productId": "pro.monthly",
            "purchaseDate": ms(from), "expiresDate": ms(to), "type": "Auto-Renewable Subscription", "price": 9990,
            "currency": "USD", "appAccountToken": "7e3fb20b-4cdb-47cc-936d-99d65f608138", "inAppOwnershipType": "PURCHASED",
        ]
        for (k, v) in extra { t[k] = v }
        return t
    }

    func events(
        _ type: String, _ subtype: String? = nil, at: String, transaction: [String: JSONValue]? = nil,
        renewal: [String: JSONValue]? = nil, paidUntil: String? = nil
    ) async throws -> [NewEvent] {
        let body = signer.notificationBody(
            type: type, subtype: subtype, signedDate: Self.t(at), transaction: transaction, renewal: renewal)
        let n = try await reader.read(signedPayload: body.objectValue!["signedPayload"]!.stringValue!, now: Self.t(at))
        let drafts = try AppleNotificationMapper.recordedDrafts(for: n, paidUntil: paidUntil.map(Self.t))
        return try DraftCompletion.complete(drafts, subscriberID: n.appAccountToken ?? "nobody", products: Self.products)
    }
}

@Suite("App Store notifications → ledger events")
struct NotificationMapperTests {
    typealias N = SignedNotifications

    @Test("SUBSCRIBED is a purchase: milliunits become minor units, the catalog completes it")
    func subscribed() async throws {
        let s = try N()
        let e = try await s.events(
            "SUBSCRIBED", "INITIAL_BUY", at: "2026-03-01T10:00:01Z",
            transaction: N.transaction(
                "1000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z",
                extra: ["offerType": 1, "offerDiscountType": "FREE_TRIAL"]))
        #expect(e.count == 1)
        #expect(e[0].type == .purchase)
        #expect(e[0].subscriberID == "7e3fb20b-4cdb-47cc-936d-99d65f608138")
        #expect(e[0].source == "apple" && e[0].environment == .production)
        #expect(e[0].idempotencyKey == "apple:txn:1000")
        #expect(e[0].data["price_minor"] == 999)
        #expect(e[0].data["entitlements"] == ["pro"])
        #expect(e[0].data["offer"] == "trial")
        #expect(e[0].data["period_end"] == "2026-04-01T10:00:00Z")
        #expect(e[0].metadata["raw"] != nil)
    }

    @Test("DID_RENEW is a renewal of the original transaction")
    func didRenew() async throws {
        let e = try await N().events(
            "DID_RENEW", at: "2026-04-01T10:00:01Z",
            transaction: N.transaction("1001", from: "2026-04-01T10:00:00Z", to: "2026-05-01T10:00:00Z"))
        #expect(e.map(\.type) == [.renewal])
        #expect(e[0].data["offer"] == "none")
    }

    @Test("REFUND: full, prorated by revocationPercentage, and family revoke as a cancellation")
    func refunds() async throws {
        let s = try N()
        let full = try await s.events(
            "REFUND", at: "2026-03-10T00:00:00Z",
            transaction: N.transaction(
                "1000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z",
                extra: ["revocationDate": N.ms("2026-03-10T00:00:00Z"), "revocationReason": 1, "revocationType": "REFUND_FULL"]))
        #expect(full.map(\.type) == [.refund])
        #expect(full[0].data["amount_minor"] == 999)
        #expect(full[0].occurredAt == N.t("2026-03-10T00:00:00Z"))
        #expect(full[0].idempotencyKey == "apple:refund:1000")
        let prorated = try await s.events(
            "REFUND", at: "2026-03-10T00:00:00Z",
            transaction: N.transaction(
                "1000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z",
                extra: ["revocationDate": N.ms("2026-03-10T00:00:00Z"), "revocationType": "REFUND_PRORATED", "revocationPercentage": 50000]))
        #expect(prorated[0].data["amount_minor"] == 500)  // 999 × 50% = 499.5, half up
        let family = try await s.events(
            "REFUND", at: "2026-03-10T00:00:00Z",
            transaction: N.transaction(
                "1000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z",
                extra: ["revocationDate": N.ms("2026-03-10T00:00:00Z"), "revocationType": "FAMILY_REVOKE"]))
        #expect(family.map(\.type) == [.cancellation])
        #expect(family[0].data["reason"] == "family_revoked")
        #expect(family[0].data["entitlements"] == ["pro"])
    }

    @Test("every other mapped type and subtype")
    func otherTypes() async throws {
        let s = try N()
        let txn = N.transaction("1000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z")
        let renewalInfo: [String: JSONValue] = [
            "originalTransactionId": "1000", "productId": "pro.monthly", "autoRenewProductId": "pro.monthly", "autoRenewStatus": 0,
            "gracePeriodExpiresDate": N.ms("2026-04-17T10:00:00Z"),
        ]
        let cases: [(String, String?, EventType, [String: JSONValue])] = [
            ("REFUND_REVERSED", nil, .refundReversal, ["transaction_id": "1000"]),
            ("REVOKE", nil, .cancellation, ["reason": "family_revoked"]),
            ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", .autoRenewChanged, ["enabled": false]),
            ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", .autoRenewChanged, ["enabled": true]),
            ("DID_FAIL_TO_RENEW", "GRACE_PERIOD", .billingIssue, ["grace_until": "2026-04-17T10:00:00Z"]),
            ("DID_FAIL_TO_RENEW", nil, .billingIssue, [:]),
            ("EXPIRED", "VOLUNTARY", .expiration, ["reason": "voluntary"]),
            ("EXPIRED", "BILLING_RETRY", .expiration, ["reason": "billing"]),
            ("EXPIRED", "PRICE_INCREASE", .expiration, ["reason": "price_increase"]),
            ("EXPIRED", "PRODUCT_NOT_FOR_SALE", .expiration, ["reason": "product_unavailable"]),
            ("GRACE_PERIOD_EXPIRED", nil, .expiration, ["reason": "billing"]),
        ]
        for (type, subtype, expected, fields) in cases {
            let e = try await s.events(type, subtype, at: "2026-04-01T10:00:00Z", transaction: txn, renewal: renewalInfo)
            #expect(e.map(\.type) == [expected], "\(type) \(subtype ?? "")")
            for (k, v) in fields { #expect(e.first?.data[k] == v, "\(type) \(subtype ?? "") \(k)") }
            if type == "DID_FAIL_TO_RENEW" && subtype == nil { #expect(e.first?.data["grace_until"] == nil) }
        }
        // An extension is the time from the old expiry (the ledger's record of the transaction) to the new one.
        let extended = try await s.events(
            "RENEWAL_EXTENDED", at: "2026-03-20T00:00:00Z",
            transaction: N.transaction("1000", from: "2026-03-01T10:00:00Z", to: "2026-04-08T10:00:00Z"), paidUntil: "2026-04-01T10:00:00Z")
        #expect(extended.map(\.type) == [.credit])
        #expect(extended[0].data["entitlement"] == "pro")
        #expect(extended[0].data["window_start"] == "2026-04-01T10:00:00Z", "not the notification's time: that is paid for")
        #expect(extended[0].data["window_end"] == "2026-04-08T10:00:00Z")
        let unknownPaid = try await s.events(
            "RENEWAL_EXTENDED", at: "2026-03-20T00:00:00Z",
            transaction: N.transaction("1000", from: "2026-03-01T10:00:00Z", to: "2026-04-08T10:00:00Z"))
        #expect(unknownPaid.map(\.type) == [.storeNotice], "the old expiry is not known: no credit over paid time")
        #expect(unknownPaid.first?.data["kind"] == "renewal_extended")
        for inboxOnly in ["TEST", "EXTERNAL_PURCHASE_TOKEN", "RENEWAL_EXTENSION", "SOMETHING_NEW"] {
            #expect(try await s.events(inboxOnly, at: "2026-04-01T10:00:00Z", transaction: txn).isEmpty, "\(inboxOnly)")
        }
        // Facts of record without a window: one store_notice each, keyed by the notification.
        let notices: [(String, String?, String)] = [
            ("CONSUMPTION_REQUEST", nil, "consumption_request"), ("REFUND_DECLINED", nil, "refund_declined"),
            ("PRICE_INCREASE", "ACCEPTED", "price_increase_consent"), ("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", "renewal_preference_changed"),
            ("OFFER_REDEEMED", "DOWNGRADE", "offer_redeemed"),
        ]
        for (type, subtype, kind) in notices {
            let e = try await s.events(type, subtype, at: "2026-04-01T10:00:00Z", transaction: txn)
            #expect(e.map(\.type) == [.storeNotice], "\(type)")
            #expect(e.first?.data["kind"] == .string(kind), "\(type)")
            #expect(e.first?.data["store"] == "apple" && e.first?.data["transaction_id"] == txn["transactionId"], "\(type)")
            #expect(e.first?.idempotencyKey.hasPrefix("apple:notice:") == true, "\(type)")
        }
        // An immediate upgrade and a redeemed offer on a new purchase carry the transaction: the same purchase
        // or renewal SUBSCRIBED/DID_RENEW bring (same key), plus the notice.
        let upgrade = try await s.events("DID_CHANGE_RENEWAL_PREF", "UPGRADE", at: "2026-04-01T10:00:00Z", transaction: txn)
        #expect(upgrade.map(\.type) == [.purchase, .storeNotice])
        #expect(upgrade[0].idempotencyKey == "apple:txn:\(txn["transactionId"]!.stringValue!)")
        let offer = try await s.events("OFFER_REDEEMED", "INITIAL_BUY", at: "2026-04-01T10:00:00Z", transaction: txn)
        #expect(offer.map(\.type) == [.purchase, .storeNotice])
        let oneTime = try await s.events(
            "ONE_TIME_CHARGE", at: "2026-04-01T10:00:00Z",
            transaction: N.transaction(
                "3000", original: "3000", from: "2026-04-01T09:00:00Z", to: "2026-04-01T09:00:00Z",
                extra: ["type": "Non-Consumable", "expiresDate": .null]))
        #expect(oneTime.map(\.type) == [.purchase])
        #expect(oneTime.first?.data["kind"] == "lifetime")
    }

    @Test("sandbox environments map to sandbox; prices in zero- and three-decimal currencies")
    func environmentsAndCurrencies() throws {
        #expect(try AppleNotificationMapper.minorUnits(milli: 10990, currency: "USD") == 1099)
        #expect(try AppleNotificationMapper.minorUnits(milli: 1_200_000, currency: "JPY") == 1200)
        #expect(try AppleNotificationMapper.minorUnits(milli: 1_234, currency: "KWD") == 1234)
        #expect(try AppleNotificationMapper.minorUnits(milli: 10995, currency: "EUR") == 1100)
    }

    @Test("a notification whose product the catalog lacks is refused by field")
    func unknownProduct() async throws {
        let s = try N()
        var txn = N.transaction("1000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z")
        txn["productId"] = "unknown.product"
        let error = await #expect(throws: EventValidationError.self) {
            _ = try await s.events("SUBSCRIBED", at: "2026-03-01T10:00:00Z", transaction: txn)
        }
        #expect(error?.field == "events[0].data.product_id")
    }
}
