import Foundation
import HTTPTypes
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

/// `Ledger-Position` on appends and reads, `min_position` / `Ledger-Min-Position` on reads (issue 19).
@Suite("Read-your-writes: Ledger-Position and min_position over HTTP")
struct ReadYourWritesAPITests {
    static let position = HTTPField.Name("Ledger-Position")!
    static let minimum = HTTPField.Name("Ledger-Min-Position")!

    static func position(_ response: TestResponse) -> Int64? {
        response.headers[position].flatMap { Int64($0) }
    }

    @Test("appends answer the highest position they reached; a replay the highest of the events it returns")
    func appendPositions() async throws {
        try await APIHarness.run { http, api in
            let one = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(eventJSON(key: "a1"))))
            #expect(one.status == .created)
            #expect(Self.position(one) == 1)
            let batch: JSONValue = .object([
                "events": .array([
                    .object(eventJSON(subscriber: "s2", key: "b1")), .object(eventJSON(subscriber: "s3", key: "b2")),
                ])
            ])
            let two = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(batch))
            #expect(two.status == .created)
            #expect(Self.position(two) == 3)
            let replay = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(eventJSON(key: "a1"))))
            #expect(replay.status == .ok)
            #expect(Self.position(replay) == 1)
            // Errors carry no position.
            let conflict = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer),
                body: body(.object(eventJSON(key: "a2", overrides: ["expected_version": 0]))))
            #expect(conflict.status == .conflict)
            #expect(conflict.headers[Self.position] == nil)
        }
    }

    @Test("every read answers the position it reflects, and honours min_position and Ledger-Min-Position")
    func readPositions() async throws {
        try await APIHarness.run { http, api in
            var last: Int64 = 0
            for i in 0..<3 {
                let r = try await http.execute(
                    uri: "/v1/events", method: .post, headers: api.headers(.writer),
                    body: body(.object(eventJSON(subscriber: "r\(i)", key: "r\(i)"))))
                last = try #require(Self.position(r))
            }
            #expect(last == 3)
            let reads = [
                "/v1/subscribers/r1/entitlements", "/v1/subscribers/r1/windows", "/v1/subscribers/r1/events",
                "/v1/events?after_position=0", "/v1/exports/events.csv", "/v1/exports/windows.csv",
                "/v1/reports/churn", "/v1/reports/revenue", "/v1/reports/trials", "/v1/reports/retention", "/v1/reports/mrr",
                "/v1/subscribers/r1/entitlements?as_of=2", "/v1/reports/churn?format=csv",
            ]
            for path in reads {
                let separator = path.contains("?") ? "&" : "?"
                let plain = try await http.execute(uri: path, method: .get, headers: api.headers(.admin))
                #expect(plain.status == .ok, "\(path)")
                #expect(Self.position(plain) == last, "\(path) without min_position")
                let query = try await http.execute(uri: path + separator + "min_position=\(last)", method: .get, headers: api.headers(.admin))
                #expect(query.status == .ok, "\(path)")
                #expect(Self.position(query) == last, "\(path) with min_position")
                var headers = api.headers(.admin)
                headers[Self.minimum] = "\(last)"
                let header = try await http.execute(uri: path, method: .get, headers: headers)
                #expect(header.status == .ok, "\(path)")
                #expect(Self.position(header) == last, "\(path) with Ledger-Min-Position")
            }
        }
    }

    @Test("a min_position the ledger has not reached is answered at once from the newest state, which says so")
    func beyondTheLedger() async throws {
        try await APIHarness.run { http, api in
            let r = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(eventJSON(key: "x1"))))
            #expect(Self.position(r) == 1)
            let start = ContinuousClock.now
            let ahead = try await http.execute(
                uri: "/v1/subscribers/sub-1/entitlements?min_position=9223372036854775807", method: .get, headers: api.headers(.reader))
            #expect(ahead.status == .ok)
            #expect(Self.position(ahead) == 1)
            #expect(ContinuousClock.now - start < .seconds(1))
        }
    }

    @Test("a malformed min_position or Ledger-Min-Position is 400 naming it")
    func malformed() async throws {
        try await APIHarness.run { http, api in
            for value in ["-1", "abc", "1.5", "", "9223372036854775808", "+3", "0x10"] {
                let q = try await http.execute(
                    uri: "/v1/subscribers/s/entitlements?min_position=\(value)", method: .get, headers: api.headers(.reader))
                #expect(q.status == .badRequest, "min_position=\(value)")
                #expect(q.errorCode == "invalid_request")
                #expect(try q.json.objectValue?["error"]?.objectValue?["message"]?.stringValue?.contains("min_position") == true)
                var headers = api.headers(.auditor)
                headers[Self.minimum] = value
                let h = try await http.execute(uri: "/v1/events", method: .get, headers: headers)
                #expect(h.status == .badRequest, "Ledger-Min-Position: \(value)")
                #expect(try h.json.objectValue?["error"]?.objectValue?["message"]?.stringValue?.contains("Ledger-Min-Position") == true)
            }
        }
    }

    /// Another process appends (no shared memory): a read with its position never comes from the older
    /// cache entry, even before the notification has arrived.
    @Test("the entitlement cache never answers a min_position read from an entry older than that position")
    func cacheRespectsMinPosition() async throws {
        try await TestDatabase.withDatabase { url in
            let secret = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { owner in
                try await APIKeyStore(client: owner, logger: TestDatabase.logger).create(role: .admin, name: "ryw").secret
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
                while try await EntitlementCacheAPITests.gauge(http, "enabled") != 1, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                try await TestDatabase.run(url.clientConfiguration(role: "subledger_app", maximumConnections: 2)) { other in
                    let store = EventStore(client: other, logger: TestDatabase.logger)
                    for i in 0..<20 {
                        let subscriber = "m\(i)"
                        // Cached: read twice (the second is a hit once the entry is stored).
                        for _ in 0..<2 {
                            let r = try await http.execute(
                                uri: "/v1/subscribers/\(subscriber)/windows", method: .get, headers: headers)
                            #expect(try r.json.objectValue?["windows"]?.arrayValue?.count == 0)
                        }
                        let appended = try await store.append([
                            SampleEvents.event(
                                subscriber: subscriber, type: "credit", key: "m\(i)", occurredAt: "2026-03-01T00:00:00Z",
                                data: ["entitlement": "pro", "duration": "P7D", "reason": "test", "granted_by": "t"])
                        ])
                        let p = appended.events[0].position
                        let r = try await http.execute(
                            uri: "/v1/subscribers/\(subscriber)/windows?min_position=\(p)", method: .get, headers: headers)
                        #expect(try r.json.objectValue?["windows"]?.arrayValue?.count == 1, "read with min_position \(p)")
                        #expect((Self.position(r) ?? 0) >= p)
                    }
                    return true
                }
                #expect(try await EntitlementCacheAPITests.gauge(http, "hits") ?? 0 >= 1)
            }
            return true
        }
    }

    /// An admin key and the application over `url` with a second client on the same database as its replica
    /// (no lag, no entitlement cache).
    static func replicaApplication(_ url: DatabaseURL) async throws -> (secret: String, app: some ApplicationProtocol) {
        let secret = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { owner in
            try await APIKeyStore(client: owner, logger: TestDatabase.logger).create(role: .admin, name: "ryw").secret
        }
        let configuration = url.clientConfiguration(role: "subledger_app", maximumConnections: 5)
        let client = PostgresClient(configuration: configuration, backgroundLogger: TestDatabase.logger)
        let replica = PostgresClient(configuration: configuration, backgroundLogger: TestDatabase.logger)
        let app = try buildApplication(
            configuration: ServerConfiguration(entitlementCacheBytes: 0), client: client,
            replicas: [(name: "replica-1", client: replica)],
            schema: try TestDatabase.schema(), metrics: PrometheusCollectorRegistry(), logger: TestDatabase.logger)
        return (secret, app)
    }

    /// A second client on the same database stands in for a replica with no lag: reads go to it, appends
    /// and as-of reads to the primary, and the answers are the same.
    @Test("with a read replica, reads are routed to it and say the position they reflect")
    func replicaRouting() async throws {
        try await TestDatabase.withDatabase { url in
            let (secret, app) = try await Self.replicaApplication(url)
            try await app.test(.router) { http in
                let headers: HTTPFields = [.authorization: "Bearer \(secret)", .contentType: "application/json"]
                let appended = try await http.execute(
                    uri: "/v1/events", method: .post, headers: headers, body: body(.object(eventJSON(key: "rep-1"))))
                let p = try #require(Self.position(appended))
                let read = try await http.execute(
                    uri: "/v1/subscribers/sub-1/entitlements?at=2026-03-15T00:00:00Z&min_position=\(p)", method: .get, headers: headers)
                #expect(read.status == .ok)
                #expect(try read.json.objectValue?["entitlements"]?.arrayValue?.first?.objectValue?["active"] == true)
                #expect((Self.position(read) ?? 0) >= p)
                let feed = try await http.execute(uri: "/v1/events?min_position=\(p)", method: .get, headers: headers)
                #expect(try feed.events.count == 1)
                let metrics = String(buffer: try await http.execute(uri: "/metrics", method: .get).body)
                let replicaReads = metrics.split(separator: "\n").first { $0.hasPrefix("subledger_reads_replica ") }
                #expect(replicaReads.flatMap { Double($0.split(separator: " ").last!) } ?? 0 >= 2, "\(metrics)")
                #expect(metrics.contains("subledger_replica_position{replica=\"replica-1\"}"))
            }
            return true
        }
    }

    /// The rollups trail the log (`ReportRollupWorker`, not running in a router test): a replica whose rollups
    /// lack the `min_position` asked for is passed over for the primary, which follows the log first.
    @Test("a report with min_position is not answered from a replica whose rollups lack it; the primary follows the log first")
    func reportsOnReplicaRollups() async throws {
        try await TestDatabase.withDatabase { url in
            let (secret, app) = try await Self.replicaApplication(url)
            // The server's worker runs: a session holding the rollup lock keeps it from applying anything, and
            // lets go while the report's catch-up waits for it.
            try await TestDatabase.run(url.clientConfiguration(maximumConnections: 1)) { owner in
                try await owner.withConnection { lock in
                    try await lock.query("SELECT pg_advisory_lock(\(Int64(0x5355_424C_524F_4C4C)))", logger: TestDatabase.logger)
                    try await app.test(.router) { http in
                        let headers: HTTPFields = [.authorization: "Bearer \(secret)", .contentType: "application/json"]
                        let appended = try await http.execute(
                            uri: "/v1/events", method: .post, headers: headers, body: body(.object(eventJSON(key: "rollup-1"))))
                        let p = try #require(Self.position(appended))
                        try await Task.sleep(for: .milliseconds(200))
                        let behind = try await lock.query(
                            "SELECT (SELECT max(position) FROM events) - applied_position FROM report_rollup_state", logger: TestDatabase.logger
                        ).collect().first?.decode(Int64.self)
                        #expect(behind == 1, "the worker could not follow the append")
                        let release = Task {
                            try await Task.sleep(for: .milliseconds(300))
                            try await lock.query("SELECT pg_advisory_unlock(\(Int64(0x5355_424C_524F_4C4C)))", logger: TestDatabase.logger)
                        }
                        let report = try await http.execute(
                            uri: "/v1/reports/revenue?from=2026-03-01&to=2026-04-01&interval=month&min_position=\(p)", method: .get,
                            headers: headers)
                        try await release.value
                        #expect(report.status == .ok)
                        #expect((Self.position(report) ?? 0) >= p)
                        let periods = try #require(try report.json.objectValue?["periods"]?.arrayValue)
                        #expect(periods.first?.objectValue?["billings"] == 999)
                        let metrics = String(buffer: try await http.execute(uri: "/metrics", method: .get).body)
                        let fallbacks = metrics.split(separator: "\n").first { $0.hasPrefix("subledger_reads_replica_fallback ") }
                        #expect(fallbacks.flatMap { Double($0.split(separator: " ").last!) } ?? 0 >= 1, "\(metrics)")
                    }
                }
            }
            return true
        }
    }
}
