import Foundation
import LedgerCore
import Logging
import PostgresNIO
import ServiceLifecycle

/// Turns the transactions appends queued in `report_revenue_pending` into day cells
/// (`report_revenue_days`, schema 0017), so that revenue on day and week grids reads a few rows per day.
///
/// An append writes each transaction it changed once into the queue instead of the thirty-odd day cells of
/// a monthly subscription (about 0.6 ms more per purchase under the append lock, measured with pgbench,
/// against about 3 ms for a whole lone append). Reports add what
/// is still queued, in the same snapshot as the cells, so the worker's delay never shows in a figure; it only
/// bounds how much a report has to add. One batch is one transaction (cells added, rows deleted by id), and
/// one worker runs at a time across servers: it takes the rollup lock (`ReportRollupWorker`) without waiting,
/// and the rebuild's lock shared, so it also pauses while a rebuild replaces the tables.
public struct RevenueDayWorker: Service {
    let database: Database
    let interval: Duration
    let batchSize: Int

    public init(database: Database, interval: Duration = .milliseconds(500), batchSize: Int = 5000) {
        self.database = database
        self.interval = interval
        self.batchSize = max(1, batchSize)
    }

    public func run() async throws {
        await runPeriodically(every: interval, logger: database.logger, what: "revenue day cells") {
            _ = try await self.drain()
        }
    }

    /// Applies queued rows batch by batch until the queue is empty, or another worker or a rebuild holds the
    /// lock; returns how many rows were applied.
    @discardableResult
    public func drain() async throws -> Int {
        var total = 0
        while true {
            guard let applied = try await applyBatch() else { return total }
            total += applied
            if applied < batchSize { return total }
        }
    }

    static let queueColumns = """
        change, source_event_id, entitlements, kind, currency, gross, commission, occurred_us, start_us, end_us, stop_us,
        refund_at_us, refund_amount, refund_cut, held_from_us, handed_over_us, tax, country, store, product_id
        """

    /// One batch in one transaction; nil when the lock is taken.
    public func applyBatch() async throws -> Int? {
        let logger = database.logger
        let batchSize = self.batchSize
        return try await database.transaction { c -> Int? in
            let locked = try await c.query(
                """
                SELECT pg_try_advisory_xact_lock(\(ReportRollupWorker.rollupLockKey))
                       AND pg_try_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))
                """, logger: logger
            ).collect().first?.decode(Bool.self)
            guard locked == true else { return nil }
            var rollup = ReportRollup()
            var ids: [Int64] = []
            // The oldest rows through the primary key: dead rows the last batches left are not read again.
            let rows = try await c.query(
                """
                SELECT change, \(unescaped: ReportStore.transactionColumns), id, entitlements
                FROM report_revenue_pending ORDER BY id LIMIT \(batchSize)
                """, logger: logger)
            for try await row in rows {
                guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let change = try cells.int64()
                var transaction = try ReportStore.transaction(&cells)
                ids.append(try cells.int64())
                let columns = row.makeRandomAccess()
                transaction.entitlements = try columns[columns.count - 1].decode([String].self)
                rollup.addQueuedRevenueDays(transaction, change: change)
            }
            guard !ids.isEmpty else { return 0 }
            try await c.query("SELECT subledger_rollup_add(\(RollupRows.json(rollup.pruned()))::jsonb)", logger: logger)
            // Applied rows move on to the reporting currency cells' queue while any currency is kept
            // (`ConvertedRevenueCells`): in one statement, so every snapshot sees each row in exactly one queue.
            try await c.query(
                """
                WITH moved AS (
                    DELETE FROM report_revenue_pending WHERE id = ANY(\(Int64Array(ids))::int8[])
                    RETURNING \(unescaped: Self.queueColumns))
                INSERT INTO report_fx_pending (\(unescaped: Self.queueColumns))
                SELECT * FROM moved WHERE EXISTS (SELECT 1 FROM report_fx_cells)
                """, logger: logger)
            logger.debug("revenue day cells added", metadata: ["revenue_days.applied": "\(ids.count)"])
            return ids.count
        }
    }
}
