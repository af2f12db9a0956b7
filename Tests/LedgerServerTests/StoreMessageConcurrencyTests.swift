import AppleStore
import Foundation
import HummingbirdTesting
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

/// Store messages take the append lock inside their own transactions, after recording themselves
/// (`StoreSession.ingest`), while plain appends commit in groups: both kinds at once, and the same message
/// delivered twice at once, must still store every fact once, in one unbroken chain.
@Suite("Store messages at once")
struct StoreMessageConcurrencyTests {
    typealias A = AppleStoreAPITests

    @Test("concurrent App Store notifications (each delivered twice at once) and plain appends: each fact stored once, the chain whole")
    func concurrentNotifications() async throws {
        let signer = try AppleTestSigner()
        try await APIHarness.run(appleRootsDER: [signer.rootDER]) { http, api in
            _ = try await http.execute(
                uri: "/v1/catalog/products/pro.monthly", method: .put, headers: api.headers(.admin), body: body(A.product))
            let subscribers = (0..<6).map { _ in UUID().uuidString.lowercased() }
            var bodies: [JSONValue] = []
            for (i, subscriber) in subscribers.enumerated() {
                let original = "90\(i)0"
                let extra: [String: JSONValue] = ["originalTransactionId": .string(original), "appAccountToken": .string(subscriber)]
                bodies.append(
                    signer.notificationBody(
                        type: "SUBSCRIBED", subtype: "INITIAL_BUY", signedDate: A.t("2026-03-01T10:00:01Z"),
                        transaction: A.txn(original, from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z", extra: extra)))
                bodies.append(
                    signer.notificationBody(
                        type: "DID_RENEW", signedDate: A.t("2026-04-01T10:00:01Z"),
                        transaction: A.txn("90\(i)1", from: "2026-04-01T10:00:00Z", to: "2026-05-01T10:00:00Z", extra: extra)))
            }
            let answers = try await withThrowingTaskGroup(of: (Int, String?).self) { group in
                for (i, b) in (bodies + bodies).enumerated() {
                    group.addTask {
                        let r = try await http.execute(
                            uri: "/v1/stores/apple/notifications", method: .post, headers: api.headers(.writer), body: body(b))
                        return (r.status.code, try? r.json.objectValue?["status"]?.stringValue)
                    }
                    // Plain appends of other subscribers, committed in groups meanwhile.
                    group.addTask {
                        let e: JSONValue = .object(["events": [.object(eventJSON(subscriber: "plain-\(i % 5)", key: "plain-\(i)"))]])
                        let r = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(e))
                        return (r.status.code, "plain")
                    }
                }
                var out: [(Int, String?)] = []
                for try await a in group { out.append(a) }
                return out
            }
            for (code, status) in answers {
                #expect(code == 200 || code == 201, "status \(code) (\(status ?? "-"))")
                #expect(["applied", "duplicate", "plain"].contains(status ?? ""))
            }
            for subscriber in subscribers {
                let r = try await http.execute(
                    uri: "/v1/subscribers/\(subscriber)/entitlements?at=2026-04-15T00:00:00Z", method: .get, headers: api.headers(.reader))
                #expect(try r.json.objectValue?["entitlements"]?.arrayValue?.count == 1, "\(subscriber) renewed")
            }
            let url = try #require(api.url)
            let (events, applied) = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 1)) { c in
                var counts = (0, 0)
                for try await n in try await c.query("SELECT count(*)::int8 FROM events WHERE source = 'apple'").decode(Int64.self) {
                    counts.0 = Int(n)
                }
                for try await n in try await c.query(
                    "SELECT count(*)::int8 FROM store_inbox WHERE store = 'apple' AND status = 'applied'"
                ).decode(Int64.self) { counts.1 = Int(n) }
                return counts
            }
            // One purchase and one renewal per subscriber, whatever the deliveries.
            #expect(events == 2 * subscribers.count)
            #expect(applied == bodies.count)
            let verify = try await http.execute(uri: "/v1/audit/verify", method: .get, headers: api.headers(.auditor))
            #expect(try verify.json.objectValue?["ok"] == true)
            #expect(try verify.json.objectValue?["events_checked"] == .number(JSONNumber(Int64(2 * subscribers.count + bodies.count * 2))))
        }
    }
}
