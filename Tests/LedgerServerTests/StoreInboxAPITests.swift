import AppleStore
import Foundation
import GoogleStore
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerStore
import LedgerTestSupport
import NIOCore
import StoreAdapters
import StripeStore
import Testing

@testable import LedgerServer

/// `GET /v1/stores/{store}/inbox`: each store's waiting messages with why they wait, on PostgreSQL.
@Suite("Store inbox API", .serialized)
struct StoreInboxAPITests {
    typealias S = StripeHelpers
    typealias G = GoogleStoreAPITests

    static func inbox(_ http: any TestClientProtocol, _ api: APIHarness, _ query: String, role: APIRole? = .admin) async throws -> TestResponse {
        try await http.execute(uri: "/v1/stores/\(query)", method: .get, headers: api.headers(role))
    }

    static func messages(_ r: TestResponse) throws -> [[String: JSONValue]] {
        try r.json.objectValue?["messages"]?.arrayValue?.compactMap(\.objectValue) ?? []
    }

    /// A paid invoice of `customer` that names no subscriber: it waits.
    static func invoice(_ id: String, customer: String, product: String = "pro.monthly", subscriber: String? = nil) -> [UInt8] {
        S.event(
            "evt_\(id)", "invoice.paid", at: "2026-03-01T10:00:05Z",
            S.invoice(
                "in_\(id)", "subscription_create", customer: customer, sub: "sub_\(id)", pi: "pi_\(id)", paidAt: "2026-03-01T10:00:00Z",
                lines: [S.line("il_\(id)", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", product)], subscriber: subscriber))
    }

    @Test("a Stripe event whose customer names no subscriber is listed with why it waits; a missing product too; no payload")
    func stripe() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            #expect(S.status(try await S.post(http, Self.invoice("w1", customer: "cus_W1"))) == "pending")
            #expect(S.status(try await S.post(http, Self.invoice("w2", customer: "cus_W2"))) == "pending")
            // Names its subscriber, but its price is not in the catalog: refused, kept `received`.
            let missing = try await S.post(http, Self.invoice("m1", customer: "cus_M", product: "gone.monthly", subscriber: "web-m"))
            #expect(missing.status == .unprocessableContent)

            let r = try await Self.inbox(http, api, "stripe/inbox")
            #expect(r.status == .ok, "\(String(buffer: r.body))")
            let body = try #require(try r.json.objectValue)
            #expect(body["store"] == "stripe" && body["status"] == .null && body["next_after"] == nil)
            #expect(body["waiting"] == ["received": 1, "pending": 2, "failed": 0, "total": 3])
            let listed = try Self.messages(r)
            #expect(listed.map { $0["message_id"] } == ["evt_m1", "evt_w2", "evt_w1"], "newest first")
            let w1 = try #require(listed.first { $0["message_id"] == "evt_w1" })
            #expect(w1["status"] == "pending" && w1["account_id"] == "cus_W1" && w1["kind"] == "invoice.paid" && w1["summary"] == "invoice in_w1")
            let reason = try #require(w1["reason"]?.stringValue)
            #expect(reason.hasPrefix("customer cus_W1 names no subscriber: set metadata.subscriber_id"), "\(reason)")
            let m1 = try #require(listed.first { $0["message_id"] == "evt_m1" })
            #expect(m1["status"] == "received")
            #expect(m1["reason"]?.stringValue?.contains("\"gone.monthly\" is not in the catalog") == true, "\(m1)")
            // Never the payload or the raw bytes: a 40 KiB invoice stays in the database.
            #expect(listed.allSatisfy { Set($0.keys).isDisjoint(with: ["raw", "payload"]) })
            #expect(!String(buffer: r.body).contains("subscription_details"))
            // One line for both customers' cause, the account left out.
            let top = try #require(body["top_reasons"]?.arrayValue).compactMap(\.objectValue)
            #expect(top.first?["messages"] == 2 && top.first?["status"] == "pending")
            #expect(top.first?["reason"]?.stringValue?.hasPrefix("customer … names no subscriber") == true, "\(top)")
            #expect(top.count == 2)

            // The checkout names the subscriber: w1 is applied and leaves the waiting list, with no reason left.
            let checkout = S.object(
                "checkout.session",
                [
                    "id": "cs_W1", "mode": "subscription", "client_reference_id": "web-w1", "customer": "cus_W1", "subscription": "sub_w1",
                    "payment_status": "paid", "status": "complete",
                ])
            let linked = try await S.post(http, S.event("evt_cs_w1", "checkout.session.completed", at: "2026-03-01T10:00:06Z", checkout))
            #expect(linked.status == .ok, "\(String(buffer: linked.body))")
            let after = try await Self.inbox(http, api, "stripe/inbox")
            #expect(try Set(Self.messages(after).map { $0["message_id"] }) == ["evt_m1", "evt_w2"])
            let applied = try Self.messages(try await Self.inbox(http, api, "stripe/inbox?status=applied"))
            let w1Applied = try #require(applied.first { $0["message_id"] == "evt_w1" })
            #expect(w1Applied["reason"] == .null && w1Applied["subscriber_id"] == "web-w1")
        }
    }

    @Test("only an admin key reads an inbox; no key is 401")
    func roles() async throws {
        try await APIHarness.run { http, api in
            for role in APIRole.allCases where role != .admin {
                let r = try await Self.inbox(http, api, "stripe/inbox", role: role)
                #expect(r.status == .forbidden, "\(role)")
                #expect(r.errorCode == "forbidden")
            }
            #expect(try await Self.inbox(http, api, "google/inbox", role: nil).status == .unauthorized)
            #expect(try await Self.inbox(http, api, "apple/inbox").status == .ok)
        }
    }

    @Test("a bad store, status, limit or cursor is 400 naming the parameter")
    func badParameters() async throws {
        try await APIHarness.run { http, api in
            let cases: [(String, String)] = [
                ("amazon/inbox", "'store'"), ("Stripe/inbox", "'store'"),
                ("stripe/inbox?status=waiting", "'status'"), ("stripe/inbox?status=", "'status'"),
                ("stripe/inbox?limit=0", "'limit'"), ("stripe/inbox?limit=1001", "'limit'"), ("stripe/inbox?limit=x", "'limit'"),
                ("stripe/inbox?after=x", "'after'"), ("stripe/inbox?after=12.", "'after'"), ("stripe/inbox?after=-1.ZXZ0", "'after'"),
                ("stripe/inbox?after=99999999999999999999.ZXZ0", "'after'"), ("stripe/inbox?after=%2B1.ZXZ0", "'after'"),
                ("stripe/inbox?after=1.ZX%2BZ0", "'after'"), ("stripe/inbox?after=1.ZXZ0%3D", "'after'"),
            ]
            for (query, parameter) in cases {
                let r = try await Self.inbox(http, api, query)
                #expect(r.status == .badRequest, "\(query)")
                #expect(r.errorCode == "invalid_request", "\(query)")
                let message = try r.json.objectValue?["error"]?.objectValue?["message"]?.stringValue ?? ""
                #expect(message.contains(parameter), "\(query): \(message)")
            }
            #expect(try await Self.inbox(http, api, "stripe/inbox?limit=1000&status=failed").status == .ok)
        }
    }

    @Test("pages follow next_after newest first, each message once; the counts do not depend on the page")
    func paging() async throws {
        try await APIHarness.run { http, api in
            for i in 1...5 { #expect(S.status(try await S.post(http, Self.invoice("p\(i)", customer: "cus_P\(i)"))) == "pending") }
            var seen: [String] = []
            var times: [String] = []
            var uri = "stripe/inbox?limit=2"
            var pages = 0
            while pages < 10 {
                pages += 1
                let r = try await Self.inbox(http, api, uri)
                #expect(r.status == .ok)
                let body = try #require(try r.json.objectValue)
                #expect(body["waiting"]?.objectValue?["pending"] == 5)
                let page = try Self.messages(r)
                seen += page.compactMap { $0["message_id"]?.stringValue }
                times += page.compactMap { $0["received_at"]?.stringValue }
                guard let next = body["next_after"]?.stringValue else { break }
                #expect(page.count == 2)
                uri = "stripe/inbox?limit=2&after=\(next)"
            }
            #expect(pages == 3)
            #expect(Set(seen) == Set((1...5).map { "evt_p\($0)" }) && seen.count == 5)
            #expect(times == times.sorted(by: >), "newest first")
            #expect(try Self.messages(try await Self.inbox(http, api, "stripe/inbox?status=pending&limit=5")).count == 5)
            #expect(try Self.messages(try await Self.inbox(http, api, "stripe/inbox?status=failed")).isEmpty)
            #expect(try Self.messages(try await Self.inbox(http, api, "apple/inbox")).isEmpty, "another store's messages are not listed")
        }
    }

    @Test("an App Store notification for an unlinked original transaction says what links it")
    func apple() async throws {
        let signer = try AppleTestSigner()
        try await APIHarness.run(appleRootsDER: [signer.rootDER]) { http, api in
            _ = try await http.execute(
                uri: "/v1/catalog/products/pro.monthly", method: .put, headers: api.headers(.admin), body: body(AppleStoreAPITests.product))
            let renew = signer.notificationBody(
                type: "DID_RENEW", signedDate: AppleStoreAPITests.t("2026-04-01T10:00:01Z"),
                transaction: AppleStoreAPITests.txn("5001", from: "2026-04-01T10:00:00Z", to: "2026-05-01T10:00:00Z", token: false))
            let posted = try await http.execute(
                uri: "/v1/stores/apple/notifications", method: .post, headers: api.headers(.writer), body: body(renew))
            #expect(try posted.json.objectValue?["status"] == "pending")
            let r = try await Self.inbox(http, api, "apple/inbox")
            let m = try #require(try Self.messages(r).first)
            #expect(m["store"] == "apple" && m["kind"] == "DID_RENEW" && m["status"] == "pending" && m["account_id"] == "5000")
            #expect(m["reason"]?.stringValue?.hasPrefix("original transaction 5000 is linked to no subscriber") == true, "\(m)")
            #expect(m["summary"] == "com.example.app pro.monthly")
            #expect(try r.json.objectValue?["waiting"]?.objectValue?["total"] == 1)
            #expect(!String(buffer: r.body).contains("signedTransactionInfo"))
        }
    }

    @Test("Google pushes: a product not in the catalog, Google unreachable and an unlinked token each say why they wait")
    func google() async throws {
        try await GoogleStoreAPITests.run { c in
            // A push is answered once recorded (202) and resolved in the background: `send` waits for that.
            c.google.set("tok-x", G.purchase(product: "nope.monthly", order: "GPA.7100-0000-0000-00001", expiry: "2026-04-01T10:00:00Z"))
            #expect(try await G.send(c, G.push(id: "x1", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-x")).status == .accepted)
            c.google.set("tok-p", G.purchase(order: "GPA.7200-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: nil))
            #expect(try await G.send(c, G.push(id: "p1", at: "2026-03-01T10:00:02Z", type: 4, token: "tok-p")).status == .accepted)
            c.google.set("tok-d", G.purchase(order: "GPA.7300-0000-0000-00001", expiry: "2026-04-01T10:00:00Z", account: "user-d"))
            c.google.setDown(true)
            #expect(try await G.send(c, G.push(id: "d1", at: "2026-03-01T10:00:03Z", type: 4, token: "tok-d")).status == .accepted)
            // Each has been tried once at least: wait until all three say why they wait.
            for _ in 0..<600 {
                let listed = try Self.messages(
                    try await c.http.execute(uri: "/v1/stores/google/inbox", method: .get, headers: c.api.headers(.admin)))
                if listed.count == 3, listed.allSatisfy({ ($0["reason"]?.stringValue ?? "").isEmpty == false }) { break }
                try await Task.sleep(for: .milliseconds(50))
            }

            let r = try await c.http.execute(uri: "/v1/stores/google/inbox", method: .get, headers: c.api.headers(.admin))
            #expect(r.status == .ok, "\(String(buffer: r.body))")
            let listed = try Self.messages(r)
            func reason(_ id: String) -> String { listed.first { $0["message_id"]?.stringValue == id }?["reason"]?.stringValue ?? "" }
            #expect(reason("x1").contains("\"nope.monthly\" is not in the catalog"), "\(reason("x1"))")
            #expect(reason("p1").hasPrefix("the purchase token is linked to no subscriber"), "\(reason("p1"))")
            #expect(reason("d1").hasPrefix("Google is unavailable"), "\(reason("d1"))")
            let x1 = try #require(listed.first { $0["message_id"] == "x1" })
            #expect((x1["attempts"]?.numberValue?.int64Value ?? 0) >= 1 && x1["kind"] == "subscription" && x1["subtype"] == "4")
            #expect(x1["summary"] == .string("\(GooglePlayStandIn.package) pro.monthly"))
            let waiting = try #require(try r.json.objectValue?["waiting"]?.objectValue)
            #expect(waiting["pending"] == 1 && waiting["total"] == 3, "\(waiting)")
            #expect(
                try Self.messages(
                    try await c.http.execute(uri: "/v1/stores/google/inbox?status=pending", method: .get, headers: c.api.headers(.admin))
                ).count == 1)
        }
    }

    @Test("subledger_store_inbox_messages reports every store and waiting status")
    func gauge() async throws {
        try await APIHarness.run(metrics: ClientDisconnectTests.metrics) { http, api in
            #expect(S.status(try await S.post(http, Self.invoice("g1", customer: "cus_G"))) == "pending")
            #expect(S.status(try await S.post(http, Self.invoice("g2", customer: "cus_G"))) == "pending")
            let url = try #require(api.url)
            try await TestDatabase.run(url.clientConfiguration(maximumConnections: 1)) { client in
                try await StoreInboxGauges(inbox: StoreInbox(client: client, logger: TestDatabase.logger), logger: TestDatabase.logger).refresh()
            }
            let text = String(buffer: try await http.execute(uri: "/metrics", method: .get).body)
            func value(_ store: String, _ status: String) -> String? {
                text.split(separator: "\n").first {
                    $0.hasPrefix("subledger_store_inbox_messages{") && $0.contains("store=\"\(store)\"") && $0.contains("status=\"\(status)\"")
                }.map { String($0.split(separator: " ").last!) }
            }
            #expect(value("stripe", "pending") == "2.0" || value("stripe", "pending") == "2", "\(text)")
            for store in ["apple", "google", "stripe"] {
                for status in ["received", "failed"] { #expect(value(store, status).map { Double($0) == 0 } == true, "\(store) \(status)") }
            }
        }
    }
}
