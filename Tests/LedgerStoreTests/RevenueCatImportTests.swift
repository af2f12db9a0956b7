import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("RevenueCat export import")
struct RevenueCatImportTests {
    /// The file's bytes in chunks of `chunk` bytes (small chunks split quoted cells across reads).
    static func input(_ text: String, name: String = "export.csv", chunk: Int = 65_536) -> RevenueCatImport.Input {
        let bytes = Array(text.utf8)
        let cursor = Cursor()
        return RevenueCatImport.Input(name: name) {
            let start = cursor.take(chunk, of: bytes.count)
            return Array(bytes[start..<min(start + chunk, bytes.count)])
        }
    }

    final class Cursor: @unchecked Sendable {
        var at = 0
        func take(_ n: Int, of count: Int) -> Int {
            defer { at = min(at + n, count) }
            return at
        }
    }

    struct Expected: Hashable, CustomStringConvertible {
        var entitlement: String
        var kind: String
        var transaction: String?
        var start: Timestamp
        var end: Timestamp?
        var description: String { "\(entitlement) \(kind) \(transaction ?? "-") [\(start), \(end.map { "\($0)" } ?? "…"))" }
    }

    /// Every window the export's rows say each subscriber has: a transaction's own period, ended early by its
    /// refund; a billing issue's grace up to the grace period's end.
    static func expected(_ rows: [RevenueCatExportGenerator.Row]) -> [String: Set<Expected>] {
        var out: [String: Set<Expected>] = [:]
        for r in rows {
            for e in r.entitlements {
                let end = r.refundedAt.map { min($0, r.end) } ?? r.end
                out[r.appUserID, default: []].insert(
                    Expected(entitlement: e, kind: r.isTrial ? "trial" : "paid", transaction: r.ledgerTransactionID, start: r.start, end: end))
                if let issue = r.billingIssueDetectedAt, let grace = r.graceEnd, grace > issue {
                    out[r.appUserID, default: []].insert(Expected(entitlement: e, kind: "grace", transaction: nil, start: issue, end: grace))
                }
            }
        }
        return out
    }

    static func checkWindows(_ rows: [RevenueCatExportGenerator.Row], client: PostgresClient) async throws {
        let reader = ProjectionReader(client: client, logger: TestDatabase.logger)
        var mismatches = 0
        for (subscriber, want) in expected(rows) {
            let ledger = try await reader.ledger(subscriberID: subscriber)
            let got = Set(
                ledger.windows.map {
                    Expected(
                        entitlement: $0.entitlement, kind: $0.kind.rawValue, transaction: $0.kind == .grace ? nil : $0.transactionID,
                        start: $0.start, end: $0.end)
                })
            if got != want {
                mismatches += 1
                if mismatches <= 3 {
                    Issue.record(
                        "\(subscriber): missing \(want.subtracting(got).sorted { $0.start < $1.start }), extra \(got.subtracting(want).sorted { $0.start < $1.start })"
                    )
                }
            }
        }
        #expect(mismatches == 0)
    }

    static func eventCount(_ client: PostgresClient) async throws -> Int {
        var n = 0
        for try await count in try await client.query("SELECT count(*)::int8 FROM events", logger: TestDatabase.logger).decode(Int64.self) {
            n = Int(count)
        }
        return n
    }

    @Test(
        "a generated export (App Store, Play Store, Stripe) imports with every subscriber's windows as the export says; re-importing appends nothing; an incremental file appends only its changes"
    )
    func generatedExport() async throws {
        try await TestDatabase.with { client, _ in
            // 1,500 subscribers by default; SUBLEDGER_RC_SUBSCRIBERS=10000 for the issue's full size.
            let size = Int(ProcessInfo.processInfo.environment["SUBLEDGER_RC_SUBSCRIBERS"] ?? "") ?? 1500
            var generator = RevenueCatExportGenerator(seed: 36, subscribers: size)
            let rows = generator.rows
            let importer = RevenueCatImport(client: client, logger: TestDatabase.logger)
            let options = RevenueCatImport.Options(batchSize: 1000, asOf: generator.exportTime)
            let first = try await importer.run(
                [Self.input(RevenueCatExportGenerator.csv(rows, version: .v7), chunk: 4093)], options: options)
            #expect(first.rows == rows.count)
            #expect(first.files.map(\.version) == ["7"])
            #expect(first.created > rows.count)
            #expect(first.badRows.isEmpty)
            #expect(try await Self.eventCount(client) == first.created)
            #expect(Set(rows.map(\.store)) == ["app_store", "play_store", "stripe"])
            #expect(rows.contains { $0.refundedAt != nil } && rows.contains { $0.billingIssueDetectedAt != nil })
            #expect(rows.contains { $0.unsubscribeDetectedAt != nil } && rows.contains(where: \.isTrial))
            #expect(Set(rows.map(\.currency)).count >= 5)
            try await Self.checkWindows(rows, client: client)

            // The same history again, as a version 5 file: nothing new.
            let again = try await importer.run([Self.input(RevenueCatExportGenerator.csv(rows, version: .v5))], options: options)
            #expect(again.created == 0)
            #expect(again.alreadyPresent == again.events)
            #expect(again.subscribersRebuilt == 0)
            #expect(try await Self.eventCount(client) == first.created)

            // A later delivery of 100 updated rows (version 6, `;`-separated): only the new facts.
            let later = ISODuration("P1D")!.added(to: generator.exportTime)
            let changed = generator.update(count: 100, at: later)
            #expect(changed.count == 100)
            let newFacts = changed.reduce(0) { n, r in
                if r.refundedAt != nil { return n + 1 }
                if r.unsubscribeDetectedAt != nil { return n + (r.end <= later ? 2 : 1) }
                return n + (r.effectiveEnd <= later ? 2 : 1)
            }
            let incremental = try await importer.run(
                [Self.input(RevenueCatExportGenerator.csv(changed, version: .v6, delimiter: ";"), name: "incremental.csv")],
                options: options)
            #expect(incremental.rows == 100)
            #expect(incremental.created == newFacts)
            #expect(try await Self.eventCount(client) == first.created + newFacts)
            try await Self.checkWindows(generator.rows, client: client)
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
        }
    }

    @Test("a bad row stops the import naming its line, column and field; --skip-bad-rows reports it and imports the rest")
    func badRows() async throws {
        let generator = RevenueCatExportGenerator(seed: 7, subscribers: 20)
        var lines = RevenueCatExportGenerator.csv(generator.rows, version: .v7).components(separatedBy: "\r\n")
        // The second row: start_time (column 8) is not a time. The first row's custom attributes hold a line
        // break, so the second row starts on line 4.
        var cells = lines[2].components(separatedBy: ",")
        let column = RevenueCatExportGenerator.header(.v7, updatedAt: true).firstIndex(of: "start_time")!
        #expect(column == 7)
        cells[column] = "yesterday"
        lines[2] = cells.joined(separator: ",")
        let text = lines.joined(separator: "\r\n")
        try await TestDatabase.with { client, _ in
            let importer = RevenueCatImport(client: client, logger: TestDatabase.logger)
            let options = RevenueCatImport.Options(asOf: generator.exportTime)
            await #expect {
                _ = try await importer.run([Self.input(text)], options: options)
            } throws: { error in
                "\(error)" == "export.csv: line 4, column 8 (start_time): must be a UTC date and time such as 2026-03-01 10:00:00"
            }
            #expect(try await Self.eventCount(client) == 0)
            var skipping = options
            skipping.skipBadRows = true
            let summary = try await importer.run([Self.input(text)], options: skipping)
            #expect(summary.badRows.map(\.error.line) == [4])
            #expect(summary.badRows.first?.error.field == "start_time")
            #expect(summary.rows == generator.rows.count)
            #expect(summary.created > 0)
        }
    }

    @Test("a file that is not a RevenueCat export of version 5–7 is refused by its header")
    func header() async throws {
        try await TestDatabase.with { client, _ in
            let importer = RevenueCatImport(client: client, logger: TestDatabase.logger)
            let options = RevenueCatImport.Options(asOf: Timestamp(microseconds: 0))
            await #expect {
                _ = try await importer.run([Self.input("subscriber_id,type\r\na,b\r\n")], options: options)
            } throws: { error in
                "\(error)".hasPrefix(
                    "export.csv: line 1 (the header): not a RevenueCat transactions export of version 5, 6 or 7: missing column(s) rc_original_app_user_id"
                )
            }
        }
    }
}

/// Writes the files of BENCHMARKS.md's RevenueCat import row when `SUBLEDGER_BENCH_DIR` names a folder: a
/// generated export of `SUBLEDGER_BENCH_SUBSCRIBERS` (default 10,000) subscribers and the same events as JSON
/// Lines for `subledger import`.
@Suite("RevenueCat bench files")
struct RevenueCatBenchFiles {
    static let folder = ProcessInfo.processInfo.environment["SUBLEDGER_BENCH_DIR"]

    @Test("the export and its events as JSON Lines", .enabled(if: folder != nil))
    func write() throws {
        let folder = try #require(Self.folder)
        let subscribers = Int(ProcessInfo.processInfo.environment["SUBLEDGER_BENCH_SUBSCRIBERS"] ?? "") ?? 10_000
        let generator = RevenueCatExportGenerator(seed: 36, subscribers: subscribers)
        let csv = RevenueCatExportGenerator.csv(generator.rows, version: .v7)
        try Data(csv.utf8).write(to: URL(fileURLWithPath: "\(folder)/revenuecat-export.csv"))
        var lines: [UInt8] = []
        var records = CSVRecordReader(read: Self.once(Array(csv.utf8)))
        let header = try RevenueCatHeader(try #require(try records.next()).fields)
        while let record = try records.next() {
            let row = try RevenueCatRow(fields: record.fields, line: record.line, header: header)
            for event in try RevenueCatMapping.events(for: row, asOf: generator.exportTime) {
                lines += event.clientContent.canonicalBytes()
                lines.append(0x0A)
            }
        }
        try Data(lines).write(to: URL(fileURLWithPath: "\(folder)/revenuecat-events.jsonl"))
    }

    static func once(_ bytes: [UInt8]) -> () -> [UInt8] {
        var sent = false
        return {
            defer { sent = true }
            return sent ? [] : bytes
        }
    }
}
