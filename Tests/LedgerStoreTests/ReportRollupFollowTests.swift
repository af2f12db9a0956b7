import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

/// Report facts and rollups written by `ReportRollupWorker` as it follows the log (schema 0034), off the append path.
@Suite("Report facts and rollups follow the log")
struct ReportRollupFollowTests {
    /// How many events the worker's cursor is behind the log's end.
    static func behind(_ client: PostgresClient) async throws -> Int64 {
        try await client.query(
            "SELECT (SELECT coalesce(max(position), 0) FROM events) - applied_position FROM report_rollup_state",
            logger: TestDatabase.logger
        ).collect().first?.decode(Int64.self) ?? -1
    }

    static func count(_ client: PostgresClient, _ table: String) async throws -> Int64 {
        try await client.query("SELECT count(*) FROM \(unescaped: table)", logger: TestDatabase.logger).collect().first?
            .decode(Int64.self) ?? -1
    }

    static func head(_ client: PostgresClient) async throws -> Int64 {
        try await client.query("SELECT coalesce(max(position), 0) FROM events", logger: TestDatabase.logger).collect().first?
            .decode(Int64.self) ?? -1
    }

    /// The facts and cells the worker wrote (the day cells' queue applied) are those a rebuild writes.
    static func expectRebuildEqual(_ client: PostgresClient, _ database: Database) async throws {
        try await RevenueDayWorker(database: database).drain()
        let applied = try await ReportRollupTests.tables(client)
        let facts = try await ProjectionTests.dump(client)
        try await Rebuilder(database: database).rebuild()
        #expect(try await ReportRollupTests.tables(client) == applied)
        #expect(try await ProjectionTests.dump(client) == facts)
    }

    @Test("an append writes no report fact and no cell; batches of any size equal the rebuild's facts and cells")
    func batchesEqualRebuild() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let store = EventStore(database: database)
            let events = ReportRollupTests.ledger(seed: 21)
            for start in stride(from: 0, to: events.count, by: 9) {
                _ = try await store.append(Array(events[start..<min(start + 9, events.count)]))
            }
            let head = try await Self.head(client)
            #expect(head > 26)
            #expect(try await Self.behind(client) == head, "the worker has followed nothing yet")
            #expect(try await Self.count(client, "report_revenue_months") == 0, "the append wrote no rollup cell")
            #expect(try await Self.count(client, "report_transactions") == 0, "the append wrote no report fact")
            #expect(try await Self.count(client, "windows") > 0, "the append wrote the windows")
            #expect(try await ReportRollupWorker.position(of: database) == 0)
            let worker = ReportRollupWorker(database: database, batchSize: 13)
            #expect(try await worker.applyBatch() == 13)
            #expect(try await ReportRollupWorker.position(of: database) == 13)
            #expect(try await worker.applyBatch() == 13)
            #expect(try await worker.drain() == Int(head - 26))
            #expect(try await ReportRollupWorker.position(of: database) == head)
            #expect(try await worker.applyBatch() == 0, "nothing after the log's end")
            try await RevenueDayWorker(database: database).drain()
            let applied = try await ReportRollupTests.tables(client)
            let facts = try await ProjectionTests.dump(client)
            #expect(applied.contains { $0.hasPrefix("report_revenue_months") })
            try await Rebuilder(database: database).rebuild()
            #expect(try await ReportRollupTests.tables(client) == applied)
            #expect(try await ProjectionTests.dump(client) == facts)
            #expect(try await ReportRollupWorker.position(of: database) == head)
            try await ReportRollupTests.expectSameReports(client, "after batches of 13")
        }
    }

    @Test("a batch of heavy purchases is cut by its weight (an event and its entitlements), and still ends equal to the rebuild")
    func heavyBatchesAreCut() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let entitlements = (0..<64).map { JSONValue.string("e\($0)") }
            let events = try (0..<80).map { i -> NewEvent in
                let day = String(format: "%02d", i % 28 + 1)
                return try EventDecoder.decode(
                    [
                        "subscriber_id": .string("heavy-\(i % 20)"), "type": "purchase",
                        "occurred_at": .string("2026-0\(i % 9 + 1)-\(day)T10:00:00Z"), "source": "gen", "environment": "production",
                        "idempotency_key": .string("heavy-\(i)"),
                        "data": [
                            "product_id": "pro.pack", "transaction_id": .string("heavy-\(i)"), "entitlements": .array(entitlements),
                            "duration": "P1M", "kind": "non_renewing", "price_minor": 999, "currency": "USD",
                        ],
                    ], path: "")
            }
            _ = try await EventStore(database: database).append(events)
            let perBatch = ReportRollupWorker.batchWeight / 65
            let worker = ReportRollupWorker(database: database)
            #expect(try await worker.applyBatch() == perBatch)
            #expect(try await worker.drain() == 80 - perBatch, "the drain goes on past a batch cut by its weight")
            #expect(try await Self.behind(client) == 0)
            try await Self.expectRebuildEqual(client, database)
        }
    }

    @Test("a batch that fails after writing part of its rows (a killed worker) leaves the cursor, facts and cells as they were")
    func failedBatchLosesAndDoublesNothing() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            _ = try await EventStore(database: database).append(ReportRollupTests.ledger(seed: 29))
            let head = try await Self.head(client)
            // The cells are written after the facts, in the same statement: fail there.
            try await client.query(
                """
                CREATE FUNCTION pg_temp_fail_cells() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'killed mid-batch'; END $$
                """, logger: TestDatabase.logger)
            try await client.query(
                "CREATE TRIGGER fail_cells BEFORE INSERT ON report_revenue_months FOR EACH ROW EXECUTE FUNCTION pg_temp_fail_cells()",
                logger: TestDatabase.logger)
            await #expect(throws: (any Error).self) { try await ReportRollupWorker(database: database).applyBatch() }
            #expect(try await Self.behind(client) == head)
            #expect(try await Self.count(client, "report_transactions") == 0)
            #expect(try await Self.count(client, "report_rollup_queue") == 0)
            try await client.query("DROP TRIGGER fail_cells ON report_revenue_months", logger: TestDatabase.logger)
            try await client.query("DROP FUNCTION pg_temp_fail_cells()", logger: TestDatabase.logger)
            #expect(try await ReportRollupWorker(database: database).drain() == Int(head))
            try await Self.expectRebuildEqual(client, database)
        }
    }

    @Test("a report right after an append includes it with no worker running: it follows the log first")
    func reportCatchesUp() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let store = EventStore(database: database)
            let events = ReportRollupTests.ledger(seed: 31)
            let half = events.count / 2
            _ = try await store.append(Array(events[..<half]))
            let reports = ReportStore(database: database)
            let months = ReportCalendar.boundaries(
                from: ReportRollupTests.t("2025-11-01"), to: ReportRollupTests.t("2027-03-01"), interval: .month)
            let before = try await reports.revenue(boundaries: months, interval: .month, entitlement: nil)
            #expect(try await Self.behind(client) == 0)
            _ = try await store.append(Array(events[half...]))
            #expect(try await Self.behind(client) > 0)
            let after = try await reports.revenue(boundaries: months, interval: .month, entitlement: nil)
            #expect(after != before)
            #expect(try await Self.behind(client) == 0)
            #expect(after == (try await ReportStore(database: database, rollups: false).revenue(boundaries: months, entitlement: nil)))
        }
    }

    @Test("while a rebuild holds its lock the worker applies nothing; the rebuild leaves the cursor at the log's end")
    func rebuildPausesTheWorker() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            _ = try await EventStore(database: database).append(ReportRollupTests.ledger(seed: 21))
            let behind = try await Self.behind(client)
            #expect(behind > 0)
            let applied = try await database.transaction { c in
                try await c.query("SELECT pg_advisory_xact_lock(\(Int64(0x5355_424C_5245_4255)))", logger: TestDatabase.logger)
                return try await ReportRollupWorker(database: database).applyBatch()
            }
            #expect(applied == nil)
            #expect(try await Self.behind(client) == behind)
            try await Rebuilder(database: database).rebuild()
            #expect(try await Self.behind(client) == 0)
            try await ReportRollupTests.expectSameReports(client, "after a rebuild with the worker behind")
        }
    }
}
