import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

/// Applies the report cells appends queue in `report_rollup_queue` (schema 0029) to the rollup tables, off the
/// append path: a backend's entitlement read right after a purchase needs the events, windows and subscriber
/// state the append writes, not the analysts' cells.
///
/// Each batch is one transaction: the oldest queued rows, summed per cell and applied with one statement
/// (`subledger_rollup_drain`), then deleted, so a worker killed mid-batch leaves its rows queued and nothing
/// counts twice. The rollup lock makes one batch run at a time across every server (the lease: whichever
/// instance takes it works, the others find it taken and wait for their next turn); the rebuild's lock, taken
/// shared, pauses the worker while a rebuild replaces the tables. Reports on the primary apply what is still
/// queued before reading (`catchUp`), so the worker's delay only bounds how much a report has to apply.
public struct ReportRollupWorker: Service {
    /// Serializes every writer of the rollup cells after an append: this worker, a report's catch-up and
    /// `RevenueDayWorker`.
    static let rollupLockKey: Int64 = 0x5355_424C_524F_4C4C

    let database: Database
    let interval: Duration
    let batchSize: Int

    public init(database: Database, interval: Duration = .milliseconds(50), batchSize: Int = 2000) {
        self.database = database
        self.interval = interval
        self.batchSize = max(1, batchSize)
    }

    public func run() async throws {
        await runPeriodically(every: interval, logger: database.logger, what: "report rollups") {
            _ = try await self.drain()
        }
    }

    /// Applies queued rows batch by batch until the queue is empty, or another worker or a rebuild holds the
    /// lock; returns how many rows were applied.
    @discardableResult
    public func drain() async throws -> Int {
        var total = 0
        while true {
            guard try await queued(), let applied = try await applyBatch(waiting: false) else { return total }
            total += applied
            if applied < batchSize { return total }
        }
    }

    /// Everything queued when it is called is applied when it returns, unless a rebuild is running (which
    /// writes every cell afresh). A report calls it before reading the rollups: it waits for a worker's batch
    /// in flight rather than skipping, so the report includes every event committed before it.
    public func catchUp() async throws {
        // A batch smaller than asked for took all there was: appends that commit meanwhile are not chased.
        while try await queued() {
            guard let applied = try await applyBatch(waiting: true), applied == batchSize else { return }
        }
    }

    /// One batch in one transaction; nil when the lock is taken (`waiting`: only by a rebuild).
    public func applyBatch(waiting: Bool = false) async throws -> Int? {
        let logger = database.logger
        let batchSize = self.batchSize
        return try await database.transaction { c -> Int? in
            let lock: PostgresQuery =
                waiting
                ? "SELECT pg_try_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey)) FROM (SELECT pg_advisory_xact_lock(\(Self.rollupLockKey))) waited"
                : "SELECT pg_try_advisory_xact_lock(\(Self.rollupLockKey)) AND pg_try_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))"
            guard try await c.query(lock, logger: logger).collect().first?.decode(Bool.self) == true else { return nil }
            let applied =
                try await c.query("SELECT subledger_rollup_drain(\(Int32(clamping: batchSize)))", logger: logger)
                .collect().first?.decode(Int32.self) ?? 0
            if applied > 0 { logger.debug("report rollups applied", metadata: ["report_rollups.applied": "\(applied)"]) }
            return Int(applied)
        }
    }

    /// Whether any cells wait (a read outside a transaction: an idle worker costs one index probe).
    func queued() async throws -> Bool {
        let logger = database.logger
        return try await database.withConnection { c in
            try await c.query("SELECT EXISTS (SELECT 1 FROM report_rollup_queue)", logger: logger).collect().first?.decode(Bool.self)
                ?? false
        }
    }

    /// The position the rollups of `database` hold: every event up to it is in the cells (while cells are
    /// queued, the log's end the last applied row was queued at; else the log's end). On a replica, where
    /// nothing is applied, a report answers it.
    public static func position(of database: Database) async throws -> Int64 {
        let logger = database.logger
        return try await database.withConnection { c in
            try await c.query(
                """
                SELECT CASE WHEN EXISTS (SELECT 1 FROM report_rollup_queue) THEN (SELECT applied_position FROM report_rollup_state)
                            ELSE (SELECT coalesce(max(position), 0) FROM events) END::int8
                """, logger: logger
            ).collect().first?.decode(Int64.self) ?? 0
        }
    }
}
