import Foundation
import LedgerCore
import Logging
import PostgresNIO
import ServiceLifecycle

/// Realized LTV cells per reporting currency (schema 0038, docs/reports.md "LTV in a reporting currency from
/// cells"): what a `currency=` LTV report reads instead of every transaction of its cohorts' members.
///
/// The cells are at one rate version and one log position, the same for every currency kept (those
/// `report_fx_cells` names). `refresh` computes them all afresh from the report facts when that list, the newest
/// rate version or a rebuild says so, reading the facts and the rollup worker's position in one statement (one
/// snapshot); `follow` then moves them along the log as `ReportRollupWorker` moves the rollups: the subscribers a
/// batch of events touches are folded before and after it, and their converted cells' difference is added. A lock
/// of their own serializes the two across servers; the rebuild's lock, taken shared, pauses them during a rebuild.
public struct ConvertedLTVCells: Sendable {
    static let lockKey: Int64 = 0x5355_424C_4C54_5643
    /// Subscribers' cells held in memory by a refresh before they are written (then summed by the upsert).
    static let flushCells = 200_000
    /// Cells written per statement.
    static let insertBatch = 20_000

    let database: Database
    let batchSize: Int
    /// The last folds of the subscribers followed, so that one touched again is not folded twice (as the rollup
    /// worker keeps its own).
    private let folds = FoldMemory()

    /// `batchSize`: events per batch of `follow`.
    public init(database: Database, batchSize: Int = 1000) {
        self.database = database
        self.batchSize = max(1, batchSize)
    }

    /// Computes every kept currency afresh when the kept list, the newest rate version or a rebuild asks for it;
    /// returns the currencies computed (empty when all are current, the rollups are incomplete, or another
    /// server holds the lock; `waiting`: wait for it instead).
    @discardableResult
    public func refresh(waiting: Bool = false) async throws -> [String] {
        let logger = database.logger
        let started = ContinuousClock.now
        let store = ReportStore(database: database)
        let result = try await database.transaction { c -> (currencies: [String], subscribers: Int, version: Int64?) in
            // A computation afresh reads every transaction in one statement: not bound by the requests' timeout.
            try await c.query("SET LOCAL statement_timeout = 0", logger: logger)
            let lock: PostgresQuery =
                waiting
                ? "SELECT true FROM (SELECT pg_advisory_xact_lock(\(Self.lockKey)), pg_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))) taken"
                : "SELECT pg_try_advisory_xact_lock(\(Self.lockKey)) AND pg_try_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))"
            guard try await c.query(lock, logger: logger).collect().first?.decode(Bool.self) == true else { return ([], 0, nil) }
            var kept: [String] = []
            for try await currency in try await c.query(
                "SELECT reporting_currency FROM report_fx_cells WHERE reporting_currency <> '' ORDER BY 1", logger: logger
            ).decode(String.self) {
                kept.append(currency)
            }
            let newest =
                try await c.query("SELECT max(version) FROM fx_rate_versions", logger: logger).collect().first?.decode(Int64?.self) ?? nil
            var held: [(currency: String, complete: Bool, version: Int64?)] = []
            for try await row in try await c.query(
                "SELECT reporting_currency, complete, fx_version FROM report_fx_ltv_state ORDER BY 1", logger: logger
            ).decode((String, Bool, Int64?).self) {
                held.append(row)
            }
            let upToDate = held.map(\.currency) == kept && held.allSatisfy { $0.complete && $0.version == newest }
            guard !upToDate else { return ([], 0, newest) }
            try await c.query("DELETE FROM report_fx_ltv_cells", logger: logger)
            try await c.query("DELETE FROM report_fx_ltv_missing", logger: logger)
            try await c.query("DELETE FROM report_fx_ltv_state", logger: logger)
            guard !kept.isEmpty else { return ([], 0, newest) }
            let table = try await store.fxTable(version: newest)
            var rates = kept.map { ReportingCurrency(currency: $0, rates: table) }
            var rollups = kept.map { _ in ConvertedLTVRollup() }
            // Every member's first paid start per key and their transactions, with the rollup worker's position
            // and whether its facts are complete: one statement, so the facts are those of that position.
            let rows = try await c.query(
                """
                WITH p AS (SELECT complete, applied_position FROM report_rollup_state),
                f AS (
                    SELECT subscriber_id, entitlement, min(first_start_us) AS first_us FROM report_runs GROUP BY subscriber_id, entitlement
                ), s AS (
                    SELECT subscriber_id, array_to_string(array_agg(entitlement ORDER BY entitlement), chr(31)) AS keys,
                           array_to_string(array_agg(first_us ORDER BY entitlement), ',') AS firsts
                    FROM f GROUP BY subscriber_id
                ), x AS (
                    SELECT s.subscriber_id, s.keys, s.firsts, \(unescaped: ReportStore.transactionColumns),
                           array_to_string(t.entitlements, chr(31)) AS transaction_entitlements
                    FROM s JOIN report_transactions t ON t.subscriber_id = s.subscriber_id
                )
                SELECT p.complete, p.applied_position, x.* FROM p LEFT JOIN x ON true ORDER BY x.subscriber_id
                """, logger: logger)
            var position: Int64?
            var subscribers = 0
            var current: String?
            var firstStarts: [String: Timestamp] = [:]
            var transactions: [RevenueTransaction] = []
            func flush() throws {
                guard !transactions.isEmpty else { return }
                let members = ReportRollup.ltvMembers(firstStarts: firstStarts, transactions: transactions)
                for i in kept.indices { try rollups[i].add(members, sign: 1, rates: &rates[i]) }
                transactions.removeAll(keepingCapacity: true)
                subscribers += 1
            }
            for try await row in rows {
                guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let complete = try cells.bool()
                let at = try cells.int64()
                guard complete else { return ([], 0, newest) }
                position = at
                guard let subscriber = try cells.optionalString() else { break }
                let (keys, firsts) = (try cells.string(), try cells.string())
                if subscriber != current {
                    try flush()
                    current = subscriber
                    firstStarts = ReportStore.firstStarts(keys: keys, firsts: firsts)
                    if rollups.contains(where: { $0.cells.count > Self.flushCells }) {
                        for (i, currency) in kept.enumerated() {
                            try await Self.write(rollups[i].pruned(), currency: currency, on: c, logger: logger)
                            rollups[i] = ConvertedLTVRollup()
                        }
                    }
                }
                var t = try ReportStore.transaction(&cells)
                t.entitlements = ReportStore.entitlements(try cells.string())
                transactions.append(t)
            }
            try flush()
            guard let position else { return ([], 0, newest) }
            for (i, currency) in kept.enumerated() {
                try await Self.write(rollups[i].pruned(), currency: currency, on: c, logger: logger)
            }
            try await c.query(
                """
                INSERT INTO report_fx_ltv_state (reporting_currency, fx_version, complete, position, computed_at)
                SELECT unnest(\(kept)::text[]), \(newest), true, \(position), now()
                """, logger: logger)
            return (kept, subscribers, newest)
        }
        if !result.currencies.isEmpty {
            logger.info(
                "reporting currency LTV cells computed",
                metadata: [
                    "fx.currencies": "\(result.currencies.joined(separator: ","))",
                    "fx.version": "\(result.version.map(String.init) ?? "none")", "report.subscribers": "\(result.subscribers)",
                    "report.seconds": "\((ContinuousClock.now - started).components.seconds)",
                ])
        }
        return result.currencies
    }

    /// Follows the log batch by batch to its end; returns how many events were applied, or nil when the lock was
    /// taken before any.
    @discardableResult
    public func drain() async throws -> Int? {
        var total = 0
        while true {
            guard let batch = try await follow() else { return total == 0 ? nil : total }
            total += batch.applied
            if !batch.full { return total }
        }
    }

    /// One batch in one transaction: the events after the cells' position (up to `batchSize`, stopping at a gap)
    /// applied to every currency; nil when the lock is taken. `applied` is 0 when the cells are not complete.
    func follow() async throws -> (applied: Int, position: Int64, full: Bool)? {
        let logger = database.logger
        let batchSize = self.batchSize
        let store = ReportStore(database: database)
        return try await database.transaction { c -> (Int, Int64, Bool)? in
            try await c.query("SET LOCAL statement_timeout = 0", logger: logger)
            let locked = try await c.query(
                "SELECT pg_try_advisory_xact_lock(\(Self.lockKey)) AND pg_try_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))",
                logger: logger
            ).collect().first?.decode(Bool.self)
            guard locked == true else { return nil }
            var kept: [(currency: String, version: Int64?, position: Int64)] = []
            for try await row in try await c.query(
                "SELECT reporting_currency, fx_version, position FROM report_fx_ltv_state WHERE complete ORDER BY 1", logger: logger
            ).decode((String, Int64?, Int64).self) {
                kept.append(row)
            }
            guard let cursor = kept.map(\.position).min() else { return (0, 0, false) }
            var end = cursor
            var subscribers = Set<String>()
            let batch = try await c.query(
                "SELECT position, subscriber_id FROM events WHERE position > \(cursor) ORDER BY position LIMIT \(Int64(batchSize))",
                logger: logger
            ).collect()
            for row in batch {
                let (position, subscriber) = try row.decode((Int64, String).self)
                guard position == end + 1 else { break }
                end = position
                subscribers.insert(subscriber)
            }
            guard end > cursor else { return (0, cursor, false) }
            let folds = self.folds
            let folded = try await ProjectionWriter(logger: logger).fold(
                subscribers, from: cursor, through: end, known: folds.known(Array(subscribers)), on: c)
            for k in kept where k.position == cursor {
                var rates = ReportingCurrency(currency: k.currency, rates: try await store.fxTable(version: k.version))
                var rollup = ConvertedLTVRollup()
                for f in folded {
                    if let old = f.previous?.facts {
                        let members = ReportRollup.ltvMembers(firstStarts: ReportRollup.firstStarts(old), transactions: old.transactions)
                        try rollup.add(members, sign: -1, rates: &rates)
                    }
                    let members = ReportRollup.ltvMembers(firstStarts: ReportRollup.firstStarts(f.facts), transactions: f.facts.transactions)
                    try rollup.add(members, sign: 1, rates: &rates)
                }
                try await Self.write(rollup.pruned(), currency: k.currency, on: c, logger: logger)
            }
            try await c.query("UPDATE report_fx_ltv_state SET position = \(end) WHERE complete AND position = \(cursor)", logger: logger)
            folds.keep(folded)
            return (Int(end - cursor), end, batch.count == batchSize)
        }
    }

    /// Whether the cells hold every event up to `target`: on a primary they follow the log first, for at most
    /// `within` (a refresh in progress holds the lock for longer; the caller then reads the facts).
    func reach(_ target: Int64, within: Duration = .seconds(2)) async throws -> Bool {
        let logger = database.logger
        let deadline = ContinuousClock.now + within
        while true {
            let (position, replica) = try await database.withConnection { c in
                try await c.query(
                    "SELECT (SELECT min(position) FROM report_fx_ltv_state WHERE complete), pg_is_in_recovery()", logger: logger
                ).collect().first?.decode((Int64?, Bool).self) ?? (nil, true)
            }
            guard let position else { return false }
            if position >= target { return true }
            guard !replica, ContinuousClock.now < deadline else { return false }
            if let batch = try await follow() {
                if batch.applied == 0 { return false }
            } else {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// Adds cells to what the currency holds.
    static func write(_ rollup: ConvertedLTVRollup, currency: String, on c: PostgresConnection, logger: Logger) async throws {
        let list = Array(rollup.cells)
        var start = 0
        while start < list.count {
            let part = list[start..<min(list.count, start + insertBatch)]
            start += insertBatch
            try await c.query(
                """
                INSERT INTO report_fx_ltv_cells AS t (
                    reporting_currency, entitlement, cohort_us, store, country, product_id, month_us, members, gross, proceeds)
                SELECT \(currency), * FROM unnest(\(part.map(\.key.entitlement))::text[], \(part.map(\.key.cohort))::int8[],
                    \(part.map(\.key.dimensions.store))::text[], \(part.map(\.key.dimensions.country))::text[],
                    \(part.map(\.key.dimensions.product))::text[], \(part.map(\.key.month))::int8[], \(part.map(\.value.members))::int8[],
                    \(part.map { String($0.value.gross) })::numeric[], \(part.map { String($0.value.proceeds) })::numeric[])
                ON CONFLICT (reporting_currency, entitlement, cohort_us, store, country, product_id, month_us) DO UPDATE SET
                    members = t.members + excluded.members, gross = t.gross + excluded.gross, proceeds = t.proceeds + excluded.proceeds
                """, logger: logger)
        }
        guard !rollup.missing.isEmpty else { return }
        let missing = Array(rollup.missing)
        try await c.query(
            """
            INSERT INTO report_fx_ltv_missing AS t
            SELECT \(currency), * FROM unnest(\(missing.map(\.key.cohort))::int8[], \(missing.map(\.key.currency))::text[],
                \(missing.map(\.value))::int8[])
            ON CONFLICT (reporting_currency, cohort_us, currency) DO UPDATE SET transactions = t.transactions + excluded.transactions
            """, logger: logger)
    }
}

/// Keeps the reporting currency LTV cells (`ConvertedLTVCells`): computes them afresh when asked, then follows
/// the log, every `interval`.
public struct ConvertedLTVWorker: Service {
    let cells: ConvertedLTVCells
    let interval: Duration

    public init(database: Database, interval: Duration = .seconds(1)) {
        self.cells = ConvertedLTVCells(database: database)
        self.interval = interval
    }

    public func run() async throws {
        await runPeriodically(every: interval, logger: cells.database.logger, what: "reporting currency LTV cells") {
            try await self.cells.refresh()
            try await self.cells.drain()
        }
    }
}

extension ReportStore {
    /// Realized LTV in a reporting currency from its cells; nil when they cannot answer (the caller reads the
    /// facts): the currency is not kept, its cells are at another rate version, being computed or behind the
    /// rollups, a transaction of the cohorts has no rate, or the filters count several entitlements once each.
    public func ltvFromConvertedCells(
        from: Timestamp, to: Timestamp, months: Int, until: Timestamp, dimensions: ReportDimensions, fx: FXUse
    ) async throws -> [Grouped<LTVCohort>]? {
        let cohorts = ReportCalendar.boundaries(from: from, to: to, interval: .month)
        guard let scope = CellScope(dimensions), let lo = cohorts.first?.microseconds, let hi = cohorts.last?.microseconds,
            cohorts.count > 1, try await useRollups()
        else { return nil }
        // Every event the rollups hold (on a primary: every event committed before this report) is in the cells.
        let target = try await ReportRollupWorker.position(of: database)
        guard try await ConvertedLTVCells(database: database).reach(target) else { return nil }
        let logger = database.logger
        let s = scope
        let cells = try await database.transaction { c -> [(cohort: Int64, group: String?, month: Int64, cell: ReportRollup.LTVCell)]? in
            try await c.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
            let usable = try await c.query(
                """
                SELECT EXISTS (SELECT 1 FROM report_fx_ltv_state WHERE reporting_currency = \(fx.currency) AND complete
                                 AND fx_version IS NOT DISTINCT FROM \(fx.version) AND position >= \(target))
                   AND NOT EXISTS (SELECT 1 FROM report_fx_ltv_missing WHERE reporting_currency = \(fx.currency) AND transactions <> 0
                                     AND cohort_us >= \(lo) AND cohort_us < \(hi))
                """, logger: logger
            ).collect().first?.decode(Bool.self)
            guard usable == true else { return nil }
            var cells: [(cohort: Int64, group: String?, month: Int64, cell: ReportRollup.LTVCell)] = []
            let rows = try await c.query(
                """
                SELECT cohort_us, \(groupOf: s), month_us, sum(members)::int8, sum(gross)::text, sum(proceeds)::text
                FROM report_fx_ltv_cells
                WHERE reporting_currency = \(fx.currency) AND \(keysOf: s) AND cohort_us >= \(lo) AND cohort_us < \(hi)
                  AND \(dimensionsOf: s)
                GROUP BY 1, 2, 3
                """, logger: logger)
            for try await (cohort, group, month, members, gross, proceeds) in rows.decode((Int64, String, Int64, Int64, String, String).self) {
                guard let g = Int128(gross), let p = Int128(proceeds) else { throw ReportOverflow(what: "the LTV in \(fx.currency)") }
                cells.append((cohort, CellScope.group(group), month, .init(members: members, gross: g, proceeds: p)))
            }
            return cells
        }
        guard let cells else { return nil }
        return ConvertedLTVRollup.cohorts(
            from: from, to: to, months: months, until: until, dimensions: dimensions, currency: fx.currency, cells: cells
        ).map { Grouped(group: $0.group, row: $0.cohort) }
    }
}
