import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import NIOCore
import PostgresNIO
import Testing

@Suite("Audit: checkpoints, verify and CSV exports over HTTP")
struct AuditAPITests {
    @Test("a sealed checkpoint and the chains verify; a row altered behind the service's back is named")
    func checkpointAndTamper() async throws {
        try await TestDatabase.withDatabase { url in
            let keys = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { owner in
                let store = APIKeyStore(client: owner, logger: TestDatabase.logger)
                return (try await store.create(role: .writer, name: "w").secret, try await store.create(role: .auditor, name: "a").secret)
            }
            let client = PostgresClient(configuration: url.clientConfiguration(role: "subledger_app"), backgroundLogger: TestDatabase.logger)
            let app = try buildApplication(
                configuration: ServerConfiguration(), client: client, schema: try TestDatabase.schema(), logger: TestDatabase.logger)
            try await app.test(.router) { http in
                let writer: HTTPFields = [.authorization: "Bearer \(keys.0)"]
                let auditor: HTTPFields = [.authorization: "Bearer \(keys.1)"]
                let batch: JSONValue = .object(["events": .array((0..<12).map { .object(eventJSON(subscriber: "s\($0 % 4)", key: "k\($0)")) })])
                let created = try await http.execute(uri: "/v1/events", method: .post, headers: writer, body: body(batch))
                #expect(created.status == .created)

                #expect(try await http.execute(uri: "/v1/audit/checkpoints", method: .post, headers: writer).status == .forbidden)
                let sealed = try await http.execute(uri: "/v1/audit/checkpoints", method: .post, headers: auditor)
                #expect(sealed.status == .created)
                let checkpoint = try #require(try sealed.json.objectValue)
                #expect(checkpoint["position"] == 12)
                #expect(checkpoint["streams"] == 4)
                #expect(checkpoint["merkle_root"]?.stringValue?.count == 64)

                let ok = try await http.execute(uri: "/v1/audit/verify", method: .get, headers: auditor)
                #expect(try ok.json.objectValue?["ok"] == true)
                #expect(try ok.json.objectValue?["events_checked"] == 12)
                #expect(try ok.json.objectValue?["checkpoints_checked"] == 1)

                // Behind the service's back: the owner disables the trigger and edits one event's data.
                let victim = try #require(try created.events[5]["event_id"]?.stringValue)
                _ = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 1)) { owner in
                    try await owner.withConnection { c in
                        try await c.query("ALTER TABLE events DISABLE TRIGGER events_reject_update_delete", logger: TestDatabase.logger)
                        try await c.query(
                            "UPDATE events SET metadata = '{\"edited\": true}' WHERE event_id = \(UUID(uuidString: victim)!)",
                            logger: TestDatabase.logger)
                        try await c.query("ALTER TABLE events ENABLE ALWAYS TRIGGER events_reject_update_delete", logger: TestDatabase.logger)
                    }
                    return true
                }
                let broken = try await http.execute(uri: "/v1/audit/verify", method: .get, headers: auditor)
                #expect(try broken.json.objectValue?["ok"] == false)
                #expect(try broken.json.objectValue?["event_id"] == .string(victim))
                #expect(try broken.json.objectValue?["broken_events"] == 1)
                // The stored hashes were not touched, so the sealed root still matches them.
                #expect(try broken.json.objectValue?["broken_checkpoints"] == [])
            }
            return true
        }
    }

    @Test("events.csv and windows.csv stream every row, with from/to on recorded time")
    func exports() async throws {
        try await APIHarness.run { http, api in
            for chunk in stride(from: 0, to: 2500, by: 1000) {
                let batch: JSONValue = .object([
                    "events": .array((chunk..<min(2500, chunk + 1000)).map { .object(eventJSON(subscriber: "e\($0 % 50)", key: "x\($0)")) })
                ])
                #expect(try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(batch)).status == .created)
            }
            let csv = try await http.execute(uri: "/v1/exports/events.csv", method: .get, headers: api.headers(.auditor))
            #expect(csv.status == .ok)
            #expect(csv.headers[.contentType]?.hasPrefix("text/csv") == true)
            let lines = String(buffer: csv.body).split(separator: "\r\n")
            try #require(lines.count == 2501)
            #expect(lines[0].hasPrefix("position,event_id,subscriber_id"))
            #expect(lines[1].hasPrefix("1,"))
            #expect(lines[2500].hasPrefix("2500,"))
            // JSON columns quoted, quotes doubled.
            #expect(lines[1].contains(",\"{\"\"commission_rate\"\":\"\"0.30\"\",\"\"currency\"\":\"\"USD\"\""))

            let none = try await http.execute(uri: "/v1/exports/events.csv?to=2000-01-01T00:00:00Z", method: .get, headers: api.headers(.auditor))
            #expect(String(buffer: none.body).split(separator: "\r\n").count == 1)
            let bad = try await http.execute(uri: "/v1/exports/events.csv?from=yesterday", method: .get, headers: api.headers(.auditor))
            #expect(bad.status == .badRequest)

            let windows = try await http.execute(uri: "/v1/exports/windows.csv", method: .get, headers: api.headers(.auditor))
            let wl = String(buffer: windows.body).split(separator: "\r\n")
            try #require(wl.count == 2501)  // one window per purchase
            #expect(wl[0].hasPrefix("subscriber_id,entitlement,start,end,kind"))
            #expect(try await http.execute(uri: "/v1/exports/windows.csv", method: .get, headers: api.headers(.reader)).status == .forbidden)
        }
    }
}
