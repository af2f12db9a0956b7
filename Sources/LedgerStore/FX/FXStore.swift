import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// What an upload of rates did.
public struct FXUploadResult: Sendable, Hashable {
    /// The version the upload created, or the current one when it changed nothing (nil: no rates at all).
    public var version: Int64?
    /// Whether it created that version.
    public var created: Bool
    public var rates: Int
    public var added: Int
    public var corrected: Int
    public var unchanged: Int
}

/// One stored rate as a report would use it at a version.
public struct FXStoredRate: Sendable, Hashable {
    public var day: FXDay
    public var currency: String
    public var rate: FXRate
    public var version: Int64
}

/// Exchange rates with history (schema/0024_fx_rates.sql): each upload that brings a new or different rate
/// is a version; the newest version of a (date, currency) wins for reports asked at or after it.
public struct FXStore: Sendable {
    let database: Database

    public init(database: Database) { self.database = database }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    /// Stores the rates that are new or differ from the newest stored value, as one new version, in one
    /// transaction (uploads are serialised by an advisory lock, so versions are consecutive). Rates equal to
    /// the stored ones are not stored again; an upload that changes nothing creates no version.
    public func upload(_ rows: [FXRateRow], origin: String, label: String) async throws -> FXUploadResult {
        let logger = database.logger
        let label = String(label.prefix(200))
        let result = try await database.transaction { c in
            try await c.query("SELECT pg_advisory_xact_lock(hashtext('subledger.fx_rates'))", logger: logger)
            var stored: [String: FXRate] = [:]
            let current = try await c.query(
                """
                SELECT DISTINCT ON (r.currency, r.day) r.currency, (r.day - DATE '1970-01-01')::int4, r.rate::text
                FROM fx_rates r
                JOIN unnest(\(rows.map(\.currency))::text[], \(rows.map { Int32($0.day.days) })::int4[]) AS u(currency, day)
                  ON r.currency = u.currency AND r.day = DATE '1970-01-01' + u.day
                ORDER BY r.currency, r.day, r.version DESC
                """, logger: logger)
            for try await (currency, day, rate) in current.decode((String, Int32, String).self) {
                stored["\(currency) \(day)"] = FXRate(rate)
            }
            var changed: [FXRateRow] = []
            var added = 0
            var corrected = 0
            for row in rows {
                switch stored["\(row.currency) \(row.day.days)"] {
                case nil:
                    added += 1
                    changed.append(row)
                case let rate? where rate != row.rate:
                    corrected += 1
                    changed.append(row)
                default: break
                }
            }
            let latest =
                try await c.query("SELECT max(version) FROM fx_rate_versions", logger: logger).collect().first?
                .decode(Int64?.self) ?? nil
            guard !changed.isEmpty else {
                return FXUploadResult(
                    version: latest, created: false, rates: rows.count, added: 0, corrected: 0, unchanged: rows.count)
            }
            let version = (latest ?? 0) + 1
            try await c.query(
                """
                INSERT INTO fx_rate_versions (version, origin, label, rates, added, corrected)
                VALUES (\(version), \(origin), \(label), \(rows.count), \(added), \(corrected))
                """, logger: logger)
            try await c.query(
                """
                INSERT INTO fx_rates (currency, day, version, rate)
                SELECT u.currency, DATE '1970-01-01' + u.day, \(version), u.rate::numeric
                FROM unnest(\(changed.map(\.currency))::text[], \(changed.map { Int32($0.day.days) })::int4[],
                            \(changed.map(\.rate.description))::text[]) AS u(currency, day, rate)
                """, logger: logger)
            return FXUploadResult(
                version: version, created: true, rates: rows.count, added: added, corrected: corrected,
                unchanged: rows.count - added - corrected)
        }
        logger.info(
            "fx rates uploaded",
            metadata: [
                "fx.version": "\(result.version.map(String.init) ?? "none")", "fx.created": "\(result.created)",
                "fx.rates": "\(result.rates)", "fx.added": "\(result.added)", "fx.corrected": "\(result.corrected)",
                "fx.origin": "\(origin)",
            ])
        return result
    }

    /// The newest version, nil when no rate was ever stored.
    public func latestVersion() async throws -> Int64? {
        let logger = database.logger
        return try await database.withConnection { c in
            try await c.query("SELECT max(version) FROM fx_rate_versions", logger: logger).collect().first?.decode(Int64?.self) ?? nil
        }
    }

    /// The rates a report at `version` uses (per date and currency, the newest value of a version up to it),
    /// for `currencies` (nil: all) and dates in `from...to`, ordered by currency and date; at most `limit` of them.
    public func rates(version: Int64, currencies: [String]?, from: FXDay, to: FXDay, limit: Int = Int(Int32.max)) async throws
        -> [FXStoredRate]
    {
        let logger = database.logger
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                SELECT DISTINCT ON (currency, day) currency, (day - DATE '1970-01-01')::int4, rate::text, version
                FROM fx_rates
                WHERE version <= \(version) AND (\(currencies == nil) OR currency = ANY(\(currencies ?? [])::text[]))
                  AND day BETWEEN DATE '1970-01-01' + \(Int32(from.days)) AND DATE '1970-01-01' + \(Int32(to.days))
                ORDER BY currency, day, version DESC
                LIMIT \(Int64(limit))
                """, logger: logger)
            var out: [FXStoredRate] = []
            for try await (currency, day, rate, v) in rows.decode((String, Int32, String, Int64).self) {
                guard let r = FXRate(rate) else { continue }
                out.append(FXStoredRate(day: FXDay(days: Int(day)), currency: currency, rate: r, version: v))
            }
            return out
        }
    }

    /// The rate table of `version` for converting between `currencies`.
    public func table(version: Int64, currencies: [String]) async throws -> FXTable {
        var table = FXTable()
        for r in try await rates(version: version, currencies: currencies, from: FXLimits.firstDay, to: FXLimits.lastDay) {
            table.add(currency: r.currency, day: r.day, rate: r.rate)
        }
        table.sort()
        return table
    }
}
