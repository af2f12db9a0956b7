import AppleStore
import Foundation
import HummingbirdTesting
import LedgerCore
import LedgerStore
import LedgerTestSupport
import NIOCore
import PostgresNIO
import StoreAdapters
import StripeStore
import Testing

/// How many SQL statements one store message costs (docs/data-flow.md keeps the counts).
///
/// pg_stat_statements needs `shared_preload_libraries`, which the private cluster does not load (and cannot be
/// restarted for a test): the count is read from the server's own log instead. The test's database alone gets
/// `log_statement = 'all'` (before the application connects), and the lines the server logs for it
/// (`execute …` for the extended protocol, `statement: …` for a simple query) while one message is posted are
/// counted. The log is `SUBLEDGER_PG_LOG`, else `server.log` beside the cluster's data directory (tools/pg).
enum StatementLog {
    static func file() async throws -> URL? {
        if let path = ProcessInfo.processInfo.environment["SUBLEDGER_PG_LOG"], !path.isEmpty { return URL(fileURLWithPath: path) }
        let data = try await TestDatabase.run(try TestDatabase.superuserURL().clientConfiguration(maximumConnections: 1)) { c in
            var dir = ""
            for try await d in try await c.query("SELECT current_setting('data_directory')").decode(String.self) { dir = d }
            return dir
        }
        let log = URL(fileURLWithPath: data).deletingLastPathComponent().appendingPathComponent("server.log")
        return FileManager.default.isReadableFile(atPath: log.path) ? log : nil
    }

    /// Every later session of the test's database logs its statements.
    static func enable(_ url: DatabaseURL) async throws {
        try await TestDatabase.run(try TestDatabase.superuserURL().clientConfiguration(maximumConnections: 1)) { c in
            try await c.query("ALTER DATABASE \(unescaped: url.database) SET log_statement = 'all'", logger: TestDatabase.logger)
        }
    }

    static func size(_ file: URL) -> UInt64 {
        ((try? FileManager.default.attributesOfItem(atPath: file.path))?[.size] as? NSNumber)?.uint64Value ?? 0
    }

    /// The statements logged after `offset`, each with the process id of the backend that ran it, and their
    /// first words (for the doc).
    static func statements(_ file: URL, after offset: UInt64) throws -> [(pid: String, text: String)] {
        let handle = try FileHandle(forReadingFrom: file)
        defer { try? handle.close() }
        try handle.seek(toOffset: offset)
        let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        var out: [(pid: String, text: String)] = []
        for line in text.split(separator: "\n") {
            for marker in [" LOG:  execute ", " LOG:  statement: "] {
                guard let r = line.range(of: marker) else { continue }
                var rest = line[r.upperBound...]
                if marker.contains("execute"), let colon = rest.firstIndex(of: ":") { rest = rest[rest.index(after: colon)...] }
                // The default log_line_prefix: `%m [%p] `.
                let pid = line.split(separator: "[", maxSplits: 1).dropFirst().first?.split(separator: "]").first.map(String.init) ?? ""
                out.append((pid, rest.trimmingCharacters(in: .whitespaces).prefix(60).description))
            }
        }
        return out
    }

    /// The message's transaction: the statements of the backend that looked it up (`StoreTransaction.lookup`)
    /// or recorded it in the inbox, from its BEGIN to its COMMIT. Background services (the report rollup
    /// worker, woken by the commit before) run on other connections meanwhile and are not the message's.
    static func transaction(_ all: [(pid: String, text: String)]) -> [String] {
        guard let record = all.firstIndex(where: { $0.text.hasPrefix("WITH req AS (") || $0.text.hasPrefix("INSERT INTO store_inbox") })
        else { return all.map(\.text) }
        let pid = all[record].pid
        let mine = all.enumerated().filter { $0.element.pid == pid }
        let begin = mine.last { $0.offset < record && $0.element.text == "BEGIN" }?.offset ?? mine.first!.offset
        let commit = mine.first { $0.offset > record && $0.element.text == "COMMIT" }?.offset ?? mine.last!.offset
        return mine.filter { $0.offset >= begin && $0.offset <= commit }.map(\.element.text)
    }

    /// The statements from the one that takes the append lock (`subledger_append_tail`) on, by their first two
    /// words: what other writers wait for.
    static func underAppendLock(_ statements: [String]) -> [String] {
        statements.drop { !$0.hasPrefix("SELECT recorded_at,") }.map { s in
            s.split(separator: " ").prefix(2).joined(separator: " ").replacingOccurrences(of: ",", with: "")
                .replacingOccurrences(of: "(", with: " ").split(separator: " ").prefix(2).joined(separator: " ")
        }
    }

    /// Waits until the log has been flushed past a marker statement, then gives the message's transaction
    /// among what came before it.
    static func measure(_ file: URL, url: DatabaseURL, _ body: () async throws -> Void) async throws -> [String] {
        let start = size(file)
        try await body()
        let marker = "statement_count_marker_\(UInt64.random(in: 0...UInt64.max))"
        try await TestDatabase.run(url.clientConfiguration(maximumConnections: 1)) { c in
            try await c.query("SELECT \(unescaped: "'" + marker + "'")", logger: TestDatabase.logger)
        }
        for _ in 0..<50 {
            let all = try statements(file, after: start)
            if let i = all.firstIndex(where: { $0.text.contains(marker) }) { return transaction(Array(all[..<i])) }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("the marker never reached the server log")
        return []
    }
}

@Suite("SQL statements per store message", .serialized)
struct StatementCountTests {
    typealias S = StripeHelpers

    @Test("one Stripe invoice.paid of a known customer")
    func stripeInvoicePaid() async throws {
        guard let log = try await StatementLog.file() else { return }
        try await APIHarness.run(prepare: StatementLog.enable) { http, api in
            let url = try #require(api.url)
            try await S.catalog(http, api)
            let checkout = S.object(
                "checkout.session",
                [
                    "id": "cs_A", "mode": "subscription", "client_reference_id": "web-a", "customer": "cus_A", "subscription": "sub_A",
                    "payment_status": "paid", "status": "complete",
                ])
            _ = try await S.post(http, S.event("evt_cs", "checkout.session.completed", at: "2026-03-01T10:00:06Z", checkout))
            let warm = S.event(
                "evt_in1", "invoice.paid", at: "2026-03-01T10:00:05Z",
                S.invoice(
                    "in_1", "subscription_create", customer: "cus_A", sub: "sub_A", pi: "pi_1", paidAt: "2026-03-01T10:00:00Z",
                    lines: [S.line("il_1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")]))
            #expect(S.status(try await S.post(http, warm)) == "applied")
            let paid = S.event(
                "evt_in2", "invoice.paid", at: "2026-04-01T10:00:05Z",
                S.invoice(
                    "in_2", "subscription_cycle", customer: "cus_A", sub: "sub_A", pi: "pi_2", paidAt: "2026-04-01T10:00:00Z",
                    lines: [S.line("il_2", 1000, "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "pro.monthly")]))
            var status: String?
            let statements = try await StatementLog.measure(log, url: url) {
                status = S.status(try await S.post(http, paid))
            }
            #expect(status == "applied")
            print("statements per stripe invoice.paid: \(statements.count)\n  " + statements.joined(separator: "\n  "))
            #expect(statements.count > 0)
            // Under the append lock: the lock with the tail, the append, the links its payment learns (their
            // pending messages looked for once), COMMIT.
            let locked = StatementLog.underAppendLock(statements)
            #expect(locked.first == "SELECT recorded_at" && locked.last == "COMMIT" && locked.count <= 5, "\(locked)")
            #expect(statements.count <= 11, "\(statements)")
        }
    }

    @Test("one App Store notification of a known subscriber")
    func appleNotification() async throws {
        guard let log = try await StatementLog.file() else { return }
        let signer = try AppleTestSigner()
        try await APIHarness.run(appleRootsDER: [signer.rootDER], prepare: StatementLog.enable) { http, api in
            let url = try #require(api.url)
            func post(_ b: JSONValue) async throws -> TestResponse {
                try await http.execute(uri: "/v1/stores/apple/notifications", method: .post, headers: api.headers(.writer), body: body(b))
            }
            _ = try await http.execute(
                uri: "/v1/catalog/products/pro.monthly", method: .put, headers: api.headers(.admin), body: body(AppleStoreAPITests.product))
            let subscribed = signer.notificationBody(
                type: "SUBSCRIBED", subtype: "INITIAL_BUY", signedDate: AppleStoreAPITests.t("2026-03-01T10:00:01Z"),
                transaction: AppleStoreAPITests.txn("5000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z"))
            var first: JSONValue?
            let linking = try await StatementLog.measure(log, url: url) {
                first = try await post(subscribed).json.objectValue?["status"]
            }
            #expect(first == "applied")
            // A new subscriber named by appAccountToken: one look-up, then its inbox row and its account's link in
            // one statement (docs/data-flow.md, "What a message reads and writes before its append").
            #expect(
                linking.map { String($0.prefix(14)) } == [
                    "BEGIN", "WITH req AS (", "WITH taken AS ", "SELECT event_i", "SELECT recorde", "SELECT subledg", "COMMIT",
                ], "\(linking)")
            #expect(linking.count(where: { $0.hasPrefix("INSERT INTO store_inbox") }) == 0)
            let renew = signer.notificationBody(
                type: "DID_RENEW", signedDate: AppleStoreAPITests.t("2026-04-01T10:00:01Z"),
                transaction: AppleStoreAPITests.txn("5001", from: "2026-04-01T10:00:00Z", to: "2026-05-01T10:00:00Z"))
            var status: JSONValue?
            let statements = try await StatementLog.measure(log, url: url) {
                status = try await post(renew).json.objectValue?["status"]
            }
            #expect(status == "applied")
            print("statements per apple notification: \(statements.count)\n  " + statements.joined(separator: "\n  "))
            #expect(statements.count > 0)
            // Under the append lock: the lock with the tail, the append, COMMIT (the message recorded before).
            #expect(StatementLog.underAppendLock(statements) == ["SELECT recorded_at", "SELECT subledger_append", "COMMIT"])
            // Its account is linked already: the look-up and the inbox row, then the append.
            #expect(
                statements.map { String($0.prefix(14)) } == [
                    "BEGIN", "WITH req AS (", "INSERT INTO st", "SELECT event_i", "SELECT recorde", "SELECT subledg", "COMMIT",
                ], "\(statements)")
        }
    }
}
