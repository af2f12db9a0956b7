import Foundation
import LedgerCore
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// Keeps the report facts (`report_runs`, `report_transactions`, `report_trials`) and the rollup cells, off the
/// append path: a backend's entitlement read right after a purchase needs the events, windows and subscriber
/// state the append writes, not the analysts' facts and cells (schema 0034, docs/reports.md "Rollups").
///
/// The worker follows the feed from a cursor (`report_rollup_state.applied_position`): the feed is gapless and
/// commits in position order (docs/event-store.md), and a batch still stops at a gap. Each batch is one
/// transaction: the subscribers its events touch are folded as they were at the cursor and as they are at the
/// batch's end; their changed fact rows and the sum of their cells' changes are written by one statement
/// (`subledger_rollup_follow`), which moves the cursor, so a worker killed mid-batch leaves the cursor where
/// it was and nothing counts twice. The rollup lock makes one batch run at a time across every server (the
/// lease: whichever instance takes it works, the others find it taken and wait for their next turn); the
/// rebuild's lock, taken shared, pauses the worker while a rebuild replaces the tables (and sets the cursor).
/// Reports on the primary apply what is behind before reading (`catchUp`), so the worker's delay only bounds
/// how much a report has to apply.
public struct ReportRollupWorker: Service {
    /// Serializes every writer of the rollup cells after an append: this worker, a report's catch-up and
    /// `RevenueDayWorker`.
    static let rollupLockKey: Int64 = 0x5355_424C_524F_4C4C

    /// The most a batch weighs, one per event plus one per entitlement it names (the first event always goes):
    /// 2,000 ordinary purchases, or about 60 of 64 entitlements.
    public static let batchWeight = 4096

    let database: Database
    let interval: Duration
    let gather: Duration
    let batchSize: Int
    private let signal = WakeSignal()
    private let folds = FoldMemory()

    /// `interval`: how often the worker looks without being woken (appends through other servers or the
    /// CLI); this server's appends wake it (`wake`), so an idle server keeps no connection busy. `gather`: how
    /// long a woken worker lets further appends commit before it follows them, so that one batch takes many
    /// (a batch's statements cost about as much for one append as for hundreds). `batchSize`: events per batch.
    public init(database: Database, interval: Duration = .seconds(10), gather: Duration = .milliseconds(100), batchSize: Int = 2000) {
        self.database = database
        self.interval = interval
        self.gather = gather
        self.batchSize = max(1, batchSize)
    }

    /// Tells the worker events were appended (an append of this server committed).
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
                // its batch before this server's events committed.
                await self.signal.wait(timeout: lockTaken ? .milliseconds(50) : self.interval)
                try? await Task.sleep(for: self.gather)
            }
        }
    }

    /// Follows the log batch by batch until the cursor is at its end; returns how many events were applied, or
    /// nil when another worker or a rebuild held the lock before that.
    @discardableResult
    public func drain() async throws -> Int? {
        var total = 0
        while try await behind() {
            guard let batch = try await follow(waiting: false) else { return nil }
            total += batch.applied
            // A batch that was not full took all there was: what commits meanwhile waits for the next
            // gathering, so that under steady appends batches stay large (each costs about as much for one
            // event as for hundreds).
            if !batch.full { break }
        }
        return total
    }

    /// Everything committed when it is called is applied when it returns, unless a rebuild is running (which
    /// writes every fact and cell afresh). A report calls it, having seen the cursor behind, before reading:
    /// it waits for a worker's batch in flight rather than skipping, so the report includes every event
    /// committed before it.
    public func catchUp() async throws {
        let logger = database.logger
        let head = try await database.withConnection { c in
            try await c.query("SELECT coalesce(max(position), 0)::int8 FROM events", logger: logger).collect().first?.decode(Int64.self) ?? 0
        }
        while let batch = try await follow(waiting: true), batch.applied > 0, batch.cursor < head {}
    }

    /// `catchUp` when the cursor is behind the log on a primary whose rollups are complete: what every reader
    /// of the report facts or cells calls first. Returns whether the rollups are complete.
    @discardableResult
    public static func catchUpIfBehind(_ database: Database) async throws -> Bool {
        let logger = database.logger
        let (complete, behind) = try await database.withConnection { c in
            try await c.query(
                """
                SELECT complete, NOT pg_is_in_recovery() AND applied_position < (SELECT coalesce(max(position), 0) FROM events)
                FROM report_rollup_state
                """, logger: logger
            ).collect().first?.decode((Bool, Bool).self) ?? (false, false)
        }
        if complete && behind { try await ReportRollupWorker(database: database).catchUp() }
        return complete
    }

    /// One batch in one transaction: how many events it applied (0: none after the cursor, or the rollups are
    /// incomplete until a rebuild); nil when the lock is taken (`waiting`: only by a rebuild).
    public func applyBatch(waiting: Bool = false) async throws -> Int? {
        try await follow(waiting: waiting)?.applied
    }

    /// `applyBatch`, also saying where it left the cursor and whether the batch was full (cut at its size or
    /// weight, so more may follow at once).
    private func follow(waiting: Bool) async throws -> (applied: Int, cursor: Int64, full: Bool)? {
        let logger = database.logger
        let batchSize = self.batchSize
        let folds = self.folds
        return try await database.transaction { c -> (Int, Int64, Bool)? in
            // A batch is bounded (its events, and each touched stream by the limits), yet follows the log for
            // every report that waits for it: not bound by the server's statement timeout, which is for requests.
            try await c.query("SET LOCAL statement_timeout = 0", logger: logger)
            let lock: PostgresQuery =
                waiting
                ? "SELECT pg_try_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey)) FROM (SELECT pg_advisory_xact_lock(\(Self.rollupLockKey))) waited"
                : "SELECT pg_try_advisory_xact_lock(\(Self.rollupLockKey)) AND pg_try_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))"
            guard try await c.query(lock, logger: logger).collect().first?.decode(Bool.self) == true else { return nil }
            guard
                let (complete, cursor) = try await c.query(
                    "SELECT complete, applied_position FROM report_rollup_state", logger: logger
                ).collect().first?.decode((Bool, Int64).self), complete
            else { return (0, 0, false) }
            // The batch: the events after the cursor, up to the first gap (none is expected: see above), and
            // while their weight fits: an event's cells grow with its entitlements (a purchase with 64 of them
            // changes about 1,600 cells), so a batch of heavy purchases is cut short to bound the cells it sums.
            var end = cursor
            var subscribers = Set<String>()
            var weight = 0
            let batch = try await c.query(
                """
                SELECT position, subscriber_id,
                       CASE jsonb_typeof(data -> \(EventDataKey.entitlements)) WHEN 'array'
                            THEN jsonb_array_length(data -> \(EventDataKey.entitlements)) ELSE 0 END
                FROM events WHERE position > \(cursor) ORDER BY position LIMIT \(Int64(batchSize))
                """,
                logger: logger
            ).collect()
            var full = batch.count == batchSize
            for row in batch {
                let (position, subscriber, entitlements) = try row.decode((Int64, String, Int32).self)
                weight += 1 + Int(entitlements)
                guard position == end + 1 else { break }
                guard end == cursor || weight <= Self.batchWeight else {
                    full = true
                    break
                }
                end = position
                subscribers.insert(subscriber)
            }
            guard end > cursor else { return (0, cursor, false) }
            let folded = try await ProjectionWriter(logger: logger).fold(
                subscribers, from: cursor, through: end, known: folds.known(Array(subscribers)), on: c)
            let rows = ProjectionJSONRows(folded, patched: true, parts: .reports)
            let moved =
                try await c.query(
                    """
                    SELECT subledger_rollup_follow(\(cursor), \(end), \(rows.deletionsText)::jsonb, \(rows.text(.reportRuns))::jsonb,
                        \(rows.text(.reportTransactions))::jsonb, \(rows.text(.reportTrials))::jsonb, \(rows.rollupText)::text)
                    """, logger: logger
                ).collect().first?.decode(Bool.self) ?? false
            guard moved else { return (0, cursor, false) }
            folds.keep(folded)
            logger.debug(
                "report rollups applied",
                metadata: ["report_rollups.events": "\(end - cursor)", "report_rollups.subscribers": "\(subscribers.count)"])
            return (Int(end - cursor), end, full)
        }
    }

    /// Whether the cursor is behind the log (a read outside a transaction: an idle worker costs two index probes).
    func behind() async throws -> Bool {
        let logger = database.logger
        return try await database.withConnection { c in
            try await c.query(
                """
                SELECT complete AND applied_position < (SELECT coalesce(max(position), 0) FROM events) FROM report_rollup_state
                """, logger: logger
            ).collect().first?.decode(Bool.self) == true
        }
    }

    /// The position the report facts and rollups of `database` hold: every event up to it is in them, none
    /// after it. On a replica, where nothing is applied, a report answers it.
    public static func position(of database: Database) async throws -> Int64 {
        let logger = database.logger
        return try await database.withConnection { c in
            try await c.query("SELECT applied_position FROM report_rollup_state", logger: logger).collect().first?.decode(Int64.self) ?? 0
        }
    }
}

/// The worker's last folds of the subscribers it followed, so that a subscriber touched again is not folded
/// twice per batch (its fold at the cursor is the one kept, when its head matches). Bounded: emptied when full.
final class FoldMemory: Sendable {
    static let capacity = 4096
    private let folds = Mutex([String: ProjectionWriter.Previous]())

    func known(_ subscribers: [String]) -> [String: ProjectionWriter.Previous] {
        folds.withLock { f in
            var out: [String: ProjectionWriter.Previous] = [:]
            for s in subscribers { if let p = f[s] { out[s] = p } }
            return out
        }
    }

    func keep(_ folded: [ProjectionWriter.Folded]) {
        folds.withLock { f in
            if f.count + folded.count > Self.capacity { f.removeAll(keepingCapacity: true) }
            for x in folded { f[x.subscriber] = x.asPrevious }
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
