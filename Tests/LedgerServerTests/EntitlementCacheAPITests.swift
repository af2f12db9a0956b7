import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import NIOCore
import PostgresNIO
import Prometheus
import Testing

/// The served application with its entitlement cache on: answers are the same as without it, right after
/// each append, and another process's append reaches it through NOTIFY.
@Suite("Entitlement cache over HTTP")
struct EntitlementCacheAPITests {
    static func gauge(_ http: any TestClientProtocol, _ name: String) async throws -> Double? {
        let text = String(buffer: try await http.execute(uri: "/metrics", method: .get).body)
        let line = text.split(separator: "\n").first { $0.hasPrefix("subledger_entitlement_cache_\(name) ") }
        return line.flatMap { Double($0.split(separator: " ").last!) }
    }

    static func active(_ http: any TestClientProtocol, _ headers: HTTPFields, _ subscriber: String) async throws -> Bool? {
        let response = try await http.execute(
            uri: "/v1/subscribers/\(subscriber)/entitlements?at=2026-03-15T00:00:00Z", method: .get, headers: headers)
        #expect(response.status == .ok)
        return try response.json.objectValue?["entitlements"]?.arrayValue?.first?.objectValue?["active"]?.boolValue
    }

    @Test("reads after this server's appends and another process's appends are never stale; repeats hit memory")
    func readsStayFresh() async throws {
        try await TestDatabase.withDatabase { url in
            let secret = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { owner in
                try await APIKeyStore(client: owner, logger: TestDatabase.logger).create(role: .admin, name: "cache").secret
            }
            let client = PostgresClient(
                configuration: url.clientConfiguration(role: "subledger_app", maximumConnections: 10),
                backgroundLogger: TestDatabase.logger)
            let app = try buildApplication(
                configuration: ServerConfiguration(entitlementCacheBytes: 1 << 20), client: client,
                schema: try TestDatabase.schema(), metrics: PrometheusCollectorRegistry(), logger: TestDatabase.logger)
            try await app.test(.router) { http in
                let headers: HTTPFields = [.authorization: "Bearer \(secret)", .contentType: "application/json"]
                let deadline = ContinuousClock.now + .seconds(10)
                while try await Self.gauge(http, "enabled") != 1, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(try await Self.gauge(http, "enabled") == 1)

                #expect(try await Self.active(http, headers, "c1") == nil)
                let purchase = try await http.execute(
                    uri: "/v1/events", method: .post, headers: headers, body: body(.object(eventJSON(subscriber: "c1", key: "c1-buy"))))
                #expect(purchase.status == .created)
                #expect(try await Self.active(http, headers, "c1") == true)
                // Repeated reads are answered from memory (once the trigger's notification of this very
                // append, which forgets c1 once more, has arrived).
                let hit = ContinuousClock.now + .seconds(10)
                while try await Self.gauge(http, "hits") ?? 0 < 1, ContinuousClock.now < hit {
                    #expect(try await Self.active(http, headers, "c1") == true)
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(try await Self.gauge(http, "hits") ?? 0 >= 1)

                // Another process (its own store, no shared memory) refunds: NOTIFY tells this server.
                let transaction = "t-c1-buy"
                try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { owner in
                    _ = try await EventStore(client: owner, logger: TestDatabase.logger).append([
                        SampleEvents.event(
                            subscriber: "c1", type: "refund", key: "c1-refund", occurredAt: "2026-03-10T00:00:00Z",
                            data: ["transaction_id": .string(transaction), "amount_minor": 999, "currency": "USD"])
                    ])
                    return true
                }
                let refunded = ContinuousClock.now + .seconds(10)
                while try await Self.active(http, headers, "c1") != false, ContinuousClock.now < refunded {
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(try await Self.active(http, headers, "c1") == false)
            }
            return true
        }
    }
}
