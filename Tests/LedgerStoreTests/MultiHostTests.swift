import Foundation
import LedgerTestSupport
import Logging
import PostgresNIO
import Testing

@testable import LedgerStore

/// Multi-host URLs (libpq's `h1:p1,h2:p2`, repeated `--database-url`) and the choice of the writable host.
@Suite("Multi-host database URLs and the writable host")
struct MultiHostTests {
    @Test("libpq's multi-host syntax: hosts in order, default port, IPv6, target_session_attrs; the password never printed")
    func parse() throws {
        let url = try DatabaseURL("postgresql://u:s%40cret@h1:5433,h2,[::1]:6000/ledger?target_session_attrs=read-write&sslmode=disable")
        #expect(url.endpoints.map(\.description) == ["h1:5433", "h2:5432", "[::1]:6000"])
        #expect(url.isMultiHost)
        #expect(url.host == "h1" && url.port == 5433)
        #expect(url.password == "s@cret" && url.username == "u" && url.database == "ledger")
        #expect(url.targetSessionAttrs == "read-write" && url.sslMode == "disable")
        #expect(url.description == "postgres://u@h1:5433,h2:5432,[::1]:6000/ledger")
        #expect(url.single(url.endpoints[1]).description == "postgres://u@h2:5432/ledger")
        #expect(!(try DatabaseURL("postgres://u:p@127.0.0.1:5432/db")).isMultiHost)
        #expect(throws: DatabaseURL.ParseError.self) { try DatabaseURL("postgres://u:p@h1:5432,/db") }
        #expect(throws: DatabaseURL.ParseError.self) { try DatabaseURL("postgres://u:p@h1:99999/db") }
        #expect(throws: DatabaseURL.ParseError.self) { try DatabaseURL("postgres://u:p@h1/db?target_session_attrs=standby") }
    }

    @Test("repeated URLs add hosts; they must name the same user, password and database")
    func adding() throws {
        let a = try DatabaseURL("postgres://u:p@h1:1/db")
        let both = try a.adding(DatabaseURL("postgres://u:p@h2:2/db"))
        #expect(both.endpoints.map(\.description) == ["h1:1", "h2:2"])
        #expect(throws: DatabaseURL.ParseError.self) { try a.adding(DatabaseURL("postgres://u:other@h2:2/db")) }
    }

    @Test("a host that is down is skipped, a read-only one is recognised, the writable one is used")
    func choosesWritable() async throws {
        try await TestDatabase.withDatabase { url in
            let logger = TestDatabase.logger
            // Port 1 on loopback: nothing listens there.
            let down = url.single(.init(host: "127.0.0.1", port: 1))
            #expect(await PrimaryClient.probe(down, logger: logger) == .unreachable)
            #expect(await PrimaryClient.probe(url, logger: logger, timeout: .seconds(20)) == .writable)
            try await TestDatabase.run(url.clientConfiguration(maximumConnections: 1)) { owner in
                try await owner.query("ALTER DATABASE \(unescaped: url.database) SET default_transaction_read_only = on")
                return true
            }
            #expect(await PrimaryClient.probe(url, logger: logger, timeout: .seconds(20)) == .readOnly)
            // From another database: sessions on this one are read-only now.
            try await TestDatabase.run(try TestDatabase.baseURL().clientConfiguration(maximumConnections: 1)) { owner in
                try await owner.query("ALTER DATABASE \(unescaped: url.database) RESET default_transaction_read_only")
                return true
            }

            var multi = down
            multi.endpoints.append(url.endpoints[0])
            let primary = PrimaryClient(url: multi, logger: logger) { $0.clientConfiguration(maximumConnections: 2) }
            let database = Database(provider: primary, logger: logger, leaseTimeout: .seconds(2))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await primary.run() }
                var answer: Int?
                for _ in 0..<100 where answer == nil {
                    answer = try? await database.withConnection { c in
                        try await c.query("SELECT 1", logger: logger).collect().first?.decode(Int.self)
                    }
                    if answer == nil { try await Task.sleep(for: .milliseconds(50)) }
                }
                #expect(answer == 1)
                #expect(primary.currentEndpoint == url.endpoints[0])
                group.cancelAll()
            }
            return true
        }
    }
}
