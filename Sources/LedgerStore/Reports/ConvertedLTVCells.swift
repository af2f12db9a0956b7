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
    /// Cells written per statement.
    static let insertBatch = 20_000

    let database: Database
    let batchSize: Int
    /// Subscribers' cells held in memory by a refresh before they are written (then summed by the upsert).
    let flushCells: Int
    /// Facts' rows a refresh fetches from its cursor at a time.
    let fetchBatch: Int
    /// The last folds of the subscribers followed, so that one touched again is not folded twice (as the rollup
    /// worker keeps its own).
    private let folds = FoldMemory()

    /// `batchSize`: events per batch of `follow`; `flushCells` and `fetchBatch` bound a refresh's memory.
    public init(database: Database, batchSize: Int = 1000, flushCells: Int = 200_000, fetchBatch: Int = 10_000) {
        self.database = database
        self.batchSize = max(1, batchSize)
        self.flushCells = max(1, flushCells)
        self.fetchBatch = max(1, fetchBatch)
    }

    /// Computes every kept currency afresh when the kept list, the newest rate version or a rebuild asks for it;
    /// returns the currencies computed (empty when all are current, the rollups are incomplete, or another
    /// server holds the lock; `waiting`: wait for it instead).
    ///
    /// When only the rate version changed, the cells move to it by the days whose rates differ: the subscribers with
    /// a transaction on one of them are taken off at the old rates and added at the new ones (`move`), when they are
    /// few enough; else afresh.
    @discardableResult
    public func refresh(waiting: Bool = false) async throws -> [String] {
        try await computeOrMove(waiting: waiting) ?? []
    }

    /// Subscribers a move to a new rate version takes at most; beyond, the cells are computed afresh.
    static let moveLimit = 20_000
    /// Subscribers folded per statement by a move.
    static let moveBatch = 1_000

    /// One refresh; nil when a move found the rollups incomplete.
    private func computeOrMove(waiting: Bool) async throws -> [String]? {
        let logger = database.logger
        let started = ContinuousClock.now
        let store = ReportStore(database: database)
        let result = try await database.transaction { c -> (currencies: [String], subscribers: Int, version: Int64?, moved: Bool)? in
            // A computation afresh reads every transaction in one statement: not bound by the requests' timeout.
            try await c.query("SET LOCAL statement_timeout = 0", logger: logger)
            let lock: PostgresQuery =
                waiting
                ? "SELECT true FROM (SELECT pg_advisory_xact_lock(\(Self.lockKey)), pg_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))) taken"
                : "SELECT pg_try_advisory_xact_lock(\(Self.lockKey)) AND pg_try_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))"
            guard try await c.query(lock, logger: logger).collect().first?.decode(Bool.self) == true else { return ([], 0, nil, false) }
            var kept: [String] = []
            for try await currency in try await c.query(
                "SELECT reporting_currency FROM report_fx_cells WHERE reporting_currency <> '' ORDER BY 1", logger: logger
            ).decode(String.self) {
                kept.append(currency)
            }
            let newest =
                try await c.query("SELECT max(version) FROM fx_rate_versions", logger: logger).collect().first?.decode(Int64?.self) ?? nil
            var held: [(currency: String, complete: Bool, version: Int64?, position: Int64)] = []
            for try await row in try await c.query(
                "SELECT reporting_currency, complete, fx_version, position FROM report_fx_ltv_state ORDER BY 1", logger: logger
            ).decode((String, Bool, Int64?, Int64).self) {
                held.append(row)
            }
            let upToDate = held.map(\.currency) == kept && held.allSatisfy { $0.complete && $0.version == newest }
            guard !upToDate else { return ([], 0, newest, false) }
            if !kept.isEmpty, held.map(\.currency) == kept, held.allSatisfy(\.complete), Set(held.map(\.version)).count == 1,
                Set(held.map(\.position)).count == 1
            {
                switch try await move(from: held[0].version, to: newest, at: held[0].position, currencies: kept, on: c) {
                case .moved(let subscribers): return (kept, subscribers, newest, true)
                case .behind: return nil
                case .tooMany: break
                }
            }
            try await c.query("DELETE FROM report_fx_ltv_cells", logger: logger)
            try await c.query("DELETE FROM report_fx_ltv_missing", logger: logger)
            try await c.query("DELETE FROM report_fx_movement", logger: logger)
            try await c.query("DELETE FROM report_fx_movement_missing", logger: logger)
            try await c.query("DELETE FROM report_fx_ltv_state", logger: logger)
            guard !kept.isEmpty else { return ([], 0, newest, false) }
            // The movement cells' batches land unsummed in a table of the transaction, summed into theirs at the end:
            // their keys recur in every batch (the periods and rate dates of all subscribers), and upserting each
            // batch into the table updated every row again.
            try await c.query(
                "CREATE TEMPORARY TABLE fx_movement_staging (LIKE report_fx_movement) ON COMMIT DROP", logger: logger)
            let table = try await store.fxTable(version: newest)
            var rates = kept.map { ReportingCurrency(currency: $0, rates: table) }
            var rollups = kept.map { _ in ConvertedLTVRollup() }
            var movements = kept.map { _ in ConvertedMovementRollup() }
            // Every subscriber's paid transactions with their paid runs and first paid start per key (none for one
            // whose only service was cut before it began: no member, yet present to MRR movement), with the rollup
            // worker's position and whether its facts are complete: one statement, so the facts are those of that
            // position. Read through a cursor, a batch at a time, so that the connection is free to write the cells
            // gathered between two batches (a query streaming its rows holds the connection until it ends).
            try await c.query(
                """
                DECLARE converted_facts NO SCROLL CURSOR FOR
                WITH p AS (SELECT complete, applied_position FROM report_rollup_state),
                f AS (
                    SELECT subscriber_id, entitlement, min(first_start_us) AS first_us,
                           string_agg(concat_ws(',', start_us, coalesce(end_us::text, ''), coalesce(lapse, ''), transferred_in::int), ';'
                                      ORDER BY start_us) AS runs
                    FROM report_runs GROUP BY subscriber_id, entitlement
                ), s AS (
                    SELECT subscriber_id, array_to_string(array_agg(entitlement ORDER BY entitlement), chr(31)) AS keys,
                           array_to_string(array_agg(first_us ORDER BY entitlement), ',') AS firsts,
                           array_to_string(array_agg(runs ORDER BY entitlement), chr(30)) AS runs
                    FROM f GROUP BY subscriber_id
                ), x AS (
                    SELECT t.subscriber_id, coalesce(s.keys, '') AS keys, coalesce(s.firsts, '') AS firsts, coalesce(s.runs, '') AS runs,
                           \(unescaped: ReportStore.transactionColumns),
                           array_to_string(t.entitlements, chr(31)) AS transaction_entitlements, t.monthly_num::text, t.monthly_den::text
                    FROM report_transactions t LEFT JOIN s ON s.subscriber_id = t.subscriber_id
                )
                SELECT p.complete, p.applied_position, x.* FROM p LEFT JOIN x ON true ORDER BY x.subscriber_id
                """, logger: logger)
            func batch() async throws -> [PostgresRow] {
                try await c.query("FETCH FORWARD \(unescaped: String(fetchBatch)) FROM converted_facts", logger: logger).collect()
            }
            var position: Int64?
            var subscribers = 0
            var current: String?
            var firstStarts: [String: Timestamp] = [:]
            var runs: [PaidRun] = []
            var transactions: [RevenueTransaction] = []
            func flush() throws {
                guard !transactions.isEmpty else { return }
                let members = ReportRollup.ltvMembers(firstStarts: firstStarts, transactions: transactions)
                let facts = SubscriberFacts(runs: runs, transactions: transactions, trials: [])
                for i in kept.indices {
                    try rollups[i].add(members, sign: 1, rates: &rates[i])
                    try movements[i].add(facts, sign: 1, rates: &rates[i])
                }
                transactions.removeAll(keepingCapacity: true)
                subscribers += 1
            }
            reading: while case let rows = try await batch(), !rows.isEmpty {
                for row in rows {
                    guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                    let complete = try cells.bool()
                    let at = try cells.int64()
                    guard complete else { return ([], 0, newest, false) }
                    position = at
                    guard let subscriber = try cells.optionalString() else { break reading }
                    let (keys, firsts, encodedRuns) = (try cells.string(), try cells.string(), try cells.string())
                    if subscriber != current {
                        try flush()
                        current = subscriber
                        firstStarts = ReportStore.firstStarts(keys: keys, firsts: firsts)
                        runs = try Self.runs(keys: keys, runs: encodedRuns)
                        if rollups.contains(where: { $0.cells.count > flushCells })
                            || movements.contains(where: { $0.cells.count > flushCells })
                        {
                            for (i, currency) in kept.enumerated() {
                                try await Self.write(rollups[i].pruned(), currency: currency, on: c, logger: logger)
                                try await Self.write(movements[i].pruned(), currency: currency, staging: true, on: c, logger: logger)
                                (rollups[i], movements[i]) = (ConvertedLTVRollup(), ConvertedMovementRollup())
                            }
                        }
                    }
                    var t = try ReportStore.transaction(&cells)
                    t.entitlements = ReportStore.entitlements(try cells.string())
                    let (num, den) = (try cells.optionalString(), try cells.optionalString())
                    if let num, let den {
                        guard let n = Int128(num), let d = Int128(den), d > 0 else {
                            throw ReportOverflow(what: "the monthly amounts of \(t.currency)")
                        }
                        t.monthly = MonthlyAmount(numerator: n, denominator: d)
                    }
                    transactions.append(t)
                }
            }
            try await c.query("CLOSE converted_facts", logger: logger)
            try flush()
            guard let position else { return ([], 0, newest, false) }
            for (i, currency) in kept.enumerated() {
                try await Self.write(rollups[i].pruned(), currency: currency, on: c, logger: logger)
                try await Self.write(movements[i].pruned(), currency: currency, staging: true, on: c, logger: logger)
            }
            try await c.query(
                """
                INSERT INTO report_fx_movement
                SELECT reporting_currency, entitlement, dimension, period_interval, period_us, value, factor_num, factor_den, part,
                       denominator, sum(amount)
                FROM fx_movement_staging
                GROUP BY reporting_currency, entitlement, dimension, period_interval, period_us, value, factor_num, factor_den, part, denominator
                HAVING sum(amount) <> 0
                """, logger: logger)
            try await c.query(
                """
                INSERT INTO report_fx_ltv_state (reporting_currency, fx_version, complete, position, computed_at)
                SELECT unnest(\(kept)::text[]), \(newest), true, \(position), now()
                """, logger: logger)
            return (kept, subscribers, newest, false)
        }
        guard let result else { return nil }
        if !result.currencies.isEmpty {
            logger.info(
                result.moved
                    ? "reporting currency LTV and MRR movement cells moved to a rate version"
                    : "reporting currency LTV and MRR movement cells computed",
                metadata: [
                    "fx.currencies": "\(result.currencies.joined(separator: ","))",
                    "fx.version": "\(result.version.map(String.init) ?? "none")", "report.subscribers": "\(result.subscribers)",
                    "report.seconds": "\((ContinuousClock.now - started).components.seconds)",
                ])
        }
        return result.currencies
    }

    enum Move {
        case moved(subscribers: Int)
        /// The rollups' facts are incomplete (a rebuild left them to be computed).
        case behind
        case tooMany
    }

    /// Moves the cells of `currencies` (at log position `position`) from rate version `old` to `new`: the subscribers
    /// with a transaction on a day whose rates differ (`FXTable.daysDiffering`), as the facts hold them at that
    /// position, folded from the log at it; their cells at the old rates taken off and at the new ones added.
    private func move(from old: Int64?, to new: Int64?, at position: Int64, currencies: [String], on c: PostgresConnection) async throws -> Move {
        let logger = database.logger
        let store = ReportStore(database: database)
        let (was, now) = (try await store.fxTable(version: old), try await store.fxTable(version: new))
        let days = was.daysDiffering(from: now).map { Int64($0.days) }
        // The rollups' position and the facts in one statement: the subscribers holding such a transaction at that
        // position. Where it is not the cells' own, a subscriber who held one at the cells' position but no longer
        // does (or the reverse) has an event between the two: those are taken too, so the set is exact.
        let row = try await c.query(
            """
            SELECT r.complete, r.applied_position,
                   ARRAY(SELECT DISTINCT subscriber_id FROM report_transactions
                         WHERE occurred_us >= 0 AND occurred_us / 86400000000 = ANY(\(days)::int8[]) ORDER BY 1)
            FROM report_rollup_state r
            """, logger: logger
        ).collect().first
        guard let (complete, at, holders) = try row?.decode((Bool, Int64, [String]).self), complete else { return .behind }
        var subscribers = holders
        if at != position {
            let between = try await c.query(
                """
                SELECT DISTINCT subscriber_id FROM events WHERE position > \(min(at, position)) AND position <= \(max(at, position))
                """, logger: logger)
            var set = Set(holders)
            for try await subscriber in between.decode(String.self) { set.insert(subscriber) }
            subscribers = set.sorted()
        }
        guard subscribers.count <= Self.moveLimit else { return .tooMany }
        let writer = ProjectionWriter(logger: logger)
        var start = 0
        while start < subscribers.count {
            let chunk = Set(subscribers[start..<min(subscribers.count, start + Self.moveBatch)])
            start += Self.moveBatch
            let folded = try await writer.fold(chunk, at: position, on: c)
            for currency in currencies {
                var (before, after) = (ReportingCurrency(currency: currency, rates: was), ReportingCurrency(currency: currency, rates: now))
                var (ltv, movement) = (ConvertedLTVRollup(), ConvertedMovementRollup())
                for f in folded {
                    let members = ReportRollup.ltvMembers(firstStarts: ReportRollup.firstStarts(f.facts), transactions: f.facts.transactions)
                    try ltv.add(members, sign: -1, rates: &before)
                    try ltv.add(members, sign: 1, rates: &after)
                    try movement.add(f.facts, sign: -1, rates: &before)
                    try movement.add(f.facts, sign: 1, rates: &after)
                }
                try await Self.write(ltv.pruned(), currency: currency, on: c, logger: logger)
                try await Self.write(movement.pruned(), currency: currency, on: c, logger: logger)
            }
        }
        // Cells whose old and new amounts cancelled.
        try await c.query("DELETE FROM report_fx_movement WHERE amount = 0", logger: logger)
        try await c.query("DELETE FROM report_fx_ltv_cells WHERE members = 0 AND gross = 0 AND proceeds = 0", logger: logger)
        try await c.query("UPDATE report_fx_ltv_state SET fx_version = \(new), computed_at = now()", logger: logger)
        return .moved(subscribers: subscribers.count)
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
                var (rollup, movement) = (ConvertedLTVRollup(), ConvertedMovementRollup())
                for f in folded {
                    if let old = f.previous?.facts {
                        let members = ReportRollup.ltvMembers(firstStarts: ReportRollup.firstStarts(old), transactions: old.transactions)
                        try rollup.add(members, sign: -1, rates: &rates)
                        try movement.add(old, sign: -1, rates: &rates)
                    }
                    let members = ReportRollup.ltvMembers(firstStarts: ReportRollup.firstStarts(f.facts), transactions: f.facts.transactions)
                    try rollup.add(members, sign: 1, rates: &rates)
                    try movement.add(f.facts, sign: 1, rates: &rates)
                }
                try await Self.write(rollup.pruned(), currency: k.currency, on: c, logger: logger)
                try await Self.write(movement.pruned(), currency: k.currency, on: c, logger: logger)
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

    /// `body` for each run of at most `insertBatch` elements of `list`, in order.
    static func inBatches<Element>(_ list: [Element], _ body: (ArraySlice<Element>) async throws -> Void) async throws {
        var start = 0
        while start < list.count {
            try await body(list[start..<min(list.count, start + insertBatch)])
            start += insertBatch
        }
    }

    /// Adds cells to what the currency holds.
    static func write(_ rollup: ConvertedLTVRollup, currency: String, on c: PostgresConnection, logger: Logger) async throws {
        try await inBatches(Array(rollup.cells)) { part in
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

extension ConvertedLTVCells {
    /// A subscriber's paid runs from the refresh's encoding: per key (in `keys`' order, separated by U+001E) the
    /// runs by start, `start,end,lapse,transferred_in` separated by `;`.
    static func runs(keys: String, runs: String) throws -> [PaidRun] {
        var list: [PaidRun] = []
        for (key, encoded) in zip(
            keys.split(separator: "\u{1F}", omittingEmptySubsequences: false), runs.split(separator: "\u{1E}", omittingEmptySubsequences: false))
        {
            for run in encoded.split(separator: ";") {
                let f = run.split(separator: ",", omittingEmptySubsequences: false)
                guard f.count == 4, let start = Int64(f[0]) else { throw BinaryCells.Unexpected(column: "runs") }
                list.append(
                    PaidRun(
                        entitlement: String(key), start: Timestamp(microseconds: start), end: Int64(f[1]).map(Timestamp.init(microseconds:)),
                        lapse: LapseReason(rawValue: String(f[2])), transferredIn: f[3] == "1"))
            }
        }
        return list
    }

    /// Adds MRR movement cells to what the currency holds.
    /// `staging`: into the computation afresh's table of unsummed cells (`fx_movement_staging`).
    static func write(_ rollup: ConvertedMovementRollup, currency: String, staging: Bool = false, on c: PostgresConnection, logger: Logger)
        async throws
    {
        // Staged rows are summed once at the end of the computation afresh; the table's are added to its own.
        let (table, summing) =
            staging
            ? ("fx_movement_staging", "")
            : (
                "report_fx_movement",
                """
                ON CONFLICT (reporting_currency, entitlement, dimension, period_interval, period_us, value, factor_num, factor_den, part, denominator)
                DO UPDATE SET amount = t.amount + excluded.amount
                """
            )
        try await inBatches(Array(rollup.cells)) { part in
            try await c.query(
                """
                INSERT INTO \(unescaped: table) AS t (
                    reporting_currency, entitlement, dimension, period_interval, period_us, value, factor_num, factor_den, part, denominator,
                    amount)
                SELECT \(currency), * FROM unnest(\(part.map(\.key.entitlement))::text[], \(part.map(\.key.dimension))::text[],
                    \(part.map(\.key.interval.rawValue))::text[], \(part.map(\.key.period))::int8[], \(part.map(\.key.value))::text[],
                    \(part.map { String($0.key.factor.numerator) })::numeric[], \(part.map { String($0.key.factor.denominator) })::numeric[],
                    \(part.map { Int16($0.key.part.rawValue) })::int2[], \(part.map { String($0.key.denominator) })::numeric[],
                    \(part.map { String($0.value) })::numeric[])
                \(unescaped: summing)
                """, logger: logger)
        }
        guard !rollup.missing.isEmpty else { return }
        let missing = Array(rollup.missing)
        try await c.query(
            """
            INSERT INTO report_fx_movement_missing AS t
            SELECT \(currency), * FROM unnest(\(missing.map(\.key.currency))::text[], \(missing.map(\.key.start))::int8[],
                \(missing.map(\.key.end))::int8[], \(missing.map(\.value))::int8[])
            ON CONFLICT (reporting_currency, currency, start_us, end_us) DO UPDATE SET services = t.services + excluded.services
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

extension ReportStore {
    /// MRR movement in a reporting currency from its cells (`report_fx_movement`, kept with the LTV cells); nil when
    /// they cannot answer (the caller reads the facts): not a calendar grid, filters the movement cells do not keep
    /// (as `mrrMovementFromRollups`), the currency not kept or at another rate version, its cells behind the
    /// rollups, or a service touching the span without a rate.
    public func mrrMovementFromConvertedCells(boundaries: [Timestamp], dimensions: ReportDimensions, fx: FXUse) async throws
        -> [Grouped<MRRMovementPeriod>]?
    {
        guard let scope = MovementScope(dimensions), scope.dimension.isEmpty, let interval = Self.grid(boundaries),
            ConvertedMovementRollup.intervals.contains(interval), let from = boundaries.first?.microseconds,
            let to = boundaries.last?.microseconds, try await useRollups()
        else { return nil }
        let target = try await ReportRollupWorker.position(of: database)
        guard try await ConvertedLTVCells(database: database).reach(target) else { return nil }
        let logger = database.logger
        let s = scope
        typealias Level = (group: String?, factor: FXFactor, denominator: Int128, value: Int128)
        typealias Cell = (period: Int64, group: String?, factor: FXFactor, part: MRRMovementFigures.Part, denominator: Int128, value: Int128)
        let read = try await database.transaction { c -> (level: [Level], cells: [Cell])? in
            try await c.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
            let usable = try await c.query(
                """
                SELECT EXISTS (SELECT 1 FROM report_fx_ltv_state WHERE reporting_currency = \(fx.currency) AND complete
                                 AND fx_version IS NOT DISTINCT FROM \(fx.version) AND position >= \(target))
                   AND NOT EXISTS (SELECT 1 FROM report_fx_movement_missing WHERE reporting_currency = \(fx.currency) AND services <> 0
                                     AND start_us < \(to) AND end_us >= \(from))
                """, logger: logger
            ).collect().first?.decode(Bool.self)
            guard usable == true else { return nil }
            func number(_ text: String) throws -> Int128 {
                guard let n = Int128(text) else { throw ReportOverflow(what: "the MRR movement in \(fx.currency)") }
                return n
            }
            // The level just before the span: every day cell before it, adds less subtractions; the subscribers
            // holding MRR (expansion and contraction move money, not subscribers; part 0 counts services present).
            var level: [Level] = []
            let levels = try await c.query(
                """
                SELECT CASE \(s.groupColumn) WHEN 'entitlement' THEN entitlement WHEN 'value' THEN value ELSE '' END,
                       factor_num::text, factor_den::text, denominator::text,
                       sum(CASE WHEN denominator = 0 AND part IN (0, 3, 5) THEN 0 WHEN part BETWEEN 1 AND 4 THEN amount ELSE -amount END)::text
                FROM report_fx_movement
                WHERE reporting_currency = \(fx.currency) AND \(keysOf: s)
                  AND dimension = \(s.dimension) AND (\(s.value)::text IS NULL OR value = \(s.value)::text)
                  AND period_interval = 'day' AND period_us < \(from)
                GROUP BY 1, 2, 3, 4
                """, logger: logger)
            for try await (group, fn, fd, d, v) in levels.decode((String, String, String, String, String).self) {
                let value = try number(v)
                guard value != 0 else { continue }
                level.append((CellScope.group(group), FXFactor(numerator: try number(fn), denominator: try number(fd)), try number(d), value))
            }
            var cells: [Cell] = []
            var factors: [String: FXFactor] = [:]
            func factor(_ text: String) throws -> FXFactor {
                if let known = factors[text] { return known }
                let parts = text.split(separator: "/")
                guard parts.count == 2 else { throw ReportOverflow(what: "the MRR movement in \(fx.currency)") }
                let f = FXFactor(numerator: try number(String(parts[0])), denominator: try number(String(parts[1])))
                factors[text] = f
                return f
            }
            // Concrete decoding of each cell (`BinaryCells`): a month grid reads tens of thousands (a cell per rate
            // date), and generic tuple decoding dominated the report's time.
            let rows = try await c.query(
                """
                SELECT period_us, CASE \(s.groupColumn) WHEN 'entitlement' THEN entitlement WHEN 'value' THEN value ELSE '' END,
                       factor_num::text || '/' || factor_den::text, part::int8, denominator::text, sum(amount)::text
                FROM report_fx_movement
                WHERE reporting_currency = \(fx.currency) AND \(keysOf: s)
                  AND dimension = \(s.dimension) AND (\(s.value)::text IS NULL OR value = \(s.value)::text)
                  AND period_interval = \(interval.rawValue) AND period_us >= \(from) AND period_us < \(to)
                GROUP BY 1, 2, 3, 4, 5
                """, logger: logger)
            for try await row in rows {
                guard var cell = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let period = try cell.int64()
                let group = try cell.string()
                let f = try cell.string()
                guard let part = MRRMovementFigures.Part(rawValue: Int(try cell.int64())) else {
                    throw ReportOverflow(what: "the MRR movement in \(fx.currency)")
                }
                let d = try number(try cell.string())
                let value = try number(try cell.string())
                guard value != 0 else { continue }
                cells.append((period, CellScope.group(group), try factor(f), part, d, value))
            }
            return (level, cells)
        }
        guard let read else { return nil }
        return try ConvertedMovementRollup.periods(
            boundaries: boundaries, grouped: s.groupColumn != "", currency: fx.currency, level: read.level, cells: read.cells
        ).map { Grouped(group: $0.group, row: $0.period) }
    }
}
