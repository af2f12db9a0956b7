import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

/// Report rollups off the append path (schema 0029, `ReportRollupWorker`).
@Suite("Report rollups applied after the append")
struct ReportRollupQueueTests {
    static func queued(_ client: PostgresClient) async throws -> Int64 {
        try await client.query("SELECT count(*) FROM report_rollup_queue", logger: TestDatabase.logger).collect().first?
            .decode(Int64.self) ?? -1
    }

    static func revenueMonths(_ client: PostgresClient) async throws -> Int64 {
        try await client.query("SELECT count(*) FROM report_revenue_months", logger: TestDatabase.logger).collect().first?
            .decode(Int64.self) ?? -1
    }

    @Test("an append queues its cells and leaves the rollup tables alone; summed batches of any size equal the rebuild's cells")
    func batchesEqualRebuild() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let store = EventStore(database: database)
            let events = ReportRollupTests.ledger(seed: 21)
            for start in stride(from: 0, to: events.count, by: 9) {
                _ = try await store.append(Array(events[start..<min(start + 9, events.count)]))
            }
            let rows = try await Self.queued(client)
            #expect(rows > 10, "each append queued its cells")
            #expect(try await Self.revenueMonths(client) == 0, "the append wrote no rollup cell")
            // The position the rollups hold: nothing applied yet, so before the first queued append.
            #expect(try await ReportRollupWorker.position(of: database) == 0)
            let worker = ReportRollupWorker(database: database, batchSize: 13)
            #expect(try await worker.applyBatch() == 13)
            #expect(try await Self.queued(client) == rows - 13)
            #expect(try await worker.drain() == Int(rows - 13))
            let head = try await client.query("SELECT max(position) FROM events", logger: TestDatabase.logger).collect().first?
                .decode(Int64.self)
            #expect(try await ReportRollupWorker.position(of: database) == head)
            try await RevenueDayWorker(database: database).drain()
            let applied = try await ReportRollupTests.tables(client)
            #expect(applied.contains { $0.hasPrefix("report_revenue_months") })
            try await Rebuilder(database: database).rebuild()
            #expect(try await ReportRollupTests.tables(client) == applied)
            #expect(try await Self.queued(client) == 0)
            try await ReportRollupTests.expectSameReports(client, "after batches of 13")
        }
    }

    @Test("a batch that dies before its commit (a killed worker) applies nothing and leaves its rows for the next one")
    func killedBatchLosesAndDoublesNothing() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            _ = try await EventStore(database: database).append(ReportRollupTests.ledger(seed: 29))
            let rows = try await Self.queued(client)
            #expect(rows > 0)
            struct Killed: Error {}
            await #expect(throws: Killed.self) {
                try await database.transaction { c in
                    let applied = try await c.query("SELECT subledger_rollup_drain(1000)", logger: TestDatabase.logger).collect().first?
                        .decode(Int32.self)
                    #expect(applied == Int32(rows))
                    throw Killed()
                }
            }
            #expect(try await Self.queued(client) == rows)
            #expect(try await Self.revenueMonths(client) == 0)
            #expect(try await ReportRollupWorker(database: database).drain() == Int(rows))
            try await RevenueDayWorker(database: database).drain()
            let applied = try await ReportRollupTests.tables(client)
            try await Rebuilder(database: database).rebuild()
            #expect(try await ReportRollupTests.tables(client) == applied)
        }
    }

    @Test("a report right after an append includes it with no worker running: it applies the queue first")
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
            #expect(try await Self.queued(client) == 0)
            _ = try await store.append(Array(events[half...]))
            #expect(try await Self.queued(client) > 0)
            let after = try await reports.revenue(boundaries: months, interval: .month, entitlement: nil)
            #expect(after != before)
            #expect(try await Self.queued(client) == 0)
            #expect(after == (try await ReportStore(database: database, rollups: false).revenue(boundaries: months, entitlement: nil)))
        }
    }

    @Test("while a rebuild holds its lock the worker applies nothing; the rebuild leaves the queue empty")
    func rebuildPausesTheWorker() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            _ = try await EventStore(database: database).append(ReportRollupTests.ledger(seed: 21))
            let rows = try await Self.queued(client)
            let applied = try await database.transaction { c in
                try await c.query("SELECT pg_advisory_xact_lock(\(Int64(0x5355_424C_5245_4255)))", logger: TestDatabase.logger)
                return try await ReportRollupWorker(database: database).applyBatch()
            }
            #expect(applied == nil)
            #expect(try await Self.queued(client) == rows)
            try await Rebuilder(database: database).rebuild()
            #expect(try await Self.queued(client) == 0)
            try await ReportRollupTests.expectSameReports(client, "after a rebuild over a full queue")
        }
    }
}
