import Foundation
import LedgerCore
import PostgresNIO

/// Refunds, conversion and realized LTV from their rollup cells (schema 0030, docs/reports.md "Reports II from
/// rollups"): a few rows per day or cohort month, whatever the ledger's size. The cells answer every store,
/// country and product filter and grouping, and one `entitlement=` (or grouping by entitlement); several
/// `entitlement=` values without grouping, a reporting currency (each transaction rounds at its own rate), and
/// grouping conversion by entitlement are read from the facts.
extension ReportStore {
    /// The cells a report reads: the entitlement keys and the group column, as binds.
    struct CellScope: CellKeys {
        var byEntitlement: Bool
        var key: String
        var entitlements: TextArray
        var stores: TextArray
        var countries: TextArray
        var products: TextArray
        var groupBy: String

        /// nil when the cells cannot answer: several `entitlement=` values counted once each.
        init?(_ d: ReportDimensions) {
            byEntitlement = d.groupBy == .entitlement
            guard byEntitlement || d.entitlements.count <= 1 else { return nil }
            key = byEntitlement ? "" : d.entitlements.first ?? ""
            (stores, countries, products, entitlements) = ReportStore.filterBinds(d)
            groupBy = d.groupBy?.rawValue ?? ""
        }

        var grouped: Bool { !groupBy.isEmpty }

        /// A group's value as the reports name it: `''` (unknown) is the null group.
        static func group(_ value: String) -> String? { value.isEmpty ? nil : value }
    }

    /// The calendar grid `boundaries` are, if they are one.
    static func grid(_ boundaries: [Timestamp]) -> ReportInterval? {
        guard let first = boundaries.first, let last = boundaries.last, boundaries.count > 1 else { return nil }
        return ReportInterval.allCases.first { ReportCalendar.boundaries(from: first, to: last, interval: $0) == boundaries }
    }

    /// Refunds from the cells; nil when they cannot answer (the caller reads the facts).
    func refundsFromRollups(boundaries: [Timestamp], dimensions: ReportDimensions) async throws -> [Grouped<RefundPeriod>]? {
        guard let scope = CellScope(dimensions), let interval = Self.grid(boundaries), let from = boundaries.first?.microseconds,
            let to = boundaries.last?.microseconds, try await useRollups()
        else { return nil }
        let logger = database.logger
        let s = scope
        return try await reading { c in
            var days: [(day: Int64, currency: String, group: String?, cell: ReportRollup.RefundCell)] = []
            let rows = try await c.query(
                """
                SELECT day_us, currency, \(groupOf: s),
                       sum(refunds)::int8, sum(amount)::text, sum(refunded_transactions)::int8, sum(paid_transactions)::int8
                FROM report_refund_days
                WHERE \(keysOf: s)
                  AND day_us >= \(from) AND day_us < \(to)
                  AND \(dimensionsOf: s)
                GROUP BY 1, 2, 3
                """, logger: logger)
            for try await (day, currency, group, refunds, amount, refunded, paid) in rows.decode(
                (Int64, String, String, Int64, String, Int64, Int64).self)
            {
                guard let money = Int128(amount) else { throw ReportOverflow(what: "the refunds of \(currency)") }
                days.append(
                    (
                        day, currency, CellScope.group(group),
                        .init(refunds: refunds, amount: money, refundedTransactions: refunded, paidTransactions: paid)
                    ))
            }
            var repeats: [(period: Int64, currency: String, group: String?, count: Int64)] = []
            if interval != .day {
                let rows = try await c.query(
                    """
                    SELECT period_us, currency, \(groupOf: s), sum(repeats)::int8
                    FROM report_refund_repeats
                    WHERE \(keysOf: s)
                      AND period_interval = \(interval.rawValue) AND period_us >= \(from) AND period_us < \(to)
                      AND \(dimensionsOf: s)
                    GROUP BY 1, 2, 3
                    """, logger: logger)
                for try await (period, currency, group, count) in rows.decode((Int64, String, String, Int64).self) {
                    repeats.append((period, currency, CellScope.group(group), count))
                }
            }
            return ReportRollup.refundPeriods(boundaries: boundaries, grouped: s.grouped, days: days, repeats: repeats).map {
                Grouped(group: $0.group, row: $0.period)
            }
        }
    }

    /// Conversion from the cells; nil when they cannot answer (grouped by entitlement: each subscriber counts in
    /// the entitlements they hold, which the cells do not keep).
    func conversionFromRollups(boundaries: [Timestamp], days: [Int], dimensions: ReportDimensions) async throws
        -> [Grouped<ConversionPeriod>]?
    {
        guard let scope = CellScope(dimensions), let from = boundaries.first?.microseconds,
            let to = boundaries.last?.microseconds, boundaries.count > 1, try await useRollups()
        else { return nil }
        let logger = database.logger
        let s = scope
        let longest = Int32(clamping: days.max() ?? 0)
        if s.byEntitlement {
            return try await reading { c in
                var population: [(day: Int64, group: String?, subscribers: Int64)] = []
                var converted: [(day: Int64, group: String?, wait: Int32, subscribers: Int64)] = []
                // Each entitlement's holders (those asked for, if any) are its group; the subscribers holding none of
                // them are the null group, converted only without `entitlement=` (else none of their payments is in scope).
                let rows = try await c.query(
                    """
                    SELECT day_us, entitlement, wait_days, sum(subscribers)::int8
                    FROM report_conversion_holders
                    WHERE ((entitlement <> '' AND (cardinality(\(s.entitlements)::text[]) = 0 OR entitlement = ANY(\(s.entitlements)::text[])))
                           OR (entitlement = '' AND NOT string_to_array(held, chr(31)) && \(s.entitlements)::text[]
                               AND (cardinality(\(s.entitlements)::text[]) > 0 OR held = '')))
                      AND day_us >= \(from) AND day_us < \(to)
                      AND \(dimensionsOf: s)
                    GROUP BY 1, 2, 3
                    """, logger: logger)
                let filtered = !dimensions.entitlements.isEmpty
                for try await (day, entitlement, wait, n) in rows.decode((Int64, String, Int32, Int64).self) {
                    let g = CellScope.group(entitlement)
                    population.append((day, g, n))
                    if wait >= 0, wait <= longest, !(g == nil && filtered) { converted.append((day, g, wait, n)) }
                }
                return ReportRollup.conversionPeriods(
                    boundaries: boundaries, days: days, grouped: true, population: population, converted: converted
                ).map { Grouped(group: $0.group, row: $0.period) }
            }
        }
        return try await reading { c in
            var population: [(day: Int64, group: String?, subscribers: Int64)] = []
            var converted: [(day: Int64, group: String?, wait: Int32, subscribers: Int64)] = []
            // Everyone first seen is counted once under `populationWait`; the report's key holds those who paid for it,
            // of whom only the waits up to the longest asked for are read.
            let rows = try await c.query(
                """
                SELECT day_us, CASE \(s.groupBy) WHEN 'store' THEN store WHEN 'country' THEN country
                       WHEN 'product_id' THEN product_id ELSE '' END AS g,
                       wait_days = \(ReportRollup.populationWait) AS everyone, wait_days, sum(subscribers)::int8
                FROM report_conversion_days
                WHERE ((entitlement = '' AND wait_days = \(ReportRollup.populationWait))
                       OR (entitlement = \(s.key) AND wait_days >= 0 AND wait_days <= \(longest)))
                  AND day_us >= \(from) AND day_us < \(to)
                  AND \(dimensionsOf: s)
                GROUP BY 1, 2, 3, 4
                """, logger: logger)
            for try await (day, group, everyone, wait, n) in rows.decode((Int64, String, Bool, Int32, Int64).self) {
                let g = CellScope.group(group)
                if everyone { population.append((day, g, n)) } else { converted.append((day, g, wait, n)) }
            }
            return ReportRollup.conversionPeriods(
                boundaries: boundaries, days: days, grouped: s.grouped, population: population, converted: converted
            ).map { Grouped(group: $0.group, row: $0.period) }
        }
    }

    /// Realized LTV from the cells; nil when they cannot answer (the caller reads the facts).
    func ltvFromRollups(from: Timestamp, to: Timestamp, months: Int, until: Timestamp, dimensions: ReportDimensions) async throws
        -> [Grouped<LTVCohort>]?
    {
        let cohorts = ReportCalendar.boundaries(from: from, to: to, interval: .month)
        guard let scope = CellScope(dimensions), let lo = cohorts.first?.microseconds, let hi = cohorts.last?.microseconds,
            cohorts.count > 1, try await useRollups()
        else { return nil }
        let logger = database.logger
        let s = scope
        return try await reading { c in
            var cells: [(cohort: Int64, currency: String, group: String?, month: Int64, cell: ReportRollup.LTVCell)] = []
            let rows = try await c.query(
                """
                SELECT cohort_us, currency, \(groupOf: s),
                       month_us, sum(members)::int8, sum(gross)::text, sum(proceeds)::text
                FROM report_ltv_cells
                WHERE \(keysOf: s)
                  AND cohort_us >= \(lo) AND cohort_us < \(hi)
                  AND \(dimensionsOf: s)
                GROUP BY 1, 2, 3, 4
                """, logger: logger)
            for try await (cohort, currency, group, month, members, gross, proceeds) in rows.decode(
                (Int64, String, String, Int64, Int64, String, String).self)
            {
                guard let g = Int128(gross), let p = Int128(proceeds) else { throw ReportOverflow(what: "the LTV of \(currency)") }
                cells.append((cohort, currency, CellScope.group(group), month, .init(members: members, gross: g, proceeds: p)))
            }
            return ReportRollup.ltvCohorts(from: from, to: to, months: months, until: until, grouped: s.grouped, cells: cells).map {
                Grouped(group: $0.group, row: $0.cohort)
            }
        }
    }

    /// Which MRR movement cells a report reads (`ReportRollup.movementCells`' groups); nil when they cannot answer.
    struct MovementScope: CellKeys {
        var byEntitlement: Bool
        var key: String
        var entitlements: TextArray
        var dimension: String
        var value: String?
        /// `entitlement`, `value` or `''` (ungrouped).
        var groupColumn: String

        init?(_ d: ReportDimensions) {
            let filters: [(ReportDimension, Set<String>)] = [(.store, d.stores), (.country, d.countries), (.productID, d.productIDs)]
            let filtered = filters.filter { !$0.1.isEmpty }
            (byEntitlement, key, entitlements, dimension, value, groupColumn) = (false, "", TextArray(d.entitlements.sorted()), "", nil, "")
            switch d.groupBy {
            case .entitlement?:
                guard filtered.isEmpty else { return nil }
                (byEntitlement, groupColumn) = (true, "entitlement")
            case let g?:
                guard filtered.isEmpty, d.entitlements.isEmpty else { return nil }
                (dimension, groupColumn) = (g.rawValue, "value")
            case nil:
                if filtered.isEmpty {
                    guard d.entitlements.count <= 1 else { return nil }
                    key = d.entitlements.first ?? ""
                } else {
                    // One value of one dimension: that group of the dimension, answered as the whole report.
                    guard d.entitlements.isEmpty, filtered.count == 1, filtered[0].1.count == 1 else { return nil }
                    (dimension, value) = (filtered[0].0.rawValue, filtered[0].1.first)
                }
            }
        }
    }

    /// MRR movement from the cells; nil when they cannot answer (the caller reads the facts).
    func mrrMovementFromRollups(boundaries: [Timestamp], dimensions: ReportDimensions) async throws -> [Grouped<MRRMovementPeriod>]? {
        guard let scope = MovementScope(dimensions), let interval = Self.grid(boundaries), let from = boundaries.first?.microseconds,
            let to = boundaries.last?.microseconds, try await useRollups()
        else { return nil }
        let logger = database.logger
        let s = scope
        return try await reading { c in
            var level: [(currency: String, group: String?, denominator: Int128, value: Int128)] = []
            // The level just before the span: every day cell before it, adds less subtractions (expansion and
            // contraction move money, not subscribers).
            let levels = try await c.query(
                """
                SELECT currency, CASE \(s.groupColumn) WHEN 'entitlement' THEN entitlement WHEN 'value' THEN value ELSE '' END,
                       denominator::text,
                       sum(CASE WHEN denominator = 0 AND part IN (3, 5) THEN 0 WHEN part BETWEEN 1 AND 4 THEN amount ELSE -amount END)::text
                FROM report_mrr_movement
                WHERE \(keysOf: s)
                  AND dimension = \(s.dimension) AND (\(s.value)::text IS NULL OR value = \(s.value)::text)
                  AND period_interval = 'day' AND period_us < \(from)
                GROUP BY 1, 2, 3
                """, logger: logger)
            for try await (currency, group, d, v) in levels.decode((String, String, String, String).self) {
                guard let d = Int128(d), let v = Int128(v) else { throw ReportOverflow(what: "the MRR of \(currency)") }
                level.append((currency, CellScope.group(group), d, v))
            }
            var cells: [(period: Int64, currency: String, group: String?, part: MRRMovementFigures.Part, denominator: Int128, value: Int128)] = []
            let rows = try await c.query(
                """
                SELECT period_us, currency, CASE \(s.groupColumn) WHEN 'entitlement' THEN entitlement WHEN 'value' THEN value ELSE '' END,
                       part, denominator::text, sum(amount)::text
                FROM report_mrr_movement
                WHERE \(keysOf: s)
                  AND dimension = \(s.dimension) AND (\(s.value)::text IS NULL OR value = \(s.value)::text)
                  AND period_interval = \(interval.rawValue) AND period_us >= \(from) AND period_us < \(to)
                GROUP BY 1, 2, 3, 4, 5
                """, logger: logger)
            for try await (period, currency, group, part, d, v) in rows.decode((Int64, String, String, Int16, String, String).self) {
                guard let part = MRRMovementFigures.Part(rawValue: Int(part)), let d = Int128(d), let v = Int128(v) else {
                    throw ReportOverflow(what: "the MRR movement of \(currency)")
                }
                cells.append((period, currency, CellScope.group(group), part, d, v))
            }
            return try ReportRollup.movementPeriods(
                boundaries: boundaries, grouped: s.groupColumn != "", level: level, cells: cells
            ).map { Grouped(group: $0.group, row: $0.period) }
        }
    }

    /// Revenue on a month grid filtered or grouped by store, country or product, from the month cells kept per
    /// dimension (`report_revenue_month_dims`) and, beside them, the transactions too long for the cells (read from
    /// the facts, as the ungrouped report reads them); nil when the cells cannot answer.
    func revenueFromRollups(boundaries: [Timestamp], dimensions: ReportDimensions) async throws -> [Grouped<RevenuePeriod>]? {
        guard let scope = CellScope(dimensions), Self.grid(boundaries) == .month, let to = boundaries.last?.microseconds,
            try await useRollups()
        else { return nil }
        let logger = database.logger
        let s = scope
        return try await reading { c in
            var cells: [String?: [(period: Int64, currency: String, cell: ReportRollup.RevenueCell)]] = [:]
            let rows = try await c.query(
                """
                SELECT month_us, \(groupOf: s), currency, sum(transactions)::int8, sum(billings)::text, sum(commission)::text,
                       sum(refunds)::text, sum(refunded_unrecognized)::text, sum(refunds_recognized)::text, sum(recognized)::text,
                       sum(settled_deferred)::text, sum(handover)::text, sum(tax)::text
                FROM report_revenue_month_dims
                WHERE \(keysOf: s)
                  AND month_us < \(to)
                  AND \(dimensionsOf: s)
                GROUP BY 1, 2, 3
                """, logger: logger)
            for try await row in rows {
                let (period, group, currency, transactions, b, cm, r, ru, rr, rec, sd, ho, tx) = try row.decode(
                    (Int64, String, String, Int64, String, String, String, String, String, String, String, String, String).self)
                let cell = try Self.revenueCell(currency, transactions, [b, cm, r, ru, rr, rec, sd, ho, tx])
                cells[CellScope.group(group), default: []].append((period, currency, cell))
            }
            // Transactions too long for the month cells (`ReportRollup.maxRevenueCells`), from the facts.
            return try await Self.revenueBesideCells(
                boundaries: boundaries, dimensions: dimensions, scope: s, cells: cells, leftOutOf: .month, on: c, logger: logger)
        }
    }

    /// Trials filtered or grouped by store, country or product from the day cells kept per dimension
    /// (`report_trial_day_dims`); nil when the cells cannot answer.
    func trialsFromRollups(boundaries: [Timestamp], dimensions: ReportDimensions) async throws -> [Grouped<TrialPeriod>]? {
        guard let scope = CellScope(dimensions), let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds,
            boundaries.count > 1, try await useRollups()
        else { return nil }
        let logger = database.logger
        let s = scope
        return try await reading { c in
            var days: [String?: [(day: Int64, counts: ReportRollup.Counts)]] = [:]
            let rows = try await c.query(
                """
                SELECT day_us, \(groupOf: s),
                       sum(started)::int8, sum(converted)::int8
                FROM report_trial_day_dims
                WHERE \(keysOf: s)
                  AND day_us >= \(from) AND day_us < \(to)
                  AND \(dimensionsOf: s)
                GROUP BY 1, 2
                """, logger: logger)
            for try await (day, group, started, converted) in rows.decode((Int64, String, Int64, Int64).self) where started != 0 {
                days[CellScope.group(group), default: []].append((day, .init(first: started, second: converted)))
            }
            let groups: [String?] = s.grouped ? days.keys.sorted(by: ReportDimensions.groupOrder) : [nil]
            return groups.flatMap { g in
                ReportRollup.trialPeriods(boundaries: boundaries, days: days[g] ?? []).map { Grouped(group: g, row: $0) }
            }
        }
    }

    /// Churn filtered or grouped by store, country or product from the cells kept per dimension
    /// (`report_churn_active_days`, `report_churn_moves`); nil when they cannot answer (several `entitlement=`
    /// values without grouping).
    func churnFromRollups(boundaries: [Timestamp], interval: ReportInterval, dimensions: ReportDimensions) async throws
        -> [Grouped<ChurnPeriod>]?
    {
        guard var scope = CellScope(dimensions), Self.grid(boundaries) == interval, let from = boundaries.first?.microseconds,
            let to = boundaries.last?.microseconds, try await useRollups()
        else { return nil }
        // By entitlement: each entitlement's runs (the group), any transaction. Otherwise the runs over all entitlements,
        // counted where the covering transaction grants the one `entitlement=` (if any).
        let grants = scope.key
        scope.key = ""
        let s = scope
        let logger = database.logger
        return try await reading { c in
            var days: [String?: [(day: Int64, counts: ReportRollup.Counts)]] = [:]
            let rows = try await c.query(
                """
                SELECT day_us, \(groupOf: s),
                       sum(starts)::int8, sum(ends)::int8
                FROM report_churn_active_days
                WHERE \(keysOf: s)
                  AND grants = \(grants) AND day_us < \(to)
                  AND \(dimensionsOf: s)
                GROUP BY 1, 2
                """, logger: logger)
            for try await (day, group, starts, ends) in rows.decode((Int64, String, Int64, Int64).self) {
                days[CellScope.group(group), default: []].append((day, .init(first: starts, second: ends)))
            }
            var moves: [String?: [Int64: ReportRollup.ChurnCell]] = [:]
            let cells = try await c.query(
                """
                SELECT period_us, \(groupOf: s),
                       sum(new)::int8, sum(reactivated)::int8, sum(churned_refund)::int8, sum(churned_involuntary)::int8,
                       sum(churned_voluntary)::int8, sum(churned_other)::int8, sum(transferred_in)::int8, sum(transferred_out)::int8
                FROM report_churn_moves
                WHERE \(keysOf: s)
                  AND grants = \(grants) AND period_interval = \(interval.rawValue) AND period_us >= \(from) AND period_us < \(to)
                  AND \(dimensionsOf: s)
                GROUP BY 1, 2
                """, logger: logger)
            for try await (period, group, new, reactivated, refund, involuntary, voluntary, other, movedIn, movedOut) in cells.decode(
                (Int64, String, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self)
            {
                moves[CellScope.group(group), default: [:]][period] = .init(
                    new: new, reactivated: reactivated, refund: refund, involuntary: involuntary, voluntary: voluntary, other: other,
                    transferredIn: movedIn, transferredOut: movedOut)
            }
            var result: [Grouped<ChurnPeriod>] = []
            let groups: [String?] = s.grouped ? Set(days.keys).union(moves.keys).sorted(by: ReportDimensions.groupOrder) : [nil]
            for g in groups {
                let periods = ReportRollup.churnPeriods(boundaries: boundaries, runDays: days[g] ?? [], transitions: moves[g] ?? [:])
                // A group nobody was counted in over the span has no rows (as the accumulator never creates it).
                guard !s.grouped || periods.contains(where: Self.counts) else { continue }
                result += periods.map { Grouped(group: g, row: $0) }
            }
            return result
        }
    }

    static func counts(_ p: ChurnPeriod) -> Bool {
        p.activeStart != 0 || p.activeEnd != 0 || p.new != 0 || p.reactivated != 0 || p.churnedTotal != 0 || p.transferredIn != 0
            || p.transferredOut != 0
    }
}

/// Which entitlement keys a report's cells are read under: by entitlement every key (within `entitlements`, if any),
/// otherwise `key`.
protocol CellKeys {
    var byEntitlement: Bool { get }
    var key: String { get }
    var entitlements: TextArray { get }
}

/// The predicates and group column every cell query shares, as binds.
extension PostgresQuery.StringInterpolation {
    mutating func appendInterpolation(keysOf s: some CellKeys) {
        appendLiteral("((")
        appendInterpolation(s.byEntitlement)
        appendLiteral(" AND entitlement <> '' AND (cardinality(")
        appendInterpolation(s.entitlements)
        appendLiteral("::text[]) = 0 OR entitlement = ANY(")
        appendInterpolation(s.entitlements)
        appendLiteral("::text[]))) OR (NOT ")
        appendInterpolation(s.byEntitlement)
        appendLiteral(" AND entitlement = ")
        appendInterpolation(s.key)
        appendLiteral("))")
    }

    /// The store, country and product filters (an empty one does not filter).
    mutating func appendInterpolation(dimensionsOf s: ReportStore.CellScope) {
        for (column, values) in [(ReportDimension.store, s.stores), (.country, s.countries), (.productID, s.products)] {
            if column != .store { appendLiteral(" AND ") }
            appendLiteral("(cardinality(")
            appendInterpolation(values)
            appendLiteral("::text[]) = 0 OR \(column.rawValue) = ANY(")
            appendInterpolation(values)
            appendLiteral("::text[]))")
        }
    }

    /// The group a cell counts in (`''` without grouping).
    mutating func appendInterpolation(groupOf s: ReportStore.CellScope) {
        appendLiteral("CASE ")
        appendInterpolation(s.groupBy)
        appendLiteral(" WHEN 'store' THEN store WHEN 'country' THEN country WHEN 'product_id' THEN product_id")
        appendLiteral(" WHEN 'entitlement' THEN entitlement ELSE '' END")
    }
}

extension ReportStore {
    /// A revenue report from cells per group (`cells`) and the transactions of the span too long for them, read
    /// from the facts beside them: those left out of the month cells (`leftOutOf: .month`) or of the day cells.
    /// With `fx` the long ones are converted (a missing rate is the facts' 422), and a report without grouping
    /// answers every period in the reporting currency, as the report from the facts does.
    static func revenueBesideCells(
        boundaries: [Timestamp], dimensions: ReportDimensions, scope s: CellScope,
        cells: [String?: [(period: Int64, currency: String, cell: ReportRollup.RevenueCell)]], leftOutOf grid: ReportInterval,
        fx: (table: FXTable, currency: String)? = nil, on c: PostgresConnection, logger: Logger
    ) async throws -> [Grouped<RevenuePeriod>] {
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds else { return [] }
        let leftOut = grid == .month ? "NOT revenue_rolled_up" : "NOT revenue_rolled_up_days"
        var long = GroupedRevenueAccumulator(boundaries: boundaries, dimensions: dimensions)
        var factors = fx.map { FXFactorCache(table: $0.table, target: $0.currency) }
        let facts = try await c.query(
            """
            SELECT \(unescaped: Self.transactionColumns), array_to_string(entitlements, chr(31)) FROM report_transactions
            WHERE settled_us >= \(from) AND LEAST(occurred_us, start_us, (SELECT min(r) FROM unnest(refund_at_us) r)) < \(to)
              AND \(unescaped: leftOut)
              AND subledger_report_matches(store, country, product_id, entitlements, \(s.stores)::text[], \(s.countries)::text[],
                                             \(s.products)::text[], \(s.entitlements)::text[])
            """, logger: logger)
        for try await row in facts {
            guard var cell = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
            var t = try Self.transaction(&cell)
            t.entitlements = Self.entitlements(try cell.string())
            if var cache = factors {
                try long.add(t, currency: cache.target, factor: try cache.factor(t))
                factors = cache
            } else {
                try long.add(t)
            }
        }
        var beside: [String?: [RevenuePeriod]] = [:]
        for (g, row) in long.periods { beside[g, default: []].append(row) }
        let groups: [String?] = s.grouped ? Set(cells.keys).union(beside.keys).sorted(by: ReportDimensions.groupOrder) : [nil]
        var out: [Grouped<RevenuePeriod>] = []
        for g in groups {
            var rows = ReportRollup.merge(ReportRollup.revenuePeriods(boundaries: boundaries, cells: cells[g] ?? []), beside[g] ?? [])
            if rows.isEmpty, !s.grouped, let currency = fx?.currency {
                var empty = RevenueAccumulator(boundaries: boundaries)
                empty.include(currency: currency)
                rows = empty.periods
            }
            out += rows.map { Grouped(group: g, row: $0) }
        }
        return out
    }
}
