import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

/// `subledger fx import` as a user runs it: the real binary on the shipped ECB sample, against a test database.
@Suite("subledger fx import, end to end")
struct FXCLITests {
    static var root: URL { TestDatabase.schemaDirectory.deletingLastPathComponent() }

    static func run(_ arguments: [String], environment: [String: String]) async throws -> (Int32, String) {
        try await runChildProcess(root.appendingPathComponent(".build/debug/subledger"), arguments, environment: environment)
    }

    @Test("the ECB sample is one version; the same file again stores nothing; a bad file names its line and stores nothing")
    func importsTheSample() async throws {
        try #require(FileManager.default.fileExists(atPath: Self.root.appendingPathComponent(".build/debug/subledger").path))
        try await TestDatabase.with { client, _ in
            let base = ProcessInfo.processInfo.environment["DATABASE_URL"] ?? ""
            let database = try await client.query("SELECT current_database()", logger: TestDatabase.logger).collect()[0].decode(String.self)
            let environment = ["DATABASE_URL": String(base[..<(base.lastIndex(of: "/") ?? base.endIndex)]) + "/" + database]
            let sample = Self.root.appendingPathComponent("tools/data/fx/ecb-eurofxref-hist-2025-01-to-05.csv").path
            let (status, output) = try await Self.run(["fx", "import", sample], environment: environment)
            #expect(status == 0, "\(output)")
            #expect(output.contains("stored rate version 1"), "\(output)")
            let (again, second) = try await Self.run(["fx", "import", sample], environment: environment)
            #expect(again == 0 && second.contains("nothing new"), "\(second)")
            let bad = FileManager.default.temporaryDirectory.appendingPathComponent("fx-\(UUID().uuidString).csv")
            try "Date,USD,\n2025-03-03,1.0465,\n2025-03-04,x,\n".write(to: bad, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: bad) }
            let (failed, third) = try await Self.run(["fx", "import", bad.path], environment: environment)
            #expect(failed != 0 && third.contains("line 3"), "\(third)")
            let store = FXStore(client: client, logger: TestDatabase.logger)
            #expect(try await store.latestVersion() == 1)
            let usd = try await store.rates(version: 1, currencies: ["USD"], from: FXDay(iso: "2025-03-03")!, to: FXDay(iso: "2025-03-03")!)
            #expect(usd.map(\.rate) == [FXRate("1.0465")!])
        }
    }
}
