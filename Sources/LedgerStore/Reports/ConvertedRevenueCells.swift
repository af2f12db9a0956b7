import Foundation
import LedgerCore
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// Revenue day cells with store, country and product, per reporting currency the ledger keeps and in the
/// transactions' own currencies (schemas 0031 and 0032, docs/reports.md "Revenue in a reporting currency from
/// cells"): what a `currency=` revenue report, and revenue by a dimension on day and week grids, read instead of
/// every transaction of their span.
///
/// A currency's cells are at one rate version. `refresh` computes incomplete currencies afresh and moves those at
/// an older version through the transactions of the days the newer versions touched, reading the facts less the
/// rows still queued (in `report_revenue_pending` and in `report_fx_pending`; the facts and the first queue are
/// written together by `ReportRollupWorker`) in one
/// statement, so one snapshot; `drain` then adds the queued rows as `RevenueDayWorker` moves them over. A lock of
/// their own serializes the two across servers, so the append, the day cells' worker and the reports' catch-up
/// never wait for a refresh.
public struct ConvertedRevenueCells: Sendable {
    static let lockKey: Int64 = 0x5355_424C_4658_4356
    /// Cells written per statement of a refresh.
    static let insertBatch = 20_000

    let database: Database
    let batchSize: Int

    public init(database: Database, batchSize: Int = 5000) {
        self.database = database
        self.batchSize = max(1, batchSize)
    }

    /// Keeps exactly `currencies` (ISO 4217 codes) besides the own-currency cells (always kept): a new one is
    /// added incomplete (the next `refresh` computes it), one no longer named is dropped with its cells.
    public func keep(_ currencies: [String]) async throws {
        let logger = database.logger
        let list = Array(Set(currencies + [ConvertedRevenueDays.ownCurrencies])).sorted()
        try await database.transaction { c in
            try await c.query("SELECT pg_advisory_xact_lock(\(Self.lockKey))", logger: logger)
            try await c.query(
                "DELETE FROM report_fx_cells WHERE reporting_currency <> ALL(\(list)::text[])", logger: logger)
            try await c.query(
                "DELETE FROM report_fx_revenue_days WHERE reporting_currency <> ALL(\(list)::text[])", logger: logger)
            try await c.query(
                "DELETE FROM report_fx_missing WHERE reporting_currency <> ALL(\(list)::text[])", logger: logger)
            try await c.query(
                """
                INSERT INTO report_fx_cells (reporting_currency) SELECT unnest(\(list)::text[])
                ON CONFLICT (reporting_currency) DO NOTHING
                """, logger: logger)
        }
    }

    /// Recomputes the currencies that are incomplete or at an older rate version than the newest; returns
    /// them (empty when all are current, or another server holds the lock). `waiting`: wait for a server's
    /// worker or a rebuild that holds the lock instead (the CLI, which promises current cells when it returns).
    @discardableResult
    public func refresh(waiting: Bool = false) async throws -> [String] {
        let logger = database.logger
        let started = ContinuousClock.now
        let store = ReportStore(database: database)
        let result = try await database.transaction { c -> (currencies: [String], transactions: Int, version: Int64?) in
            let lock: PostgresQuery =
                waiting
                ? "SELECT true FROM (SELECT pg_advisory_xact_lock(\(Self.lockKey)), pg_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))) taken"
                : "SELECT pg_try_advisory_xact_lock(\(Self.lockKey)) AND pg_try_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))"
            // A computation afresh reads every transaction in one statement (minutes on ten million events): not
            // bound by the server's statement timeout, which is for requests.
            try await c.query("SET LOCAL statement_timeout = 0", logger: logger)
            let locked = try await c.query(lock, logger: logger).collect().first?.decode(Bool.self)
            guard locked == true else { return ([], 0, nil) }
            let newest =
                try await c.query("SELECT max(version) FROM fx_rate_versions", logger: logger).collect().first?
                .decode(Int64?.self) ?? nil
            // Incomplete currencies are computed afresh; complete ones at an older version are moved to the newest
            // through the transactions whose date's rate the versions between changed.
            var fresh: [String] = []
            var moving: [Int64?: [String]] = [:]
            for try await (currency, complete, version) in try await c.query(
                """
                SELECT reporting_currency, complete, fx_version FROM report_fx_cells
                WHERE NOT complete OR (reporting_currency <> '' AND fx_version IS DISTINCT FROM \(newest)) ORDER BY 1
                """, logger: logger
            ).decode((String, Bool, Int64?).self) {
                if complete { moving[version, default: []].append(currency) } else { fresh.append(currency) }
            }
            guard !fresh.isEmpty || !moving.isEmpty else { return ([], 0, newest) }
            let table = try await store.fxTable(version: newest)
            var count = 0
            if !fresh.isEmpty {
                count += try await Self.recompute(fresh, to: table, from: nil, days: nil, on: c, logger: logger)
            }
            for (old, currencies) in moving {
                let previous = try await store.fxTable(version: old)
                let days = try await Self.daysMoved(after: old, through: newest, on: c, logger: logger)
                count += try await Self.recompute(currencies, to: table, from: previous, days: days, on: c, logger: logger)
            }
            let stale = (fresh + moving.values.flatMap { $0 }).sorted()
            try await c.query(
                """
                UPDATE report_fx_cells SET complete = true, fx_version = \(newest), computed_at = now()
                WHERE reporting_currency = ANY(\(stale)::text[])
                """, logger: logger)
            return (stale, count, newest)
        }
        if !result.currencies.isEmpty {
            logger.info(
                "reporting currency cells computed",
                metadata: [
                    "fx.currencies": "\(result.currencies.joined(separator: ","))",
                    "fx.version": "\(result.version.map(String.init) ?? "none")", "report.transactions": "\(result.transactions)",
                    "report.seconds": "\((ContinuousClock.now - started).components.seconds)",
                ])
        }
        return result.currencies
    }

    /// Adds the queued rows to every complete currency, batch by batch; returns how many rows were applied
    /// (nil when another server or a refresh holds the lock).
    @discardableResult
    public func drain() async throws -> Int? {
        var total = 0
        while true {
            guard let applied = try await applyBatch() else { return total == 0 ? nil : total }
            total += applied
            if applied < batchSize { return total }
        }
    }

    /// One batch in one transaction; nil when the lock is taken.
    public func applyBatch() async throws -> Int? {
        let logger = database.logger
        let batchSize = self.batchSize
        let store = ReportStore(database: database)
        return try await database.transaction { c -> Int? in
            let locked = try await c.query(
                """
                SELECT pg_try_advisory_xact_lock(\(Self.lockKey)) AND pg_try_advisory_xact_lock_shared(\(Rebuilder.rebuildLockKey))
                """, logger: logger
            ).collect().first?.decode(Bool.self)
            guard locked == true else { return nil }
            var kept: [(currency: String, version: Int64?)] = []
            for try await (currency, version) in try await c.query(
                "SELECT reporting_currency, fx_version FROM report_fx_cells WHERE complete ORDER BY 1", logger: logger
            ).decode((String, Int64?).self) {
                kept.append((currency, version))
            }
            var rates: [ReportingCurrency] = []
            for k in kept {
                let table = k.currency == ConvertedRevenueDays.ownCurrencies ? FXTable() : try await store.fxTable(version: k.version)
                rates.append(ReportingCurrency(currency: k.currency, rates: table))
            }
            var cells = Array(repeating: ConvertedRevenueDays(), count: kept.count)
            var ids: [Int64] = []
            let rows = try await c.query(
                """
                SELECT change, \(unescaped: ReportStore.transactionColumns), array_to_string(entitlements, chr(31)), id
                FROM report_fx_pending ORDER BY id LIMIT \(batchSize)
                """, logger: logger)
            for try await row in rows {
                guard var cell = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let change = try cell.int64()
                var t = try ReportStore.transaction(&cell)
                t.entitlements = ReportStore.entitlements(try cell.string())
                ids.append(try cell.int64())
                for i in kept.indices { try cells[i].add(t, change: change, rates: &rates[i]) }
            }
            guard !ids.isEmpty else { return 0 }
            for (i, k) in kept.enumerated() {
                try await Self.write(cells[i].pruned(), currency: k.currency, on: c, logger: logger)
            }
            try await c.query("DELETE FROM report_fx_pending WHERE id = ANY(\(Int64Array(ids))::int8[])", logger: logger)
            return ids.count
        }
    }

    /// Computes `currencies` at the rates of `table`: afresh (`previous` nil: their cells are deleted first), or
    /// from their cells at `previous` by adding, for every transaction that occurred on one of `days` (nil: any),
    /// its figures at `table` less those at `previous`. The transactions are the facts less every row still
    /// queued, read in one statement (one snapshot); `drain` adds the queued rows afterwards. Returns how many
    /// rows were read.
    static func recompute(
        _ currencies: [String], to table: FXTable, from previous: FXTable?, days: [(from: Int64, to: Int64)]?, on c: PostgresConnection,
        logger: Logger
    ) async throws -> Int {
        var rates = currencies.map { ReportingCurrency(currency: $0, rates: table) }
        var before = currencies.map { ReportingCurrency(currency: $0, rates: previous ?? FXTable()) }
        var cells = Array(repeating: ConvertedRevenueDays(), count: currencies.count)
        let on = OccurredDays(all: days == nil, starts: days?.map(\.from) ?? [], ends: days?.map(\.to) ?? [])
        let rows = try await c.query(
            """
            SELECT 1::int8, \(unescaped: ReportStore.transactionColumns), array_to_string(entitlements, chr(31))
            FROM report_transactions WHERE revenue_rolled_up_days AND \(occurredIn: on)
            UNION ALL
            SELECT -change, \(unescaped: ReportStore.transactionColumns), array_to_string(entitlements, chr(31))
            FROM report_revenue_pending WHERE \(occurredIn: on)
            UNION ALL
            SELECT -change, \(unescaped: ReportStore.transactionColumns), array_to_string(entitlements, chr(31))
            FROM report_fx_pending WHERE \(occurredIn: on)
            """, logger: logger)
        var count = 0
        for try await row in rows {
            guard var cell = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
            let change = try cell.int64()
            var t = try ReportStore.transaction(&cell)
            t.entitlements = ReportStore.entitlements(try cell.string())
            for i in currencies.indices {
                try cells[i].add(t, change: change, rates: &rates[i])
                if previous != nil { try cells[i].add(t, change: -change, rates: &before[i]) }
            }
            count += 1
        }
        if previous == nil {
            try await c.query(
                "DELETE FROM report_fx_revenue_days WHERE reporting_currency = ANY(\(currencies)::text[])", logger: logger)
            try await c.query("DELETE FROM report_fx_missing WHERE reporting_currency = ANY(\(currencies)::text[])", logger: logger)
        }
        for (i, currency) in currencies.enumerated() {
            try await write(cells[i].pruned(), currency: currency, on: c, logger: logger)
        }
        return count
    }

    /// The occurred days (as microsecond ranges `[from, to)`) whose conversion the rate versions after `old`
    /// through `new` may change: a rate of day `d` serves transactions of `d` to `d + FXLimits.maxAgeDays`.
    static func daysMoved(after old: Int64?, through new: Int64?, on c: PostgresConnection, logger: Logger) async throws -> [(
        from: Int64, to: Int64
    )] {
        var ranges: [(from: Int64, to: Int64)] = []
        let day: Int64 = 86_400_000_000
        let rows = try await c.query(
            """
            SELECT DISTINCT (day - DATE '1970-01-01')::int8 FROM fx_rates
            WHERE version > \(old ?? 0) AND version <= \(new ?? 0) ORDER BY 1
            """, logger: logger)
        for try await d in rows.decode(Int64.self) {
            let (from, to) = (d * day, (d + Int64(FXLimits.maxAgeDays) + 1) * day)
            if let last = ranges.last, from <= last.to {
                ranges[ranges.count - 1].to = max(last.to, to)
            } else {
                ranges.append((from, to))
            }
        }
        return ranges
    }

    /// Adds cells to what the currency holds (after a refresh deleted its rows, they are new rows).
    static func write(
        _ cells: ConvertedRevenueDays, currency: String, on c: PostgresConnection, logger: Logger
    ) async throws {
        let list = cells.cells
        var start = 0
        while start < list.count {
            let part = list[start..<min(list.count, start + insertBatch)]
            start += insertBatch
            var (entitlements, days, stores, countries, products, transactions) = (
                [String](), [Int64](), [String](), [String](), [String](), [Int64]()
            )
            var moneys: [String] = []
            var figures = Array(repeating: [String](), count: 9)
            for (k, cell) in part {
                entitlements.append(k.entitlement)
                moneys.append(k.currency)
                days.append(k.day)
                stores.append(k.dimensions.store)
                countries.append(k.dimensions.country)
                products.append(k.dimensions.product)
                transactions.append(cell.transactions)
                let f = cell.figures
                for (i, n) in [
                    f.billings, f.commission, f.refunds, f.refundedUnrecognized, f.refundsRecognized, f.recognized, cell.settledDeferred,
                    f.handover, f.tax,
                ].enumerated() {
                    figures[i].append(String(n))
                }
            }
            try await c.query(
                """
                INSERT INTO report_fx_revenue_days AS t (
                    reporting_currency, entitlement, day_us, store, country, product_id, transactions, billings, commission, refunds,
                    refunded_unrecognized, refunds_recognized, recognized, settled_deferred, handover, tax, currency)
                SELECT \(currency), * FROM unnest(\(entitlements)::text[], \(days)::int8[], \(stores)::text[], \(countries)::text[],
                    \(products)::text[], \(transactions)::int8[], \(figures[0])::numeric[], \(figures[1])::numeric[],
                    \(figures[2])::numeric[], \(figures[3])::numeric[], \(figures[4])::numeric[], \(figures[5])::numeric[],
                    \(figures[6])::numeric[], \(figures[7])::numeric[], \(figures[8])::numeric[], \(moneys)::text[])
                ON CONFLICT (reporting_currency, entitlement, day_us, currency, store, country, product_id) DO UPDATE SET
                    transactions = t.transactions + excluded.transactions, billings = t.billings + excluded.billings,
                    commission = t.commission + excluded.commission, refunds = t.refunds + excluded.refunds,
                    refunded_unrecognized = t.refunded_unrecognized + excluded.refunded_unrecognized,
                    refunds_recognized = t.refunds_recognized + excluded.refunds_recognized,
                    recognized = t.recognized + excluded.recognized, settled_deferred = t.settled_deferred + excluded.settled_deferred,
                    handover = t.handover + excluded.handover, tax = t.tax + excluded.tax
                """, logger: logger)
        }
        guard !cells.missing.isEmpty else { return }
        let missing = Array(cells.missing)
        try await c.query(
            """
            INSERT INTO report_fx_missing AS t
            SELECT \(currency), * FROM unnest(\(missing.map(\.key.currency))::text[], \(missing.map(\.key.firstDay))::int8[],
                \(missing.map(\.key.settledDay))::int8[], \(missing.map(\.value))::int8[])
            ON CONFLICT (reporting_currency, currency, first_day_us, settled_day_us) DO UPDATE SET
                transactions = t.transactions + excluded.transactions
            """, logger: logger)
    }
}

/// Keeps the reporting currency cells (`ConvertedRevenueCells`): names the currencies at start, then recomputes
/// a currency when rates change and adds what `RevenueDayWorker` moved over, every `interval`.
public struct ConvertedRevenueWorker: Service {
    let cells: ConvertedRevenueCells
    let currencies: [String]?
    let interval: Duration

    /// `currencies`: the reporting currencies to keep (nil: those the database names).
    public init(database: Database, currencies: [String]?, interval: Duration = .seconds(1)) {
        self.cells = ConvertedRevenueCells(database: database)
        self.currencies = currencies
        self.interval = interval
    }

    public func run() async throws {
        let logger = cells.database.logger
        let named = Named()
        await runPeriodically(every: interval, logger: logger, what: "reporting currency cells") {
            if let currencies = self.currencies, !named.done.withLock({ $0 }) {
                try await self.cells.keep(currencies)
                named.done.withLock { $0 = true }
            }
            try await self.cells.refresh()
            try await self.cells.drain()
        }
    }
}

/// Whether the worker has named its currencies yet (once per start).
private final class Named: Sendable {
    let done = Mutex(false)
}

extension ReportStore {
    /// Revenue in a reporting currency from its cells; nil when they cannot answer (the caller reads the facts):
    /// the currency is not kept, its cells are at another rate version or still being computed, a transaction
    /// of the span has no rate, or the filters count several entitlements once each. The day cells answer any
    /// grid of midnights; what is still queued is converted here and added, in the same snapshot, and the
    /// transactions too long for day cells come from the facts beside them, as for revenue in own currencies.
    public func revenueFromConvertedCells(
        boundaries: [Timestamp], dimensions: ReportDimensions, fx: FXUse
    ) async throws -> [Grouped<RevenuePeriod>]? {
        try await revenueFromDimensionDays(boundaries: boundaries, dimensions: dimensions, fx: fx)
    }

    /// Revenue in the transactions' own currencies by store, country or product from the same day cells
    /// (`ConvertedRevenueDays.ownCurrencies`), for the day and week grids the month cells cannot answer; nil
    /// when they cannot answer.
    public func revenueFromOwnCurrencyDays(boundaries: [Timestamp], dimensions: ReportDimensions) async throws -> [Grouped<RevenuePeriod>]? {
        try await revenueFromDimensionDays(boundaries: boundaries, dimensions: dimensions, fx: nil)
    }

    /// `fx` nil: the cells in own currencies.
    private func revenueFromDimensionDays(
        boundaries: [Timestamp], dimensions: ReportDimensions, fx: FXUse?
    ) async throws -> [Grouped<RevenuePeriod>]? {
        guard rollups, let scope = CellScope(dimensions), Self.grid(boundaries) != nil, let from = boundaries.first?.microseconds,
            let to = boundaries.last?.microseconds
        else { return nil }
        let logger = database.logger
        let s = scope
        let currency = fx?.currency ?? ConvertedRevenueDays.ownCurrencies
        let version = fx?.version
        let fromDay = ReportInterval.day.periodStart(containing: Timestamp(microseconds: from)).microseconds
        let table = fx == nil ? FXTable() : try await fxTable(version: version)
        return try await readingTransaction { c -> [Grouped<RevenuePeriod>]? in
            try await c.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
            let usable = try await c.query(
                """
                SELECT EXISTS (SELECT 1 FROM report_fx_cells WHERE reporting_currency = \(currency) AND complete
                                 AND (\(currency) = '' OR fx_version IS NOT DISTINCT FROM \(version)))
                   AND NOT EXISTS (SELECT 1 FROM report_fx_missing WHERE reporting_currency = \(currency) AND transactions <> 0
                                     AND settled_day_us >= \(fromDay) AND first_day_us < \(to))
                """, logger: logger
            ).collect().first?.decode(Bool.self)
            guard usable == true else { return nil }
            var cells: [String?: [(period: Int64, currency: String, cell: ReportRollup.RevenueCell)]] = [:]
            let rows = try await c.query(
                """
                SELECT day_us, \(groupOf: s), currency, sum(transactions)::int8, sum(billings)::text, sum(commission)::text,
                       sum(refunds)::text, sum(refunded_unrecognized)::text, sum(refunds_recognized)::text, sum(recognized)::text,
                       sum(settled_deferred)::text, sum(handover)::text, sum(tax)::text
                FROM report_fx_revenue_days
                WHERE reporting_currency = \(currency) AND \(keysOf: s) AND day_us < \(to) AND \(dimensionsOf: s)
                GROUP BY 1, 2, 3
                """, logger: logger)
            for try await row in rows {
                let (day, group, money, transactions, b, cm, r, ru, rr, rec, sd, ho, tx) = try row.decode(
                    (Int64, String, String, Int64, String, String, String, String, String, String, String, String, String).self)
                let cell = try Self.revenueCell(money, transactions, [b, cm, r, ru, rr, rec, sd, ho, tx])
                cells[CellScope.group(group), default: []].append((day, money, cell))
            }
            // The rows still queued (for the day cells, or for these): converted here, each in its groups.
            var rates = ReportingCurrency(currency: currency, rates: table)
            for queue in ["report_revenue_pending", "report_fx_pending"] {
                let queued = try await c.query(
                    """
                    SELECT change, \(unescaped: Self.transactionColumns), array_to_string(entitlements, chr(31))
                    FROM \(unescaped: queue)
                    """, logger: logger)
                for try await row in queued {
                    guard var cell = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                    let change = try cell.int64()
                    var t = try Self.transaction(&cell)
                    t.entitlements = Self.entitlements(try cell.string())
                    guard dimensions.matches(t) else { continue }
                    guard let days = try ConvertedRevenueDays.dayCells(t, change: change, rates: &rates) else { return nil }
                    let money = fx == nil ? t.currency : currency
                    for g in dimensions.groups(of: t) {
                        for (day, cell) in days where day < to { cells[g, default: []].append((day, money, cell)) }
                    }
                }
            }
            // Transactions too long for day cells, from the facts.
            return try await Self.revenueBesideCells(
                boundaries: boundaries, dimensions: dimensions, scope: s, cells: cells, leftOutOf: .day,
                fx: fx == nil ? nil : (table, currency), on: c, logger: logger)
        }
    }
}

/// Which transactions a recomputation reads: all, or those that occurred in one of the ranges `[start, end)`.
struct OccurredDays {
    var all: Bool
    var starts: [Int64]
    var ends: [Int64]
}

extension PostgresQuery.StringInterpolation {
    mutating func appendInterpolation(occurredIn d: OccurredDays) {
        appendLiteral("(")
        appendInterpolation(d.all)
        appendLiteral(" OR EXISTS (SELECT 1 FROM unnest(")
        appendInterpolation(d.starts)
        appendLiteral("::int8[], ")
        appendInterpolation(d.ends)
        appendLiteral("::int8[]) r(a, b) WHERE occurred_us >= r.a AND occurred_us < r.b))")
    }
}
