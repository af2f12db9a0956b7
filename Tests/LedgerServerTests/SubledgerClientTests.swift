import AsyncHTTPClient
import Foundation
import HummingbirdTesting
import LedgerCore
import LedgerTestSupport
import SubledgerClient
import Testing

@Suite("The typed client (SubledgerClient)")
struct SubledgerClientTests {
    @Test("a backend's reads through the generated client, over a real socket: entitlements, windows, the RevenueCat-compatible read")
    func reads() async throws {
        try await APIHarness.run(live: true) { http, api in
            let purchase: JSONValue = [
                "subscriber_id": "client-1", "type": "purchase", "occurred_at": "2026-03-01T10:00:00Z", "source": "web",
                "environment": "production", "idempotency_key": "client-order-1",
                "data": [
                    "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": "client-order-1", "kind": "auto_renewable",
                    "period_start": "2026-03-01T10:00:00Z", "period_end": "2026-04-01T10:00:00.250000Z", "period": "P1M",
                    "price_minor": 999, "currency": "USD",
                ],
            ]
            let appended = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(purchase))
            #expect(appended.status == .created)
            let port = try #require(http.port)
            let ledger = try Client.subledger(baseURL: "http://127.0.0.1:\(port)", key: api.keys[.reader]!)

            let at = try #require(ISO8601DateFormatter().date(from: "2026-03-15T00:00:00Z"))
            let entitlements = try await ledger.entitlements(path: .init(subscriber_id: "client-1"), query: .init(at: at)).ok.body.json
            #expect(entitlements.subscriber_id == "client-1")
            #expect(entitlements.entitlements.map(\.entitlement) == ["pro"])
            #expect(entitlements.entitlements.first?.active == true)
            #expect(entitlements.entitlements.first?.product_id == "pro.monthly")
            // A time with a fraction of a second, read exactly.
            #expect(
                entitlements.entitlements.first?.expires_at == ISO8601DateFormatter().date(from: "2026-04-01T10:00:00Z")?.addingTimeInterval(0.25))

            let windows = try await ledger.windows(path: .init(subscriber_id: "client-1")).ok.body.json
            #expect(windows.windows.count == 1)

            let compat = try await ledger.revenueCatSubscriber(path: .init(subscriber_id: "client-1")).ok.body.json
            #expect(compat.subscriber.original_app_user_id == "client-1")
            #expect(compat.subscriber.subscriptions.additionalProperties["pro.monthly"]?.store == "web")

            // Outside its role, the typed answer is the documented 403.
            let analyst = try Client.subledger(baseURL: "http://127.0.0.1:\(port)", key: api.keys[.analyst]!)
            let refused = try await analyst.entitlements(path: .init(subscriber_id: "client-1"))
            guard case .forbidden = refused else {
                Issue.record("expected 403, got \(refused)")
                return
            }
        }
    }
}
