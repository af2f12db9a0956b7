import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import NIOCore
import Testing

@Suite("Catalog and entitlement reads over HTTP")
struct EntitlementsAPITests {
    static let product: JSONValue = [
        "entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M", "price_minor": 999, "currency": "USD",
        "commission_rate": "0.30",
    ]

    @Test("will_renew read from the projection (and the cache) answers each `at`: on, off after auto-renew off, false once inactive")
    func willRenewAtT() async throws {
        try await APIHarness.run { http, api in
            let events: [JSONValue] = [
                [
                    "subscriber_id": "u2", "type": "purchase", "occurred_at": "2026-03-01T10:00:00Z", "source": "web",
                    "environment": "production", "idempotency_key": "order-2",
                    "data": [
                        "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": "order-2", "kind": "auto_renewable",
                        "period_start": "2026-03-01T10:00:00Z", "period_end": "2026-04-01T10:00:00Z", "period": "P1M",
                        "price_minor": 999, "currency": "USD",
                    ],
                ],
                [
                    "subscriber_id": "u2", "type": "auto_renew_changed", "occurred_at": "2026-03-10T00:00:00Z", "source": "web",
                    "environment": "production", "idempotency_key": "off-2",
                    "data": ["enabled": false, "product_id": "pro.monthly", "entitlements": ["pro"]],
                ],
            ]
            for event in events {
                #expect(try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(event)).status == .created)
            }
            func state(at: String) async throws -> [String: JSONValue]? {
                let answer = try await http.execute(uri: "/v1/subscribers/u2/entitlements?at=\(at)", method: .get, headers: api.headers(.reader))
                return try answer.json.objectValue?["entitlements"]?.arrayValue?.first?.objectValue
            }
            // Twice each: the second read may come from the entitlement cache.
            for _ in 0..<2 {
                #expect(try await state(at: "2026-03-05T00:00:00Z")?["will_renew"] == true)
                #expect(try await state(at: "2026-03-20T00:00:00Z")?["will_renew"] == false)
                #expect(try await state(at: "2026-03-20T00:00:00Z")?["active"] == true)
                let lapsed = try await state(at: "2026-05-01T00:00:00Z")
                #expect(lapsed?["active"] == false && lapsed?["will_renew"] == false)
            }
        }
    }

    @Test("a purchase naming only its product unlocks pro at once; a refund takes it away; as_of shows before")
    func purchaseRefundAsOf() async throws {
        try await APIHarness.run { http, api in
            let put = try await http.execute(
                uri: "/v1/catalog/products/com.example.pro.monthly", method: .put, headers: api.headers(.admin), body: body(Self.product))
            #expect(put.status == .ok)
            #expect(try put.json.objectValue?["revision"] == 1)

            let purchase: JSONValue = [
                "subscriber_id": "u1", "type": "purchase", "occurred_at": "2026-03-01T10:00:00Z", "source": "web",
                "environment": "production", "idempotency_key": "order-1",
                "data": ["product_id": "com.example.pro.monthly", "transaction_id": "order-1"],
            ]
            let created = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(purchase))
            #expect(created.status == .created)
            let data = try #require(try created.events.first?["data"]?.objectValue)
            #expect(data["entitlements"] == ["pro"])
            #expect(data["period_end"] == "2026-04-01T10:00:00Z")
            #expect(data["price_minor"] == 999)
            #expect(data["catalog_revision"] == 1)
            let purchasePosition = try #require(try created.events.first?["position"]?.numberValue?.int64Value)

            let at = "2026-03-15T00:00:00Z"
            let before = try await http.execute(uri: "/v1/subscribers/u1/entitlements?at=\(at)", method: .get, headers: api.headers(.reader))
            #expect(before.status == .ok)
            let pro = try #require(try before.json.objectValue?["entitlements"]?.arrayValue?.first?.objectValue)
            #expect(pro["entitlement"] == "pro")
            #expect(pro["active"] == true)
            #expect(pro["expires_at"] == "2026-04-01T10:00:00Z")
            #expect(pro["will_renew"] == true)
            #expect(pro["product_id"] == "com.example.pro.monthly")

            let refund: JSONValue = [
                "subscriber_id": "u1", "type": "refund", "occurred_at": "2026-03-10T00:00:00Z", "source": "web",
                "environment": "production", "idempotency_key": "refund-1",
                "data": ["transaction_id": "order-1", "amount_minor": 999, "currency": "USD", "reason": "customer"],
            ]
            #expect(try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(refund)).status == .created)

            let after = try await http.execute(uri: "/v1/subscribers/u1/entitlements?at=\(at)", method: .get, headers: api.headers(.reader))
            #expect(try after.json.objectValue?["entitlements"]?.arrayValue?.first?.objectValue?["active"] == false)

            let asOf = try await http.execute(
                uri: "/v1/subscribers/u1/entitlements?at=\(at)&as_of=\(purchasePosition)", method: .get, headers: api.headers(.auditor))
            #expect(asOf.status == .ok)
            #expect(try asOf.json.objectValue?["entitlements"]?.arrayValue?.first?.objectValue?["active"] == true)
            #expect(try asOf.json.objectValue?["as_of"] == .number(JSONNumber(purchasePosition)))

            // As-of reads are for auditors.
            let denied = try await http.execute(
                uri: "/v1/subscribers/u1/entitlements?as_of=\(purchasePosition)", method: .get, headers: api.headers(.reader))
            #expect(denied.status == .forbidden)

            let windows = try await http.execute(uri: "/v1/subscribers/u1/windows", method: .get, headers: api.headers(.reader))
            let w = try #require(try windows.json.objectValue?["windows"]?.arrayValue?.first?.objectValue)
            #expect(w["start"] == "2026-03-01T10:00:00Z")
            #expect(w["end"] == "2026-03-10T00:00:00Z")
            #expect(w["cut_at"] == "2026-03-10T00:00:00Z")
            #expect(w["kind"] == "paid")
            #expect(w["transaction_id"] == "order-1")

            let oldWindows = try await http.execute(
                uri: "/v1/subscribers/u1/windows?as_of=\(purchasePosition)", method: .get, headers: api.headers(.auditor))
            #expect(try oldWindows.json.objectValue?["windows"]?.arrayValue?.first?.objectValue?["cut_at"] == .null)

            let unknown = try await http.execute(uri: "/v1/subscribers/never-bought/entitlements", method: .get, headers: api.headers(.reader))
            #expect(unknown.status == .ok)
            #expect(try unknown.json.objectValue?["entitlements"] == [])
        }
    }

    @Test("an event naming an unknown product with nothing else is refused, nothing stored")
    func unknownProduct() async throws {
        try await APIHarness.run { http, api in
            let purchase: JSONValue = [
                "subscriber_id": "u2", "type": "purchase", "occurred_at": "2026-03-01T10:00:00Z", "source": "web",
                "environment": "production", "idempotency_key": "o2", "data": ["product_id": "nope", "transaction_id": "o2"],
            ]
            let refused = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(purchase))
            #expect(refused.status == .unprocessableContent)
            #expect(refused.errorCode == "invalid_event")
            #expect(refused.errorField == "data.product_id")
            #expect(try await http.execute(uri: "/v1/events", method: .get, headers: api.headers(.auditor)).events.isEmpty)
        }
    }

    @Test("catalog changes are kept with their history and are admin-only")
    func catalogHistory() async throws {
        try await APIHarness.run { http, api in
            #expect(
                try await http.execute(uri: "/v1/catalog/products/p", method: .put, headers: api.headers(.writer), body: body(Self.product)).status
                    == .forbidden)
            _ = try await http.execute(uri: "/v1/catalog/products/p", method: .put, headers: api.headers(.admin), body: body(Self.product))
            var cheaper = Self.product.objectValue!
            cheaper["price_minor"] = 499
            let second = try await http.execute(
                uri: "/v1/catalog/products/p", method: .put, headers: api.headers(.admin), body: body(.object(cheaper)))
            #expect(try second.json.objectValue?["revision"] == 2)
            let history = try await http.execute(uri: "/v1/catalog/products/p", method: .get, headers: api.headers(.admin))
            #expect(try history.json.objectValue?["revisions"]?.arrayValue?.count == 2)
            #expect(try history.json.objectValue?["product"]?.objectValue?["price_minor"] == 499)
            let list = try await http.execute(uri: "/v1/catalog/products", method: .get, headers: api.headers(.admin))
            #expect(try list.json.objectValue?["products"]?.arrayValue?.count == 1)
            var bad = Self.product.objectValue!
            bad["period"] = nil
            let invalid = try await http.execute(uri: "/v1/catalog/products/p", method: .put, headers: api.headers(.admin), body: body(.object(bad)))
            #expect(invalid.status == .unprocessableContent)
            #expect(invalid.errorField == "period")
            #expect(try await http.execute(uri: "/v1/catalog/products/none", method: .get, headers: api.headers(.admin)).status == .notFound)
        }
    }
}
