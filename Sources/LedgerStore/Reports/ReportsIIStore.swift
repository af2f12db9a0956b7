import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// Reports II (docs/reports.md): MRR movement, realized LTV, refunds and conversion to paying, computed from
/// the report facts. Rows stream in subscriber order (or one transaction at a time) into the pure accumulators
/// of `LedgerCore`, so memory holds one subscriber and the result grid. In a reporting currency the facts
/// carry each transaction's `occurred_at`, whose date picks its rate.
extension ReportStore {
    /// The reporting currency of `fx` with its rate table, nil without one.
    func reporting(_ fx: FXUse?) async throws -> ReportingCurrency? {
        guard let fx else { return nil }
        return ReportingCurrency(currency: fx.currency, rates: try await fxTable(version: fx.version))
    }

    /// MRR movement per period between consecutive `boundaries`, per currency or in `fx`'s currency.
    public func mrrMovement(boundaries: [Timestamp], entitlement: String?, converting fx: FXUse? = nil) async throws -> [MRRMovementPeriod] {
        let initial = MRRMovementAccumulator(boundaries: boundaries, reporting: try await reporting(fx))
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return try initial.periods()
        }
        let key = entitlement ?? ""
        let logger = database.logger
        // Runs and MRR services touching the boundaries (covering an instant just before one), as one stream
        // ordered by subscriber: runs (tag 0) first, then services (tag 1).
        let query: PostgresQuery = """
            SELECT subscriber_id, 0::int8 AS tag, start_us, end_us, first_start_us, lapse, transferred_in,
                   NULL::text, NULL::text, NULL::text, NULL::int8
            FROM report_runs
            WHERE entitlement = \(key) AND start_us < \(to) AND (end_us IS NULL OR end_us >= \(from))
            UNION ALL
            SELECT subscriber_id, 1::int8, greatest(start_us, held_from_us), service_end_us, NULL::int8, NULL::text, false,
                   currency, monthly_num::text, monthly_den::text, occurred_us
            FROM report_transactions
            WHERE monthly_num IS NOT NULL AND (\(key) = '' OR \(key) = ANY(entitlements))
              AND greatest(start_us, held_from_us) < \(to) AND (service_end_us IS NULL OR service_end_us >= \(from))
            ORDER BY 1, 2, 3
            """
        return try await Self.refusingMissingRates {
            try await database.withConnection { c in
                var acc = initial
                var current: String?
                var runs: [PaidRun] = []
                var services: [MRRMovementService] = []
                var first: Timestamp?
                func flush() throws {
                    if !services.isEmpty { try acc.add(services: services, runs: runs, firstStart: first) }
                    (runs, services, first) = ([], [], nil)
                }
                for try await row in try await c.query(query, logger: logger) {
                    guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                    let subscriber = try cells.string()
                    if subscriber != current {
                        try flush()
                        current = subscriber
                    }
                    let tag = try cells.int64()
                    let start = Timestamp(microseconds: try cells.int64())
                    let end = try cells.optionalInt64().map(Timestamp.init(microseconds:))
                    let firstStart = try cells.optionalInt64()
                    let lapse = try cells.optionalString()
                    let transferredIn = try cells.bool()
                    if tag == 0 {
                        if first == nil { first = firstStart.map(Timestamp.init(microseconds:)) }
                        runs.append(
                            PaidRun(
                                entitlement: key, start: start, end: end, lapse: lapse.flatMap(LapseReason.init(rawValue:)),
                                transferredIn: transferredIn))
                        continue
                    }
                    let currency = try cells.string()
                    let (num, den) = (try cells.string(), try cells.string())
                    let occurred = Timestamp(microseconds: try cells.int64())
                    guard let n = Int128(num), let d = Int128(den), d > 0 else { throw ReportOverflow(what: "the monthly amounts of \(currency)") }
                    services.append(
                        MRRMovementService(
                            currency: currency, occurredAt: occurred, start: start, end: end, monthly: MonthlyAmount(numerator: n, denominator: d)))
                }
                try flush()
                return try acc.periods()
            }
        }
    }

    /// Realized LTV of the cohorts (months of first paid run) in `[from, to)`, `months` months each, those
    /// that have begun by `until`.
    public func ltv(from: Timestamp, to: Timestamp, months: Int, until: Timestamp, entitlement: String?, converting fx: FXUse? = nil)
        async throws -> [LTVCohort]
    {
        let initial = LTVAccumulator(from: from, to: to, months: months, until: until, reporting: try await reporting(fx))
        let cohorts = ReportCalendar.boundaries(from: from, to: to, interval: .month)
        guard let lo = cohorts.first?.microseconds, let hi = cohorts.last?.microseconds, cohorts.count > 1 else { return initial.rows }
        let key = entitlement ?? ""
        let logger = database.logger
        let query: PostgresQuery = """
            SELECT s.subscriber_id, s.first_us, \(unescaped: Self.transactionColumns)
            FROM (
                SELECT subscriber_id, min(first_start_us) AS first_us FROM report_runs
                WHERE entitlement = \(key) AND first_start_us >= \(lo) AND first_start_us < \(hi)
                GROUP BY subscriber_id
            ) s JOIN report_transactions t ON t.subscriber_id = s.subscriber_id
            WHERE (\(key) = '' OR \(key) = ANY(t.entitlements))
            ORDER BY s.subscriber_id
            """
        return try await Self.refusingMissingRates {
            try await database.withConnection { c in
                var acc = initial
                var current: String?
                var first = Timestamp(microseconds: 0)
                var transactions: [RevenueTransaction] = []
                for try await row in try await c.query(query, logger: logger) {
                    guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                    let subscriber = try cells.string()
                    let firstStart = Timestamp(microseconds: try cells.int64())
                    if subscriber != current {
                        if !transactions.isEmpty { try acc.add(firstStart: first, transactions: transactions) }
                        transactions.removeAll(keepingCapacity: true)
                        (current, first) = (subscriber, firstStart)
                    }
                    transactions.append(try Self.transaction(&cells))
                }
                if !transactions.isEmpty { try acc.add(firstStart: first, transactions: transactions) }
                return acc.rows
            }
        }
    }

    /// Refunds per period by their `occurred_at`, and the paid transactions that occurred in each period. A
    /// transaction that occurred or was refunded in the span has settled after its start and moved before its
    /// end: the settled index narrows the read as it does for revenue.
    public func refunds(boundaries: [Timestamp], entitlement: String?, converting fx: FXUse? = nil) async throws -> [RefundPeriod] {
        let initial = RefundAccumulator(boundaries: boundaries, reporting: try await reporting(fx))
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return initial.periods
        }
        let key = entitlement ?? ""
        let logger = database.logger
        let query: PostgresQuery = """
            SELECT \(unescaped: Self.transactionColumns) FROM report_transactions
            WHERE settled_us >= \(from) AND LEAST(occurred_us, start_us, (SELECT min(r) FROM unnest(refund_at_us) r)) < \(to)
              AND (\(key) = '' OR \(key) = ANY(entitlements))
              AND ((occurred_us >= \(from) AND occurred_us < \(to))
                   OR EXISTS (SELECT 1 FROM unnest(refund_at_us) r WHERE r >= \(from) AND r < \(to)))
            """
        return try await Self.refusingMissingRates {
            try await database.withConnection { c in
                var acc = initial
                for try await row in try await c.query(query, logger: logger) {
                    guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                    try acc.add(try Self.transaction(&cells))
                }
                return acc.periods
            }
        }
    }

    /// Subscribers first seen per period and how many billed a paid transaction within each of `days`.
    public func conversion(boundaries: [Timestamp], days: [Int], entitlement: String?) async throws -> [ConversionPeriod] {
        let initial = ConversionAccumulator(boundaries: boundaries, days: days)
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return initial.periods
        }
        let key = entitlement ?? ""
        let logger = database.logger
        return try await database.withConnection { c in
            var acc = initial
            let rows = try await c.query(
                """
                SELECT s.first_seen_us, (
                    SELECT min(t.occurred_us) FROM report_transactions t
                    WHERE t.subscriber_id = s.subscriber_id AND t.held_from_us IS NULL
                      AND (\(key) = '' OR \(key) = ANY(t.entitlements))
                ) FROM subscriber_state s
                WHERE s.first_seen_us >= \(from) AND s.first_seen_us < \(to)
                """, logger: logger)
            for try await (seen, paid) in rows.decode((Int64, Int64?).self) {
                acc.add(firstSeen: .init(microseconds: seen), firstPaid: paid.map(Timestamp.init(microseconds:)))
            }
            return acc.periods
        }
    }

    /// Runs `body`, turning a missing rate into the error the HTTP edge answers with 422 `missing_fx_rate`.
    static func refusingMissingRates<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let missing as MissingFXRate {
            throw FXRequestError(missing: missing)
        }
    }
}
