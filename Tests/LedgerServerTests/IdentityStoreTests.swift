import AppleStore
import Foundation
import GoogleStore
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import NIOCore
import StoreAdapters
import StripeStore
import Testing

/// The transfer policy on the stores' own paths (docs/identity.md): an app's claim (a receipt) and a store's
/// fact (a notification carrying another `appAccountToken`) naming B for a purchase A holds.
@Suite("Identity: store paths obey the transfer policy", .serialized)
struct IdentityStoreTests {
    typealias Apple = AppleStoreAPITests
    static let product: JSONValue = [
        "entitlements": ["pro"], "kind": "auto_renewable", "period": "P1Y", "price_minor": 12000, "currency": "USD", "commission_rate": "0.15",
    ]

    /// A receipt for `subscriber` with one yearly transaction of original transaction 9000, running now.
    static func receipt(_ subscriber: String) -> JSONValue {
        [
            "subscriber_id": .string(subscriber), "status": 0, "environment": "Production",
            "latest_receipt_info": [
                [
                    "transaction_id": "9000", "original_transaction_id": "9000", "product_id": "pro.yearly",
                    "purchase_date_ms": "\(Apple.t("2026-06-01T00:00:00Z").microseconds / 1000)",
                    "expires_date_ms": "\(Apple.t("2030-06-01T00:00:00Z").microseconds / 1000)",
                ]
            ],
        ]
    }

    static func post(_ http: any TestClientProtocol, _ api: APIHarness, _ path: String, _ value: JSONValue, role: APIRole = .writer) async throws
        -> TestResponse
    {
        try await http.execute(uri: path, method: .post, headers: api.headers(role), body: body(value))
    }

    static func holds(_ http: any TestClientProtocol, _ api: APIHarness, _ s: String, asOf: Int64? = nil) async throws -> [String] {
        let r = try await http.execute(
            uri: "/v1/subscribers/\(s)/purchases" + (asOf.map { "?as_of=\($0)" } ?? ""), method: .get, headers: api.headers(.admin))
        return try r.json.objectValue?["purchases"]?.arrayValue?.compactMap { $0.objectValue?["purchase_id"]?.stringValue } ?? []
    }

    static func active(_ http: any TestClientProtocol, _ api: APIHarness, _ s: String, asOf: Int64? = nil) async throws -> Bool {
        let r = try await http.execute(
            uri: "/v1/subscribers/\(s)/entitlements" + (asOf.map { "?as_of=\($0)" } ?? ""), method: .get, headers: api.headers(.admin))
        return try r.json.objectValue?["entitlements"]?.arrayValue?.contains { $0.objectValue?["active"] == true } ?? false
    }

    static func setPolicy(_ http: any TestClientProtocol, _ api: APIHarness, _ s: String, _ policy: String) async throws {
        let r = try await http.execute(
            uri: "/v1/subscribers/\(s)/transfer-policy", method: .put, headers: api.headers(.admin), body: body(["policy": .string(policy)]))
        #expect(r.status == .ok)
    }

    @Test("a receipt naming B for A's purchase: transfer moves it (A keeps its past), keep refuses 409 purchase_owned and stores nothing")
    func receiptsUnderEachPolicy() async throws {
        try await APIHarness.run { http, api in
            _ = try await http.execute(
                uri: "/v1/catalog/products/pro.yearly", method: .put, headers: api.headers(.admin), body: body(Self.product))
            let first = try await Self.post(http, api, "/v1/stores/apple/receipts", Self.receipt("owner-a"))
            #expect(first.status == .ok)
            let before = first.headers[HTTPField.Name("Ledger-Position")!].flatMap { Int64($0) }

            // keep: the app's claim is refused, and nothing is said about the owner.
            try await Self.setPolicy(http, api, "owner-a", "keep")
            let kept = try await Self.post(http, api, "/v1/stores/apple/receipts", Self.receipt("claim-b"))
            #expect(kept.status == .conflict)
            #expect(kept.errorCode == "purchase_owned")
            #expect(!String(buffer: kept.body).contains("owner-a"))
            #expect(try await Self.holds(http, api, "claim-b").isEmpty)
            #expect(try await Self.holds(http, api, "owner-a") == ["9000"])

            // transfer_if_no_active: A is active now, so it keeps it too.
            try await Self.setPolicy(http, api, "owner-a", "transfer_if_no_active")
            #expect(try await Self.post(http, api, "/v1/stores/apple/receipts", Self.receipt("claim-b")).errorCode == "purchase_owned")

            // transfer: B gets it from now on; A's history stays, as of before A held it and was active.
            try await Self.setPolicy(http, api, "owner-a", "transfer")
            let moved = try await Self.post(http, api, "/v1/stores/apple/receipts", Self.receipt("claim-b"))
            #expect(moved.status == .ok, "\(String(buffer: moved.body))")
            #expect(try await Self.holds(http, api, "claim-b") == ["9000"])
            #expect(try await Self.holds(http, api, "owner-a").isEmpty)
            #expect(try await Self.active(http, api, "claim-b"))
            #expect(try await Self.active(http, api, "owner-a") == false)
            #expect(try await Self.holds(http, api, "owner-a", asOf: before) == ["9000"])
            #expect(try await Self.active(http, api, "owner-a", asOf: before))
            let events = try await http.execute(uri: "/v1/subscribers/owner-a/events", method: .get, headers: api.headers(.auditor))
            #expect(try events.events.last?["type"] == "transfer_out")
            #expect(try events.events.last?["data"]?.objectValue?["reason"] == "restore")
            // The same receipt again changes nothing.
            #expect(try await Self.post(http, api, "/v1/stores/apple/receipts", Self.receipt("claim-b")).status == .ok)
            #expect(try await Self.holds(http, api, "claim-b") == ["9000"])
            // Reports: the restore is a transfer out and in, never churn; the money is billed once; MRR once, under B.
            let month = try await http.execute(
                uri: "/v1/reports/churn?from=2026-01-01&to=2027-01-01&interval=month", method: .get, headers: api.headers(.analyst))
            let periods = try month.json.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue) ?? []
            #expect(periods.compactMap { $0["transferred_out"]?.numberValue?.int64Value }.reduce(0, +) == 1)
            #expect(periods.compactMap { $0["transferred_in"]?.numberValue?.int64Value }.reduce(0, +) == 1)
            #expect(periods.compactMap { $0["churned"]?.numberValue?.int64Value }.reduce(0, +) == 0)
            #expect(periods.compactMap { $0["new"]?.numberValue?.int64Value }.reduce(0, +) == 1)
            let revenue = try await http.execute(
                uri: "/v1/reports/revenue?from=2026-01-01&to=2031-01-01&interval=month", method: .get, headers: api.headers(.analyst))
            let rows = try revenue.json.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue) ?? []
            #expect(rows.compactMap { $0["billings"]?.numberValue?.int64Value }.reduce(0, +) == 12000)
            #expect(rows.compactMap { $0["recognized"]?.numberValue?.int64Value }.reduce(0, +) == 12000)
            let mrr = try await http.execute(uri: "/v1/reports/mrr", method: .get, headers: api.headers(.analyst))
            let usd = try mrr.json.objectValue?["currencies"]?.arrayValue?.first?.objectValue
            #expect(usd?["mrr_minor"] == 1000 && usd?["active_paid"] == 1, "\(String(buffer: mrr.body))")
        }
    }

    @Test("a notification whose appAccountToken names B: applied to A under keep (never refused), moved under transfer")
    func notificationsAreFacts() async throws {
        let signer = try AppleTestSigner()
        try await APIHarness.run(appleRootsDER: [signer.rootDER]) { http, api in
            _ = try await http.execute(
                uri: "/v1/catalog/products/pro.monthly", method: .put, headers: api.headers(.admin), body: body(Apple.product))
            let other = "0d4f8e2a-1b3c-4d5e-8f90-a1b2c3d4e5f6"
            func notification(_ type: String, _ id: String, from: String, to: String, token: String) -> JSONValue {
                signer.notificationBody(
                    type: type, signedDate: Apple.t(from),
                    transaction: Apple.txn(id, from: from, to: to, extra: ["appAccountToken": .string(token)]))
            }
            let subscribed = try await Self.post(
                http, api, "/v1/stores/apple/notifications",
                notification("SUBSCRIBED", "5000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z", token: Apple.token))
            #expect(try subscribed.json.objectValue?["subscriber_id"] == .string(Apple.token))
            try await Self.setPolicy(http, api, Apple.token, "keep")
            let renewed = try await Self.post(
                http, api, "/v1/stores/apple/notifications",
                notification("DID_RENEW", "5001", from: "2026-04-01T10:00:00Z", to: "2026-05-01T10:00:00Z", token: other))
            #expect(renewed.status == .ok, "\(String(buffer: renewed.body))")
            #expect(try renewed.json.objectValue?["subscriber_id"] == .string(Apple.token), "the owner keeps it")
            let notice = try renewed.events.first { $0["type"] == "store_notice" }?["data"]?.objectValue
            #expect(notice?["kind"] == "other_subscriber_named", "the other account the store named is kept as a fact")
            #expect(notice?["detail"]?.objectValue?["subscriber_id"] == .string(other))
            #expect(try await Self.holds(http, api, other).isEmpty)
            try await Self.setPolicy(http, api, Apple.token, "transfer")
            let moved = try await Self.post(
                http, api, "/v1/stores/apple/notifications",
                notification("DID_RENEW", "5002", from: "2026-05-01T10:00:00Z", to: "2026-06-01T10:00:00Z", token: other))
            #expect(try moved.json.objectValue?["subscriber_id"] == .string(other), "\(String(buffer: moved.body))")
            #expect(try await Self.holds(http, api, other) == ["5000"])
            #expect(try await Self.holds(http, api, Apple.token).isEmpty)
        }
    }
}

extension IdentityStoreTests {
    typealias S = StripeHelpers

    static func paid(_ n: Int, subscriber: String) -> [UInt8] {
        let from = String(format: "2026-%02d-01T10:00:00Z", 2 + n)
        let to = String(format: "2026-%02d-01T10:00:00Z", 3 + n)
        return S.event(
            "evt_i\(n)", "invoice.paid", at: from,
            S.invoice(
                "in_\(n)", n == 0 ? "subscription_create" : "subscription_cycle", customer: "cus_s", sub: "sub_s", pi: "pi_\(n)", paidAt: from,
                lines: [S.line("il_\(n)", 1000, from, to, "pro.monthly")], subscriber: subscriber))
    }

    @Test("Stripe: an invoice naming another subscriber for a linked customer is a store fact: applied to the owner under keep, moved under transfer")
    func stripeCustomerRelinked() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            let first = try await S.post(http, Self.paid(0, subscriber: "web-a"))
            #expect(S.status(first) == "applied", "\(String(buffer: first.body))")
            try await Self.setPolicy(http, api, "web-a", "keep")
            let kept = try await S.post(http, Self.paid(1, subscriber: "web-b"))
            #expect(try kept.json.objectValue?["subscriber_id"] == "web-a", "\(String(buffer: kept.body))")
            #expect(try await Self.holds(http, api, "web-b").isEmpty)
            try await Self.setPolicy(http, api, "web-a", "transfer")
            let moved = try await S.post(http, Self.paid(2, subscriber: "web-b"))
            #expect(try moved.json.objectValue?["subscriber_id"] == "web-b", "\(String(buffer: moved.body))")
            #expect(try await Self.holds(http, api, "web-b") == ["sub_s"])
            #expect(try await Self.holds(http, api, "web-a").isEmpty)
            #expect(try await S.active(http, api, "web-b", at: "2026-04-15T00:00:00Z"), "the purchase's running window moved with it")
            #expect(try await S.active(http, api, "web-a", at: "2026-02-15T00:00:00Z"), "A's past stays A's")
        }
    }
}

extension IdentityStoreTests {
    typealias G = GoogleStoreAPITests

    @Test("Google Play: a purchase token submitted for another account is a claim: 409 under keep, moved under transfer")
    func googleTokenSubmitted() async throws {
        try await G.run { c in
            try await G.bought(
                c, order: "GPA.9300-0000-0000-00001", token: "tok-g", account: "acct-a", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z")
            var owner = ""
            for _ in 0..<100 where owner.isEmpty {
                if try await !Self.holds(c.http, c.api, "acct-a").isEmpty { owner = "acct-a" } else { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(owner == "acct-a", "the push was resolved in the background")
            try await Self.setPolicy(c.http, c.api, "acct-a", "keep")
            let kept = try await G.submit(c, subscriber: "user-b", token: "tok-g")
            #expect(kept.status == .conflict, "\(String(buffer: kept.body))")
            #expect(kept.errorCode == "purchase_owned")
            #expect(try await Self.holds(c.http, c.api, "user-b").isEmpty)
            try await Self.setPolicy(c.http, c.api, "acct-a", "transfer")
            let moved = try await G.submit(c, subscriber: "user-b", token: "tok-g")
            #expect(moved.status == .ok, "\(String(buffer: moved.body))")
            #expect(try await Self.holds(c.http, c.api, "user-b") == ["GPA.9300-0000-0000-00001"])
            #expect(try await Self.holds(c.http, c.api, "acct-a").isEmpty)
        }
    }
}
