import Foundation
import Glibc
import HummingbirdTesting
import LedgerTestSupport
import Metrics
import PostgresNIO
import Prometheus
import Testing

/// A request whose client goes away stops its database query (issue 13: "a request whose client
/// disconnects cancels its query"), instead of running to its statement timeout for nobody.
@Suite("Client disconnect")
struct ClientDisconnectTests {
    /// Opens a TCP connection to the server and sends `request` on it; returns the socket.
    static func send(port: Int, request: String) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port)).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        let bytes = Array(request.utf8)
        guard fd >= 0, connected == 0, Glibc.send(fd, bytes, bytes.count, 0) == bytes.count else { return -1 }
        return fd
    }

    /// Polls `count` until it equals `expected` (at most 5 s); returns the last count.
    static func await(_ expected: Int64, _ count: () async throws -> Int64) async throws -> Int64 {
        var last: Int64 = -1
        for _ in 0..<50 {
            last = try await count()
            if last == expected { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        return last
    }

    /// Polls `count` until it reaches `expected` (at most 5 s); returns the last count.
    static func await(atLeast expected: Int64, _ count: () async throws -> Int64) async throws -> Int64 {
        var last: Int64 = -1
        for _ in 0..<50 {
            last = try await count()
            if last >= expected { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        return last
    }

    /// The server's queries running now whose text is `like` the pattern.
    static func runningQueries(_ owner: PostgresClient, like pattern: String) async throws -> Int64 {
        try await owner.query(
            """
            SELECT count(*) FROM pg_stat_activity
            WHERE application_name = 'subledger' AND state = 'active' AND query LIKE \(pattern) AND pid <> pg_backend_pid()
            """, logger: TestDatabase.logger
        ).collect().first!.decode(Int64.self)
    }

    /// Each read, its query waiting for the test's lock on `table`; background workers' queries on that table
    /// (readiness, webhook delivery) wait too, and `query` does not count them.
    @Test(
        "a read stuck behind a lock is cancelled on the server when its client hangs up",
        arguments: [
            ("/v1/events?after_position=0", "events", "SELECT event_id, subscriber_id%"),
            ("/v1/subscribers/sub-1/entitlements?as_of=1", "events", "%FROM events WHERE subscriber_id = $1 AND position <=%"),
            ("/v1/catalog/products", "products", "SELECT DISTINCT ON (product_id)%"),
            ("/v1/catalog/products/pro.monthly", "products", "%FROM products WHERE product_id%"),
        ])
    func readsCancelledOnHangUp(uri: String, table: String, query: String) async throws {
        try await APIHarness.run(live: true) { http, harness in
            let port = try #require(http.port)
            // The same read first, so that the server knows where the log ends: otherwise the read under the
            // lock may wait on its look-up of the log's end (`ReadRouter`) instead of on its own query.
            let first = try await http.execute(uri: uri, method: .get, headers: harness.headers(.admin))
            #expect(first.status == .ok || first.status == .notFound)
            try await TestDatabase.run(try #require(harness.url).clientConfiguration(maximumConnections: 3)) { client in
                try await client.withConnection { locker in
                    try await locker.query("BEGIN", logger: TestDatabase.logger)
                    try await locker.query("LOCK TABLE \(unescaped: table) IN ACCESS EXCLUSIVE MODE", logger: TestDatabase.logger)
                    let fd = Self.send(
                        port: port, request: "GET \(uri) HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer \(harness.keys[.admin]!)\r\n\r\n")
                    #expect(fd >= 0)
                    // The query waits for the lock…
                    #expect(try await Self.await(1) { try await Self.runningQueries(client, like: query) } == 1)
                    close(fd)
                    // …and within a few seconds of the hang-up it is gone, while the lock is still held
                    // (without the cancel it would wait for the lock's end).
                    #expect(try await Self.await(0) { try await Self.runningQueries(client, like: query) } == 0)
                    try await locker.query("ROLLBACK", logger: TestDatabase.logger)
                }
            }
            // The server goes on serving.
            #expect(try await http.execute(uri: "/health", method: .get).status == .ok)
        }
    }

    /// Hummingbird's request counters (`hb_requests`) go to the test process's one registry.
    static var metrics: PrometheusCollectorRegistry { TestMetrics.registry }

    /// The sum of `hb_requests` counters for `route` answered with `status`.
    static func requests(_ http: any TestClientProtocol, route: String, status: Int) async throws -> Double {
        let text = String(buffer: try await http.execute(uri: "/metrics", method: .get).body)
        return text.split(separator: "\n").filter {
            $0.hasPrefix("hb_requests") && $0.contains("\"\(route)\"") && $0.contains("\"\(status)\"")
        }.compactMap { Double($0.split(separator: " ").last!) }.reduce(0, +)
    }

    @Test("a request body cut short by the client is counted as 499, not 500", arguments: ["content-length", "chunked"])
    func bodyCutShort(framing: String) async throws {
        try await APIHarness.run(live: true, metrics: Self.metrics) { http, harness in
            let port = try #require(http.port)
            let before = (
                failed: try await Self.requests(http, route: "/v1/events", status: 500),
                closed: try await Self.requests(http, route: "/v1/events", status: 499)
            )
            let head = "POST /v1/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer \(harness.keys[.writer]!)\r\n"
            let partial =
                framing == "chunked"
                ? head + "Transfer-Encoding: chunked\r\n\r\n40\r\n{\"events\": [{\"sub"
                : head + "Content-Length: 1000\r\n\r\n{\"events\": [{\"sub"
            let fd = Self.send(port: port, request: partial)
            #expect(fd >= 0)
            try await Task.sleep(for: .milliseconds(200))
            close(fd)
            // The counter is updated once the answer is written (or fails to be). The registry is the process's
            // one, and the other framing's case runs at the same time: at least this case's one more.
            let closed = Int64(before.closed) + 1
            #expect(try await Self.await(atLeast: closed) { Int64(try await Self.requests(http, route: "/v1/events", status: 499)) } >= closed)
            #expect(try await Self.requests(http, route: "/v1/events", status: 500) == before.failed)
            #expect(try await http.execute(uri: "/health", method: .get).status == .ok)
        }
    }
}
