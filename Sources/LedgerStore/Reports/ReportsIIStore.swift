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
        try await mrrMovement(boundaries: boundaries, dimensions: .only(entitlement), converting: fx).map(\.row)
    }

    /// MRR movement per group, period and currency (`GroupedMRRMovementAccumulator`).
    public func mrrMovement(boundaries: [Timestamp], dimensions: ReportDimensions, converting fx: FXUse? = nil) async throws
        -> [Grouped<MRRMovementPeriod>]
    {
        if fx == nil, let cells = try await mrrMovementFromRollups(boundaries: boundaries, dimensions: dimensions) { return cells }
        if let fx, let cells = try await mrrMovementFromConvertedCells(boundaries: boundaries, dimensions: dimensions, fx: fx) { return cells }
        let initial = GroupedMRRMovementAccumulator(boundaries: boundaries, dimensions: dimensions, reporting: try await reporting(fx))
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return try initial.periods().map { Grouped(group: $0.group, row: $0.period) }
        }
        let logger = database.logger
        let (byEntitlement, key) = (dimensions.groupBy == .entitlement, dimensions.runKey(group: nil))
        let (stores, countries, products, entitlements) = Self.filterBinds(dimensions)
        // Runs of the keys read and MRR services touching the boundaries (covering an instant just before one), as
        // one stream ordered by subscriber: runs (tag 0, their key in the last column) first, then services (tag 1,
        // with their dimensions).
        let query: PostgresQuery = """
            SELECT subscriber_id, 0::int8 AS tag, start_us, end_us, first_start_us, lapse, transferred_in,
                   NULL::text, NULL::text, NULL::text, NULL::int8, NULL::text, NULL::text, NULL::text, entitlement
            FROM report_runs
            WHERE ((\(byEntitlement) AND entitlement <> '' AND (cardinality(\(entitlements)::text[]) = 0 OR entitlement = ANY(\(entitlements)::text[])))
                   OR (NOT \(byEntitlement) AND entitlement = \(key)))
              AND start_us < \(to) AND (end_us IS NULL OR end_us >= \(from))
            UNION ALL
            SELECT subscriber_id, 1::int8, greatest(start_us, held_from_us), service_end_us, NULL::int8, NULL::text, false,
                   currency, monthly_num::text, monthly_den::text, occurred_us, store, country, product_id,
                   array_to_string(entitlements, chr(31))
            FROM report_transactions
            WHERE monthly_num IS NOT NULL
              AND greatest(start_us, held_from_us) < \(to) AND (service_end_us IS NULL OR service_end_us >= \(from))
              AND subledger_report_matches(store, country, product_id, entitlements, \(stores)::text[], \(countries)::text[],
                                             \(products)::text[], \(entitlements)::text[])
            ORDER BY 1, 2, 3
            """
        return try await Self.refusingMissingRates {
            try await reading { c in
                var acc = initial
                var current: String?
                var runs: [PaidRun] = []
                var transactions: [RevenueTransaction] = []
                var firstStarts: [String: Timestamp] = [:]
                func flush() throws {
                    if !transactions.isEmpty { try acc.add(transactions: transactions, runs: runs, firstStarts: firstStarts) }
                    (runs, transactions, firstStarts) = ([], [], [:])
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
                    let currency = try cells.optionalString()
                    let (num, den) = (try cells.optionalString(), try cells.optionalString())
                    let occurred = try cells.optionalInt64()
                    let (store, country, product) = (try cells.optionalString(), try cells.optionalString(), try cells.optionalString())
                    let keys = try cells.string()
                    if tag == 0 {
                        if firstStarts[keys] == nil, let firstStart { firstStarts[keys] = Timestamp(microseconds: firstStart) }
                        runs.append(
                            PaidRun(
                                entitlement: keys, start: start, end: end, lapse: lapse.flatMap(LapseReason.init(rawValue:)),
                                transferredIn: transferredIn))
                        continue
                    }
                    guard let currency, let occurred, let n = num.flatMap({ Int128($0) }), let d = den.flatMap({ Int128($0) }), d > 0 else {
                        throw ReportOverflow(what: "the monthly amounts of \(currency ?? "a currency")")
                    }
                    // The service as a transaction whose window is the service (`serviceStart`/`serviceEnd`).
                    transactions.append(
                        RevenueTransaction(
                            eventID: Self.noEventID, entitlements: Self.entitlements(keys), kind: .paid, currency: currency, gross: 0, commission: 0,
                            occurredAt: .init(microseconds: occurred), start: start, end: end, stop: nil, refunds: [],
                            monthly: MonthlyAmount(numerator: n, denominator: d), country: country, store: store ?? "", productID: product ?? ""))
                }
                try flush()
                return try acc.periods().map { Grouped(group: $0.group, row: $0.period) }
            }
        }
    }

    /// Realized LTV of the cohorts (months of first paid run) in `[from, to)`, `months` months each, those
    /// that have begun by `until`.
    public func ltv(from: Timestamp, to: Timestamp, months: Int, until: Timestamp, entitlement: String?, converting fx: FXUse? = nil)
        async throws -> [LTVCohort]
    {
        try await ltv(from: from, to: to, months: months, until: until, dimensions: .only(entitlement), converting: fx).map(\.row)
    }

    /// A member's first paid start per key, from the facts query's two aggregated columns (keys joined by chr(31),
    /// starts in microseconds joined by ',', in the same order).
    static func firstStarts(keys: String, firsts: String) -> [String: Timestamp] {
        let starts = firsts.split(separator: ",").compactMap { Int64($0) }.map(Timestamp.init(microseconds:))
        return Dictionary(zip(keys.split(separator: "\u{1F}", omittingEmptySubsequences: false).map(String.init), starts)) { a, _ in a }
    }

    /// Realized LTV per group (`GroupedLTVAccumulator`): each cohort member with the first start of their paid runs
    /// per key read, and their transactions of the entitlement scope (every store, country and product: the
    /// member's group is decided by their first transaction).
    public func ltv(from: Timestamp, to: Timestamp, months: Int, until: Timestamp, dimensions: ReportDimensions, converting fx: FXUse? = nil)
        async throws -> [Grouped<LTVCohort>]
    {
        if fx == nil, let cells = try await ltvFromRollups(from: from, to: to, months: months, until: until, dimensions: dimensions) {
            return cells
        }
        if let fx, let cells = try await ltvFromConvertedCells(from: from, to: to, months: months, until: until, dimensions: dimensions, fx: fx) {
            return cells
        }
        let initial = GroupedLTVAccumulator(
            from: from, to: to, months: months, until: until, dimensions: dimensions, reporting: try await reporting(fx))
        let cohorts = ReportCalendar.boundaries(from: from, to: to, interval: .month)
        guard let lo = cohorts.first?.microseconds, let hi = cohorts.last?.microseconds, cohorts.count > 1 else {
            return initial.rows.map { Grouped(group: $0.group, row: $0.cohort) }
        }
        let logger = database.logger
        let (byEntitlement, key) = (dimensions.groupBy == .entitlement, dimensions.runKey(group: nil))
        let entitlements = TextArray(dimensions.entitlements.sorted())
        let query: PostgresQuery = """
            WITH f AS (
                SELECT subscriber_id, entitlement, min(first_start_us) AS first_us FROM report_runs
                WHERE ((\(byEntitlement) AND entitlement <> '' AND (cardinality(\(entitlements)::text[]) = 0 OR entitlement = ANY(\(entitlements)::text[])))
                       OR (NOT \(byEntitlement) AND entitlement = \(key)))
                  AND first_start_us >= \(lo) AND first_start_us < \(hi)
                GROUP BY subscriber_id, entitlement
            ), s AS (
                SELECT subscriber_id, array_to_string(array_agg(entitlement ORDER BY entitlement), chr(31)) AS keys,
                       array_to_string(array_agg(first_us ORDER BY entitlement), ',') AS firsts
                FROM f GROUP BY subscriber_id
            )
            SELECT s.subscriber_id, s.keys, s.firsts, \(unescaped: Self.transactionColumns), array_to_string(t.entitlements, chr(31))
            FROM s JOIN report_transactions t ON t.subscriber_id = s.subscriber_id
            WHERE cardinality(\(entitlements)::text[]) = 0 OR t.entitlements && \(entitlements)::text[]
            ORDER BY s.subscriber_id
            """
        return try await Self.refusingMissingRates {
            try await reading { c in
                var acc = initial
                var current: String?
                var firstStarts: [String: Timestamp] = [:]
                var transactions: [RevenueTransaction] = []
                func flush() throws {
                    if !transactions.isEmpty { try acc.add(firstStarts: firstStarts, transactions: transactions) }
                    transactions.removeAll(keepingCapacity: true)
                }
                for try await row in try await c.query(query, logger: logger) {
                    guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                    let subscriber = try cells.string()
                    let (keys, firsts) = (try cells.string(), try cells.string())
                    if subscriber != current {
                        try flush()
                        current = subscriber
                        firstStarts = Self.firstStarts(keys: keys, firsts: firsts)
                    }
                    var t = try Self.transaction(&cells)
                    t.entitlements = Self.entitlements(try cells.string())
                    transactions.append(t)
                }
                try flush()
                return acc.rows.map { Grouped(group: $0.group, row: $0.cohort) }
            }
        }
    }

    /// Refunds per period by their `occurred_at`, and the paid transactions that occurred in each period. A
    /// transaction that occurred or was refunded in the span has settled after its start and moved before its
    /// end: the settled index narrows the read as it does for revenue.
    public func refunds(boundaries: [Timestamp], entitlement: String?, converting fx: FXUse? = nil) async throws -> [RefundPeriod] {
        try await refunds(boundaries: boundaries, dimensions: .only(entitlement), converting: fx).map(\.row)
    }

    /// Refunds per group, period and currency (`GroupedRefundAccumulator`).
    public func refunds(boundaries: [Timestamp], dimensions: ReportDimensions, converting fx: FXUse? = nil) async throws -> [Grouped<RefundPeriod>] {
        if fx == nil, let cells = try await refundsFromRollups(boundaries: boundaries, dimensions: dimensions) { return cells }
        let initial = GroupedRefundAccumulator(boundaries: boundaries, dimensions: dimensions, reporting: try await reporting(fx))
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return initial.periods.map { Grouped(group: $0.group, row: $0.period) }
        }
        let logger = database.logger
        let (stores, countries, products, entitlements) = Self.filterBinds(dimensions)
        let query: PostgresQuery = """
            SELECT \(unescaped: Self.transactionColumns), array_to_string(entitlements, chr(31)) FROM report_transactions
            WHERE settled_us >= \(from) AND LEAST(occurred_us, start_us, (SELECT min(r) FROM unnest(refund_at_us) r)) < \(to)
              AND subledger_report_matches(store, country, product_id, entitlements, \(stores)::text[], \(countries)::text[],
                                             \(products)::text[], \(entitlements)::text[])
              AND ((occurred_us >= \(from) AND occurred_us < \(to))
                   OR EXISTS (SELECT 1 FROM unnest(refund_at_us) r WHERE r >= \(from) AND r < \(to)))
            """
        return try await Self.refusingMissingRates {
            try await reading { c in
                var acc = initial
                for try await row in try await c.query(query, logger: logger) {
                    guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                    var t = try Self.transaction(&cells)
                    t.entitlements = Self.entitlements(try cells.string())
                    try acc.add(t)
                }
                return acc.periods.map { Grouped(group: $0.group, row: $0.period) }
            }
        }
    }

    /// Subscribers first seen per period and how many billed a paid transaction within each of `days`.
    public func conversion(boundaries: [Timestamp], days: [Int], entitlement: String?) async throws -> [ConversionPeriod] {
        try await conversion(boundaries: boundaries, days: days, dimensions: .only(entitlement)).map(\.row)
    }

    /// Conversion per group (`GroupedConversionAccumulator`): each subscriber first seen in the span with their
    /// trials and paid transactions (their dimensions and entitlements), one subscriber at a time.
    public func conversion(boundaries: [Timestamp], days: [Int], dimensions: ReportDimensions) async throws -> [Grouped<ConversionPeriod>] {
        if let cells = try await conversionFromRollups(boundaries: boundaries, days: days, dimensions: dimensions) { return cells }
        let initial = GroupedConversionAccumulator(boundaries: boundaries, days: days, dimensions: dimensions)
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return initial.periods.map { Grouped(group: $0.group, row: $0.period) }
        }
        if let entitlement = dimensions.rollupEntitlement {
            return try await conversion(from: from, to: to, boundaries: boundaries, days: days, key: entitlement ?? "").map {
                Grouped(group: nil, row: $0)
            }
        }
        let logger = database.logger
        return try await reading { c in
            var acc = initial
            // One row per subscriber first seen in the span and transaction (trial: tag 0; paid: tag 1, `held`
            // when a transferred copy); a subscriber without any comes once with NULLs.
            let rows = try await c.query(
                """
                SELECT s.subscriber_id, s.first_seen_us, u.tag, u.start_us, u.occurred_us, u.held, u.store, u.country, u.product_id, u.entitlements
                FROM subscriber_state s
                LEFT JOIN LATERAL (
                    SELECT 0::int8 AS tag, min(start_us) AS start_us, min(start_us) AS occurred_us, false AS held, store, country, product_id,
                           string_agg(entitlement, chr(31) ORDER BY entitlement) AS entitlements
                    FROM report_trials r WHERE r.subscriber_id = s.subscriber_id
                    GROUP BY source_event_id, store, country, product_id
                    UNION ALL
                    SELECT 1::int8, greatest(start_us, held_from_us), occurred_us, held_from_us IS NOT NULL, store, country, product_id,
                           array_to_string(entitlements, chr(31))
                    FROM report_transactions t WHERE t.subscriber_id = s.subscriber_id
                ) u ON true
                WHERE s.first_seen_us >= \(from) AND s.first_seen_us < \(to)
                ORDER BY s.subscriber_id
                """, logger: logger)
            var current: String?
            var seen = Timestamp(microseconds: 0)
            var transactions: [RevenueTransaction] = []
            func flush() {
                if current != nil { acc.add(firstSeen: seen, transactions: transactions) }
                transactions.removeAll(keepingCapacity: true)
            }
            for try await (subscriber, firstSeen, tag, start, occurred, held, store, country, product, entitlements) in rows.decode(
                (String, Int64, Int64?, Int64?, Int64?, Bool?, String?, String?, String?, String?).self)
            {
                if subscriber != current {
                    flush()
                    (current, seen) = (subscriber, Timestamp(microseconds: firstSeen))
                }
                guard let tag, let start, let occurred else { continue }
                let at = Timestamp(microseconds: start)
                transactions.append(
                    RevenueTransaction(
                        eventID: Self.noEventID, entitlements: Self.entitlements(entitlements ?? ""), kind: tag == 0 ? .trial : .paid, currency: "",
                        gross: 0, commission: 0, occurredAt: .init(microseconds: occurred), start: at, end: nil, stop: nil, refunds: [],
                        monthly: nil, heldFrom: held == true ? at : nil, country: country, store: store ?? "", productID: product ?? ""))
            }
            flush()
            return acc.periods.map { Grouped(group: $0.group, row: $0.period) }
        }
    }

    /// Conversion without dimensions (or with one `entitlement=`, its scope): only each subscriber's first
    /// sight and first paid transaction are needed, one row per subscriber (the grouped read also streams their
    /// trials and transactions for their dimensions). Same answer as the grouped accumulator's ungrouped row.
    private func conversion(from: Int64, to: Int64, boundaries: [Timestamp], days: [Int], key: String) async throws -> [ConversionPeriod] {
        let logger = database.logger
        return try await reading { c in
            var acc = ConversionAccumulator(boundaries: boundaries, days: days)
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
