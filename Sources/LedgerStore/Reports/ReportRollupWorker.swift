import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

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
    let gather: Duration
    let batchSize: Int
    private let signal = WakeSignal()

    /// `interval`: how often the worker looks without being woken (appends through other servers or the
    /// CLI); this server's appends wake it (`wake`), so an idle server keeps no connection busy. `gather`: how
    /// long a woken worker lets further appends queue before it applies them, so that one batch takes many (a
    /// batch's statement costs about as much for one queued append as for hundreds: 0.2–0.5 ms).
    public init(database: Database, interval: Duration = .seconds(10), gather: Duration = .milliseconds(100), batchSize: Int = 2000) {
        self.database = database
        self.interval = interval
        self.gather = gather
        self.batchSize = max(1, batchSize)
    }

    /// Tells the worker cells were queued (an append of this server committed).
    public func wake() { signal.signal() }

    public func run() async throws {
        let logger = database.logger
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                var lockTaken = false
                do {
                    lockTaken = try await self.drain() == nil
                } catch  where Task.isCancelled {
                    return
                } catch {
                    logger.warning("report rollups failed; retrying", metadata: ["error.message": "\(error)"])
                }
                // Another server's worker (or a rebuild) holds the lock: look again soon, as it may have taken
                // its batch before this server's cells were queued.
                await self.signal.wait(timeout: lockTaken ? .milliseconds(50) : self.interval)
                try? await Task.sleep(for: self.gather)
            }
        }
    }

    /// Applies queued rows batch by batch until the queue is empty; returns how many rows were applied, or
    /// nil when another worker or a rebuild held the lock before the queue was empty.
    @discardableResult
    public func drain() async throws -> Int? {
        var total = 0
        while try await queued() {
            guard let applied = try await applyBatch(waiting: false) else { return nil }
            total += applied
            if applied < batchSize { break }
        }
        return total
    }

    /// Everything queued when it is called is applied when it returns, unless a rebuild is running (which
    /// writes every cell afresh). A report calls it, having seen cells queued, before reading the rollups: it
    /// waits for a worker's batch in flight rather than skipping, so the report includes every event committed
    /// before it.
    public func catchUp() async throws {
        // A batch smaller than asked for took all there was: appends that commit meanwhile are not chased.
        while let applied = try await applyBatch(waiting: true), applied == batchSize {}
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
            // The oldest row through the primary key: a queue emptied as fast as it fills is mostly dead rows,
            // which a scan of the table would read (0.24 ms a look, measured) and the index skips.
            try await c.query("SELECT id FROM report_rollup_queue ORDER BY id LIMIT 1", logger: logger).collect().isEmpty == false
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
                SELECT CASE WHEN EXISTS (SELECT 1 FROM report_rollup_queue ORDER BY id LIMIT 1) THEN (SELECT applied_position FROM report_rollup_state)
                            ELSE (SELECT coalesce(max(position), 0) FROM events) END::int8
                """, logger: logger
            ).collect().first?.decode(Int64.self) ?? 0
        }
    }
}

/// Wakes a waiting worker; a signal while nobody waits is kept for the next wait (once, however many came).
final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: (id: Int, continuation: CheckedContinuation<Void, Never>)?
        var nextID = 0
    }
    private let state = Mutex(State())

    func signal() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard let w = s.waiter else {
                s.pending = true
                return nil
            }
            s.waiter = nil
            return w.continuation
        }
        waiter?.resume()
    }

    /// Returns at the next signal (at once if one is pending), after `timeout`, or when the task is cancelled.
    func wait(timeout: Duration) async {
        let id = state.withLock { s -> Int? in
            if s.pending {
                s.pending = false
                return nil
            }
            s.nextID += 1
            return s.nextID
        }
        guard let id else { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let now = self.state.withLock { s -> Bool in
                        if s.pending {
                            s.pending = false
                            return true
                        }
                        s.waiter = (id, continuation)
                        return false
                    }
                    if now { continuation.resume() }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                self.expire(id)
            }
            await group.next()
            group.cancelAll()
        }
    }

    /// Ends wait `id` if it still waits (its timeout, or cancellation).
    private func expire(_ id: Int) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard let w = s.waiter, w.id == id else { return nil }
            s.waiter = nil
            return w.continuation
        }
        waiter?.resume()
    }
}
