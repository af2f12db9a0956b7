import AppleStore
import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import NIOCore
import StoreAdapters
import Testing

@Suite("App Store endpoints over HTTP on PostgreSQL")
struct AppleStoreAPITests {
    static let token = "7e3fb20b-4cdb-47cc-936d-99d65f608138"
    static let product: JSONValue = [
        "entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M", "price_minor": 999, "currency": "USD",
        "commission_rate": "0.15",
    ]

    static func t(_ s: String) -> Timestamp { try! Timestamp(rfc3339: s) }
    static func ms(_ s: String) -> JSONValue { .number(JSONNumber(t(s).microseconds / 1000)) }

    static func txn(_ id: String, from: String, to: String, token: Bool = true, extra: [String: JSONValue] = [:]) -> [String: JSONValue] {
        var t: [String: JSONValue] = [
            "transactionId": .string(id), "originalTransactionId": "5000", "productId": "pro.monthly",
            "purchaseDate": ms(from), "expiresDate": ms(to), "type": "Auto-Renewable Subscription", "price": 9990, "currency": "USD",
        ]
        if token { t["appAccountToken"] = .string(Self.token) }
        for (k, v) in extra { t[k] = v }
        return t
    }

    /// A full refund's REFUND notification, revoked and signed at `at`.
    static func refund(_ signer: AppleTestSigner, _ id: String, from: String, to: String, at: String) -> JSONValue {
        signer.notificationBody(
            type: "REFUND", signedDate: t(at),
            transaction: txn(id, from: from, to: to, extra: ["revocationDate": ms(at), "revocationType": "REFUND_FULL"]))
    }

    func post(_ http: any TestClientProtocol, _ api: APIHarness, _ body: JSONValue, path: String = "notifications") async throws -> TestResponse {
        try await http.execute(uri: "/v1/stores/apple/\(path)", method: .post, headers: api.headers(.writer), body: LedgerServerTests.body(body))
    }

    func pro(_ http: any TestClientProtocol, _ api: APIHarness, subscriber: String = token, at: String) async throws -> [String: JSONValue]? {
        let r = try await http.execute(uri: "/v1/subscribers/\(subscriber)/entitlements?at=\(at)", method: .get, headers: api.headers(.reader))
        return try r.json.objectValue?["entitlements"]?.arrayValue?.first { $0.objectValue?["entitlement"] == "pro" }?.objectValue
    }

    /// The application with pro.monthly in the catalog, and the SUBSCRIBED notification of transaction 5000
    /// (March 2026) signed by the test CA.
    func withPro(
        _ body: @escaping @Sendable (AppleTestSigner, any TestClientProtocol, APIHarness, JSONValue) async throws -> Void
    ) async throws {
        let signer = try AppleTestSigner()
        try await APIHarness.run(appleRootsDER: [signer.rootDER]) { http, api in
            _ = try await http.execute(
                uri: "/v1/catalog/products/pro.monthly", method: .put, headers: api.headers(.admin), body: LedgerServerTests.body(Self.product))
            let subscribed = signer.notificationBody(
                type: "SUBSCRIBED", subtype: "INITIAL_BUY", signedDate: Self.t("2026-03-01T10:00:01Z"),
                transaction: Self.txn("5000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z"))
            try await body(signer, http, api, subscribed)
        }
    }

    @Test("SUBSCRIBED, DID_RENEW, REFUND unlock, extend and cut pro; a duplicate stores nothing; a tampered one is refused")
    func subscribedRenewRefund() async throws {
        try await withPro { signer, http, api, subscribed in
            let first = try await post(http, api, subscribed)
            #expect(first.status == .ok)
            #expect(try first.json.objectValue?["status"] == "applied")
            #expect(try await pro(http, api, at: "2026-03-15T00:00:00Z")?["active"] == true)
            #expect(try await pro(http, api, at: "2026-03-15T00:00:00Z")?["expires_at"] == "2026-04-01T10:00:00Z")

            let duplicate = try await post(http, api, subscribed)
            #expect(duplicate.status == .ok)
            #expect(try duplicate.json.objectValue?["status"] == "duplicate")

            let renew = signer.notificationBody(
                type: "DID_RENEW", signedDate: Self.t("2026-04-01T10:00:01Z"),
                transaction: Self.txn("5001", from: "2026-04-01T10:00:00Z", to: "2026-05-01T10:00:00Z"))
            #expect(try await post(http, api, renew).status == .ok)
            #expect(try await pro(http, api, at: "2026-03-15T00:00:00Z")?["expires_at"] == "2026-05-01T10:00:00Z")

            let refund = Self.refund(signer, "5001", from: "2026-04-01T10:00:00Z", to: "2026-05-01T10:00:00Z", at: "2026-04-10T00:00:00Z")
            #expect(try await post(http, api, refund).status == .ok)
            #expect(try await pro(http, api, at: "2026-04-15T00:00:00Z")?["active"] == false)
            #expect(try await pro(http, api, at: "2026-03-15T00:00:00Z")?["expires_at"] == "2026-04-10T00:00:00Z")

            let stream = try await http.execute(uri: "/v1/subscribers/\(Self.token)/events", method: .get, headers: api.headers(.auditor))
            #expect(try stream.events.map { $0["type"] } == ["purchase", "renewal", "refund"])
            #expect(try stream.events[2]["data"]?.objectValue?["amount_minor"] == 999)

            // Tampered: a payload re-signed by another chain with the same structure is refused, nothing stored.
            let forger = try AppleTestSigner()
            let forged = forger.notificationBody(
                type: "DID_RENEW", signedDate: Self.t("2026-05-01T10:00:01Z"),
                transaction: Self.txn("5002", from: "2026-05-01T10:00:00Z", to: "2026-06-01T10:00:00Z"))
            let refused = try await post(http, api, forged)
            #expect(refused.status == .unprocessableContent)
            #expect(refused.errorCode == "invalid_signature")
            var flipped = subscribed.objectValue!["signedPayload"]!.stringValue!
            flipped.removeLast(3)
            flipped += "AAA"
            #expect(try await post(http, api, ["signedPayload": .string(flipped)]).errorCode == "invalid_signature")
            let feed = try await http.execute(uri: "/v1/events", method: .get, headers: api.headers(.auditor))
            #expect(try feed.events.count == 3)
        }
    }

    @Test("RENEWAL_EXTENDED credits from the old expiry, not from its own time: a refund of the paid period still cuts it")
    func renewalExtended() async throws {
        try await withPro { signer, http, api, subscribed in
            #expect(try await post(http, api, subscribed).status == .ok)
            // The developer extended the renewal date by a week on 20 March: Apple states the new expiry only.
            let extended = signer.notificationBody(
                type: "RENEWAL_EXTENDED", signedDate: Self.t("2026-03-20T00:00:00Z"),
                transaction: Self.txn("5000", from: "2026-03-01T10:00:00Z", to: "2026-04-08T10:00:00Z"))
            #expect(try await post(http, api, extended).status == .ok)
            let stream = try await http.execute(uri: "/v1/subscribers/\(Self.token)/events", method: .get, headers: api.headers(.auditor))
            let credit = try #require(try stream.events.first { $0["type"] == "credit" })
            #expect(credit["data"]?.objectValue?["window_start"] == "2026-04-01T10:00:00Z")
            #expect(credit["data"]?.objectValue?["window_end"] == "2026-04-08T10:00:00Z")
            let refund = Self.refund(signer, "5000", from: "2026-03-01T10:00:00Z", to: "2026-04-08T10:00:00Z", at: "2026-03-25T00:00:00Z")
            #expect(try await post(http, api, refund).status == .ok)
            #expect(try await pro(http, api, at: "2026-03-28T00:00:00Z")?["active"] == false, "the refunded paid time is not a credit")
            // An extension of a transaction the ledger has not recorded is kept as a notice, not a credit.
            let unknown = signer.notificationBody(
                type: "RENEWAL_EXTENDED", signedDate: Self.t("2026-03-20T00:00:00Z"),
                transaction: Self.txn("5009", from: "2026-03-10T10:00:00Z", to: "2026-04-17T10:00:00Z"))
            #expect(try await post(http, api, unknown).status == .ok)
            let after = try await http.execute(uri: "/v1/subscribers/\(Self.token)/events", method: .get, headers: api.headers(.auditor))
            #expect(try after.events.last?["type"] == "store_notice")
            #expect(try after.events.last?["data"]?.objectValue?["kind"] == "renewal_extended")
        }
    }

    @Test("DID_RENEW delivered before SUBSCRIBED ends in the same windows as in order")
    func outOfOrder() async throws {
        let signer = try AppleTestSigner()
        try await APIHarness.run(appleRootsDER: [signer.rootDER]) { http, api in
            _ = try await http.execute(uri: "/v1/catalog/products/pro.monthly", method: .put, headers: api.headers(.admin), body: body(Self.product))
            let renew = signer.notificationBody(
                type: "DID_RENEW", signedDate: Self.t("2026-04-01T10:00:01Z"),
                transaction: Self.txn("5001", from: "2026-04-01T10:00:00Z", to: "2026-05-01T10:00:00Z"))
            let subscribed = signer.notificationBody(
                type: "SUBSCRIBED", signedDate: Self.t("2026-03-01T10:00:01Z"),
                transaction: Self.txn("5000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z"))
            #expect(try await post(http, api, renew).status == .ok)
            #expect(try await post(http, api, subscribed).status == .ok)
            let windows = try await http.execute(uri: "/v1/subscribers/\(Self.token)/windows", method: .get, headers: api.headers(.reader))
            let w = try #require(try windows.json.objectValue?["windows"]?.arrayValue).compactMap(\.objectValue)
            #expect(w.map { $0["start"] } == ["2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z"])
            #expect(w.map { $0["end"] } == ["2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z"])
            #expect(w.map { $0["transaction_id"] } == ["5000", "5001"])
        }
    }

    @Test("a notification for an unlinked transaction is kept and applied when a receipt names the subscriber")
    func pendingUntilReceipt() async throws {
        let signer = try AppleTestSigner()
        try await APIHarness.run(appleRootsDER: [signer.rootDER]) { http, api in
            _ = try await http.execute(uri: "/v1/catalog/products/pro.monthly", method: .put, headers: api.headers(.admin), body: body(Self.product))
            let renew = signer.notificationBody(
                type: "DID_RENEW", signedDate: Self.t("2026-04-01T10:00:01Z"),
                transaction: Self.txn("5001", from: "2026-04-01T10:00:00Z", to: "2026-05-01T10:00:00Z", token: false))
            let pending = try await post(http, api, renew)
            #expect(try pending.json.objectValue?["status"] == "pending")
            #expect(try await http.execute(uri: "/v1/events", method: .get, headers: api.headers(.auditor)).events.isEmpty)
            // A retry of a pending notification stays pending (not a duplicate that is never applied).
            #expect(try await post(http, api, renew).json.objectValue?["status"] == "pending")

            let receipt: JSONValue = [
                "subscriber_id": "user-42", "status": 0, "environment": "Production",
                "latest_receipt_info": [
                    [
                        "transaction_id": "5000", "original_transaction_id": "5000", "product_id": "pro.monthly",
                        "purchase_date_ms": "\(Self.t("2026-03-01T10:00:00Z").microseconds / 1000)",
                        "expires_date_ms": "\(Self.t("2026-04-01T10:00:00Z").microseconds / 1000)", "is_trial_period": "false",
                    ]
                ],
            ]
            let r = try await post(http, api, receipt, path: "receipts")
            #expect(r.status == .ok)
            #expect(try r.json.objectValue?["applied_notifications"] == 1)
            let stream = try await http.execute(uri: "/v1/subscribers/user-42/events", method: .get, headers: api.headers(.auditor))
            #expect(Set(try stream.events.compactMap { $0["type"]?.stringValue }) == ["purchase", "renewal"])
            #expect(try await pro(http, api, subscriber: "user-42", at: "2026-04-15T00:00:00Z")?["active"] == true)
            // The renewal is a fact already known: uploading a receipt that also has it stores nothing new.
            #expect(try await post(http, api, renew).json.objectValue?["status"] == "duplicate")
        }
    }

    @Test("a receipt: old and modern shapes give windows; a refund cuts only its own transaction; bad status refused")
    func receipts() async throws {
        try await APIHarness.run { http, api in
            _ = try await http.execute(uri: "/v1/catalog/products/pro.monthly", method: .put, headers: api.headers(.admin), body: body(Self.product))
            let modern: JSONValue = [
                "subscriber_id": "r1", "status": 0, "environment": "Production",
                "latest_receipt_info": [
                    [
                        "transaction_id": "7001", "original_transaction_id": "7000", "product_id": "pro.monthly",
                        "purchase_date_ms": "\(Self.t("2026-04-01T00:00:00Z").microseconds / 1000)",
                        "expires_date_ms": "\(Self.t("2026-05-01T00:00:00Z").microseconds / 1000)",
                        "cancellation_date_ms": "\(Self.t("2026-04-10T00:00:00Z").microseconds / 1000)",
                    ],
                    [
                        "transaction_id": "7000", "original_transaction_id": "7000", "product_id": "pro.monthly",
                        "purchase_date_ms": "\(Self.t("2026-03-01T00:00:00Z").microseconds / 1000)",
                        "expires_date_ms": "\(Self.t("2026-04-01T00:00:00Z").microseconds / 1000)",
                    ],
                ],
            ]
            let r = try await post(http, api, modern, path: "receipts")
            #expect(r.status == .ok)
            let windows = try await http.execute(uri: "/v1/subscribers/r1/windows", method: .get, headers: api.headers(.reader))
            let w = try #require(try windows.json.objectValue?["windows"]?.arrayValue).compactMap(\.objectValue)
            #expect(w.map { $0["transaction_id"] } == ["7000", "7001"])
            try #require(!w.isEmpty)
            #expect(w[0]["cut_at"] == .null)
            #expect(w[1]["end"] == "2026-04-10T00:00:00Z")
            #expect(try await pro(http, api, subscriber: "r1", at: "2026-03-15T00:00:00Z")?["active"] == true)
            #expect(try await pro(http, api, subscriber: "r1", at: "2026-04-15T00:00:00Z")?["active"] == false)
            // The same receipt again: 200, nothing new.
            #expect(try await post(http, api, modern, path: "receipts").status == .ok)
            #expect(try await http.execute(uri: "/v1/events", method: .get, headers: api.headers(.auditor)).events.count == 3)

            let old: JSONValue = [
                "subscriber_id": "r2", "status": 0,
                "receipt": [
                    "transaction_id": "8000", "original_transaction_id": "8000", "product_id": "pro.monthly",
                    "purchase_date": "2026-03-01 00:00:00 Etc/GMT",
                    "expires_date": "\(Self.t("2026-04-01T00:00:00Z").microseconds / 1000)",
                ],
                "latest_receipt_info": [
                    "transaction_id": "8001", "original_transaction_id": "8000", "product_id": "pro.monthly",
                    "purchase_date": "2026-04-01 00:00:00 Etc/GMT",
                    "expires_date": "\(Self.t("2026-05-01T00:00:00Z").microseconds / 1000)",
                ],
            ]
            #expect(try await post(http, api, old, path: "receipts").status == .ok)
            #expect(try await pro(http, api, subscriber: "r2", at: "2026-04-15T00:00:00Z")?["expires_at"] == "2026-05-01T00:00:00Z")

            let sandbox = try await post(http, api, ["subscriber_id": "r3", "status": 21007], path: "receipts")
            #expect(sandbox.status == .unprocessableContent)
            #expect(sandbox.errorField == "status")
        }
    }
}
