import Foundation
import LedgerCore
import LedgerTestSupport
import PostgresNIO
import Testing

@testable import LedgerStore

@Suite("Bulk import with COPY")
struct ImportTests {
    static func event(_ i: Int, note: String = "tab\there\nnewline, back\\slash \"quoted\" é 😀") -> NewEvent {
        try! EventDecoder.decode(
            [
                "subscriber_id": .string("imp-\(i % 7)"), "type": "credit", "occurred_at": "2025-06-01T00:00:00Z", "source": "import",
                "environment": "production", "idempotency_key": .string("imp-\(i)"),
                "data": ["entitlement": "pro", "duration": "P7D", "reason": "legacy", "granted_by": "migration"],
                "metadata": ["note": .string(note), "n": .number(JSONNumber(Int64(i)))],
            ], path: "")
    }

    @Test("imported events read back byte for byte, chain and verify like appended ones; a re-import stores nothing")
    func importRoundTrip() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await store.append([Self.event(1000)])
            let batch = (0..<200).map { Self.event($0) }
            let result = try await store.importBatch(batch)
            #expect(result.createdCount == 200)
            let feed = try await store.feed(afterPosition: 0, limit: 1000)
            #expect(feed.count == 201)
            #expect(feed.map(\.position) == Array(1...201))
            #expect(feed[1].metadata == batch[0].metadata)
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
            #expect(try await store.importBatch(batch).createdCount == 0)
            await #expect(throws: StoreError.idempotencyConflict(source: "import", key: "imp-3", index: 1)) {
                try await store.importBatch([Self.event(500), Self.event(3, note: "changed")])
            }
            #expect(try await store.feed(afterPosition: 0, limit: 1000).count == 201)
        }
    }

    /// A fresh ledger's store and a bulk importer on it.
    static func withImporter(_ body: @escaping @Sendable (PostgresClient, EventStore, BulkImport) async throws -> Void) async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            try await body(client, store, BulkImport(store: store))
        }
    }

    /// Every stored event as `position subscriber version key`, in position order.
    static func log(_ store: EventStore) async throws -> [String] {
        try await store.feed(afterPosition: 0, limit: 10_000).map { "\($0.position) \($0.subscriberID) \($0.version) \($0.idempotencyKey)" }
    }

    @Test("batches prepared on the batch before them, while it is COPYed, store a gapless verified chain; a re-run stores nothing")
    func pipelinedImport() async throws {
        try await Self.withImporter { client, store, importer in
            _ = try await store.append([Self.event(1000)])
            let batches = [
                (0..<150).map { Self.event($0) }, (150..<300).map { Self.event($0) } + [Self.event(7)], (300..<320).map { Self.event($0) },
            ]
            // The import's overlap: batch n + 1 is prepared while batch n commits.
            var prepared = try await importer.prepare(batches[0], after: nil)
            var created = 0
            for next in batches.dropFirst().map(Optional.some) + [nil] {
                let writing = prepared
                async let committed = importer.commit(writing)
                var following: BulkImport.Prepared?
                if let next { following = try await importer.prepare(next, after: writing.belief) }
                let result = try await committed
                #expect(result.asPrepared)
                created += result.result.createdCount
                if let following { prepared = following }
            }
            #expect(created == 320)
            let log = try await Self.log(store)
            #expect(log.count == 321)
            #expect(try await store.feed(afterPosition: 0, limit: 1000).map(\.position) == Array(1...321))
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
            // The repeated key of the second batch (imp-7, from the first) is the stored event.
            #expect(log.filter { $0.hasSuffix(" imp-7") }.count == 1)
            // Run again: every key is stored, nothing is written.
            let again = try await importer.prepare(batches[0], after: nil)
            async let first = importer.commit(again)
            let second = try await importer.prepare(batches[1], after: again.belief)
            #expect(try await first.result.createdCount == 0)
            #expect(try await importer.commit(second).result.createdCount == 0)
            #expect(try await Self.log(store) == log)
        }
    }

    @Test("a batch prepared before another writer appended is computed again under the lock, and so is the batch prepared on it")
    func preparedBatchRefused() async throws {
        try await Self.withImporter { client, store, importer in
            let first = try await importer.prepare((0..<50).map { Self.event($0) }, after: nil)
            let second = try await importer.prepare((50..<100).map { Self.event($0) }, after: first.belief)
            // Another writer appends to one of the batch's streams between the prepare and the commit.
            _ = try await store.append([Self.event(1000)])
            let committed = try await importer.commit(first)
            #expect(!committed.asPrepared)
            #expect(committed.result.createdCount == 50)
            let after = try await importer.commit(second)
            #expect(!after.asPrepared)
            #expect(after.result.createdCount == 50)
            #expect(try await store.feed(afterPosition: 0, limit: 1000).map(\.position) == Array(1...101))
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
        }
    }

    @Test("a prepared batch that reuses a stored key with another event fails naming it, and stores nothing")
    func preparedConflict() async throws {
        try await Self.withImporter { client, store, importer in
            let first = try await importer.prepare((0..<10).map { Self.event($0) }, after: nil)
            let conflicting = try await importer.prepare([Self.event(500), Self.event(3, note: "changed")], after: first.belief)
            #expect(try await importer.commit(first).asPrepared)
            await #expect(throws: StoreError.idempotencyConflict(source: "import", key: "imp-3", index: 1)) {
                try await importer.commit(conflicting)
            }
            #expect(try await store.feed(afterPosition: 0, limit: 1000).count == 10)
        }
    }

    @Test("binary COPY writes every column type as its text form reads: numerics, timestamps, arrays, JSON, NULL")
    func binaryCopyTypes() async throws {
        try await TestDatabase.with { client, _ in
            let logger = TestDatabase.logger
            try await client.query(
                """
                CREATE TABLE binary_copy_probe (n int8, small int4, wide numeric, decimal numeric, at timestamptz, id uuid,
                    flag bool, names text[], amounts int8[], cuts bool[], doc jsonb, note text)
                """, logger: logger)
            let catalog = try await client.withConnection { try await BinaryCopy.ColumnTypes.load(["binary_copy_probe"], on: $0, logger: logger) }
            let wides: [Int128] = [0, 1, -1, 9_999, 10_000, -10_000, 123_456_789, 100_000_000, Int128(Int64.max) * 1_000, -(Int128(1) << 100)]
            let decimals = ["0", "-12", "3.50", "0.0001", "10000.00001", "+7", "000120"]
            var rows = BinaryRows(table: "binary_copy_probe", catalog: catalog)
            let at = Timestamp(microseconds: 1_764_000_000_123_456)
            let id = UUID(uuidString: "0b0e9a3c-7f4e-4c1a-9d2e-5f6a7b8c9d0e")!
            for (i, wide) in wides.enumerated() {
                rows.beginRow()
                rows.integer("n", i == 0 ? nil : Int64(i) * -1_000_000_007)
                rows.integer("small", Int64(i))
                rows.wide("wide", wide)
                rows.text("decimal", i < decimals.count ? decimals[i] : nil)
                rows.timestamp("at", i == 1 ? nil : Timestamp(microseconds: at.microseconds - Int64(i) * 86_400_000_000 * 400))
                rows.uuid("id", i == 2 ? nil : id)
                rows.bool("flag", i % 2 == 0)
                rows.textArray("names", Array(["pro", "tab\there", "quote\"back\\slash", "é😀"].prefix(i % 5)))
                rows.integerArray("amounts", (0..<(i % 3)).map { Int64($0) - 1 })
                rows.boolArray("cuts", (0..<(i % 3)).map { $0 == 1 })
                rows.json("doc", .object(["k": .string("v\n"), "n": .number(JSONNumber(Int64(i)))]))
                rows.text("note", i == 3 ? nil : "row \(i)\t\\")
                rows.endRow()
            }
            #expect(rows.unsupported == nil)
            let written = rows
            try await client.withConnection { try await written.copy(on: $0, logger: logger) }
            var got: [String] = []
            for try await text in try await client.query(
                "SELECT binary_copy_probe::text FROM binary_copy_probe ORDER BY small", logger: logger
            ).decode(String.self) {
                got.append(text)
            }
            // The same values through PostgreSQL's own text input, compared cell for cell.
            var expected: [String] = []
            for (i, wide) in wides.enumerated() {
                let names = Array(["pro", "tab\there", "quote\"back\\slash", "é😀"].prefix(i % 5))
                let row = try await client.query(
                    """
                    SELECT ROW(\(i == 0 ? nil : Int64(i) * -1_000_000_007)::int8, \(Int64(i))::int4, \(String(wide))::numeric,
                        \(i < decimals.count ? decimals[i] : nil)::numeric,
                        \(i == 1 ? nil : Timestamp(microseconds: at.microseconds - Int64(i) * 86_400_000_000 * 400).rfc3339)::timestamptz,
                        \(i == 2 ? nil : id.uuidString)::uuid, \(i % 2 == 0)::bool, \(names)::text[],
                        \((0..<(i % 3)).map { Int64($0) - 1 })::int8[], \((0..<(i % 3)).map { $0 == 1 })::bool[],
                        \("{\"k\":\"v\\n\",\"n\":\(i)}")::jsonb, \(i == 3 ? nil : "row \(i)\t\\")::text)::text
                    """, logger: logger
                ).collect()[0].decode(String.self)
                expected.append(row)
            }
            #expect(got == expected)
        }
    }

    @Test("a value its column cannot take, or a column the table lacks, fails the binary COPY instead of sending it")
    func binaryCopyRefuses() async throws {
        try await TestDatabase.with { client, _ in
            let logger = TestDatabase.logger
            try await client.query("CREATE TABLE binary_copy_small (small int2, label text)", logger: logger)
            let catalog = try await client.withConnection { try await BinaryCopy.ColumnTypes.load(["binary_copy_small"], on: $0, logger: logger) }
            /// One row of `small` and a text column named `label`.
            func row(small: Int64, label: StaticString) -> BinaryRows {
                var rows = BinaryRows(table: "binary_copy_small", catalog: catalog)
                rows.beginRow()
                rows.integer("small", small)
                rows.text(label, "x")
                rows.endRow()
                return rows
            }
            let tooWide = row(small: 40_000, label: "label")
            #expect(tooWide.unsupported?.column == "small")
            let unknown = row(small: 1, label: "missing")
            #expect(unknown.unsupported?.column == "missing")
            for rows in [tooWide, unknown] {
                await #expect(throws: BinaryCopy.Unsupported.self) { try await client.withConnection { try await rows.copy(on: $0, logger: logger) } }
            }
            #expect(try await client.query("SELECT count(*) FROM binary_copy_small", logger: logger).collect()[0].decode(Int64.self) == 0)
        }
    }
}
