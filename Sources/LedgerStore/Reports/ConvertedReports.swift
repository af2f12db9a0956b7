import Foundation
import LedgerCore
import Logging
import PostgresNIO
import Synchronization

/// The rate set a converted report used: the reporting currency and the rate version (every (date, currency)
/// at its newest value of a version up to it).
public struct FXUse: Sendable, Hashable {
    public var currency: String
    /// Nil when no rate was ever stored (then only a report without foreign money can answer).
    public var version: Int64?

    public init(currency: String, version: Int64?) {
        self.currency = currency
        self.version = version
    }
}

/// A refused conversion: a transaction's date has no rate (422 `missing_fx_rate`).
public struct FXRequestError: Error, Sendable, CustomStringConvertible {
    public var missing: MissingFXRate
    public var description: String { missing.description }
}

extension ReportStore {
    /// Rate tables by version: a version's rates never change (rows are only added, with a newer version), so
    /// a table read once serves every later report at that version. Keyed by the database's name and the
    /// version's creation time too, so that two databases (tests, a restored copy) never share a table.
    private static let tables = Mutex<(key: String, table: FXTable)?>(nil)

    /// The rate table of `version` (all currencies), read once per version.
    func fxTable(version: Int64?) async throws -> FXTable {
        guard let version else { return FXTable() }
        let logger = database.logger
        let stamp = try await database.withConnection { c in
            try await c.query(
                """
                SELECT current_database() || ' ' || (extract(epoch FROM created_at) * 1000000)::int8::text
                FROM fx_rate_versions WHERE version = \(version)
                """, logger: logger
            ).collect().first?.decode(String.self) ?? ""
        }
        let key = "\(stamp) \(version)"
        if let cached = Self.tables.withLock({ $0 }), cached.key == key { return cached.table }
        let rates = try await FXStore(database: database).rates(
            version: version, currencies: nil, from: FXLimits.firstDay, to: FXLimits.lastDay)
        var table = FXTable()
        for r in rates { table.add(currency: r.currency, day: r.day, rate: r.rate) }
        table.sort()
        let built = table
        Self.tables.withLock { $0 = (key, built) }
        return built
    }

    /// Revenue in one reporting currency (docs/reports.md, "Reporting currency"): every transaction of the
    /// span read from the facts and its cumulative figures converted at the rate of its `occurred_at` date.
    /// The rollups sum figures before rounding per transaction, so they cannot give the converted figures;
    /// this costs a read of the span's transactions (as the reports before rollups did).
    public func revenue(boundaries: [Timestamp], entitlement: String?, converting fx: FXUse) async throws -> [RevenuePeriod] {
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return []
        }
        let table = try await fxTable(version: fx.version)
        let logger = database.logger
        let key = entitlement ?? ""
        let started = ContinuousClock.now
        let result = try await reading { c in
            var acc = RevenueAccumulator(boundaries: boundaries)
            acc.include(currency: fx.currency)
            var factors = FXFactorCache(table: table, target: fx.currency)
            var count = 0
            let rows = try await c.query(
                """
                SELECT \(unescaped: Self.transactionColumns) FROM report_transactions
                WHERE settled_us >= \(from) AND LEAST(occurred_us, start_us, (SELECT min(r) FROM unnest(refund_at_us) r)) < \(to)
                  AND (\(key) = '' OR \(key) = ANY(entitlements))
                """, logger: logger)
            for try await row in rows {
                guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let t = try Self.transaction(&cells)
                try acc.add(t, currency: fx.currency, factor: try factors.factor(t))
                count += 1
            }
            return (acc.periods, count)
        }
        logger.debug(
            "converted revenue report",
            metadata: [
                "fx.currency": "\(fx.currency)", "fx.version": "\(fx.version.map(String.init) ?? "none")",
                "report.transactions": "\(result.1)", "report.ms": "\((ContinuousClock.now - started).components.seconds * 1000)",
            ])
        return result.0
    }

    /// MRR at `at` in one reporting currency: the monthly amounts of the transactions covering it, summed in
    /// PostgreSQL per currency, occurred date and denominator, converted at each date's rate (exact per rate,
    /// rounded once per rate), and the subscribers with any such transaction.
    public func mrr(at: Timestamp, entitlement: String?, converting fx: FXUse) async throws -> MRRLine {
        let table = try await fxTable(version: fx.version)
        if try await useRollups() { return try await mrrFromCells(at: at, key: entitlement ?? "", converting: fx, rates: table) }
        let logger = database.logger
        let key = entitlement ?? ""
        let t = at.microseconds
        return try await reading { c in
            var groups: [ConvertedMRR.Group] = []
            let sums = try await c.query(
                """
                SELECT currency, floor(occurred_us / 86400000000.0)::int8, sum(monthly_num)::text, monthly_den::text
                FROM report_transactions
                WHERE monthly_num IS NOT NULL AND greatest(start_us, held_from_us) <= \(t)
                  AND (service_end_us IS NULL OR service_end_us > \(t))
                  AND (\(key) = '' OR \(key) = ANY(entitlements))
                GROUP BY 1, 2, monthly_den
                """, logger: logger)
            for try await (currency, day, num, den) in sums.decode((String, Int64, String, String).self) {
                guard let n = Int128(num), let d = Int128(den), d > 0, let day = Int(exactly: day) else {
                    throw ReportOverflow(what: "the monthly amounts of \(currency)")
                }
                groups.append(.init(currency: currency, day: FXDay(days: day), amount: MonthlyAmount(numerator: n, denominator: d)))
            }
            let total: Int128
            do {
                total = try ConvertedMRR.total(groups, into: fx.currency, rates: table)
            } catch let missing as MissingFXRate {
                throw FXRequestError(missing: missing)
            }
            let count =
                try await c.query(
                    """
                    SELECT count(DISTINCT subscriber_id) FROM report_transactions
                    WHERE monthly_num IS NOT NULL AND greatest(start_us, held_from_us) <= \(t)
                      AND (service_end_us IS NULL OR service_end_us > \(t))
                      AND (\(key) = '' OR \(key) = ANY(entitlements))
                    """, logger: logger
                ).collect().first?.decode(Int64.self) ?? 0
            return MRRLine(currency: fx.currency, mrrMinor: total, activePaid: Int(count))
        }
    }

    /// Converted MRR from the cells (schema 0035 and 0040): the rate-dated monthly amounts and the paying
    /// subscribers per day up to the midnight before the hour boundary nearest the instant, then per hour up to that
    /// boundary, then the subscribers whose service starts or ends between it and the instant, read from the facts
    /// (at most half an hour of them), as unconverted MRR does.
    private func mrrFromCells(at: Timestamp, key: String, converting fx: FXUse, rates table: FXTable) async throws -> MRRLine {
        let logger = database.logger
        let (boundary, midnight, lo, hi) = ReportRollup.nearestHour(at)
        let (groups, activePaid) = try await reading { c in
            var cells: [(currency: String, day: FXDay, denominator: Int128, numerator: Int128)] = []
            let sums = try await c.query(
                """
                SELECT currency, occurred_day_us, denominator::text, (sum(started) - sum(ended))::text FROM (
                    SELECT currency, occurred_day_us, denominator, started, ended FROM report_mrr_rate_days
                    WHERE entitlement = \(key) AND day_us < \(midnight)
                    UNION ALL
                    SELECT currency, occurred_day_us, denominator, started, ended FROM report_mrr_rate_hours
                    WHERE entitlement = \(key) AND hour_us >= \(midnight) AND hour_us < \(boundary)
                ) cells GROUP BY currency, occurred_day_us, denominator HAVING sum(started) <> sum(ended)
                """, logger: logger)
            for try await (currency, occurred, den, num) in sums.decode((String, Int64, String, String).self) {
                guard let n = Int128(num), let d = Int128(den), d > 0, let days = Int(exactly: occurred / 86_400_000_000) else {
                    throw ReportOverflow(what: "the monthly amounts of \(currency)")
                }
                cells.append((currency, FXDay(days: days), d, n))
            }
            let subscribers =
                try await c.query(
                    """
                    SELECT coalesce(sum(starts) - sum(ends), 0)::int8 FROM (
                        SELECT starts, ends FROM report_paid_any_days WHERE entitlement = \(key) AND day_us < \(midnight)
                        UNION ALL
                        SELECT starts, ends FROM report_paid_any_hours
                        WHERE entitlement = \(key) AND hour_us >= \(midnight) AND hour_us < \(boundary)
                    ) cells
                    """, logger: logger
                ).collect().first?.decode(Int64.self) ?? 0
            let changed = try await Self.movedServices(c, key: key, between: lo, and: hi, logger: logger).map(\.service)
            return try ReportRollup.convertedMRR(
                at: at, boundary: Timestamp(microseconds: boundary), cells: cells, subscribers: subscribers, changed: changed)
        }
        do {
            return MRRLine(currency: fx.currency, mrrMinor: try ConvertedMRR.total(groups, into: fx.currency, rates: table), activePaid: activePaid)
        } catch let missing as MissingFXRate {
            throw FXRequestError(missing: missing)
        }
    }
}

/// The conversion factor of each transaction into a reporting currency, at its `occurred_at` date. Transactions
/// come in no order; most of a span's share a currency and a date with the one before, so the last factor of
/// each currency is kept.
struct FXFactorCache {
    let table: FXTable
    let target: String
    var last: [String: (day: Int, factor: FXFactor)] = [:]

    init(table: FXTable, target: String) {
        self.table = table
        self.target = target
    }

    /// The factor, or `FXRequestError` (422 `missing_fx_rate`) naming the currency and date without a rate.
    mutating func factor(_ t: RevenueTransaction) throws -> FXFactor {
        let day = FXDay(t.occurredAt)
        if let known = last[t.currency], known.day == day.days { return known.factor }
        do {
            let factor = try table.factor(from: t.currency, to: target, on: day)
            last[t.currency] = (day.days, factor)
            return factor
        } catch let missing as MissingFXRate {
            throw FXRequestError(missing: missing)
        }
    }
}
