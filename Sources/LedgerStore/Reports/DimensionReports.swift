import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// One row of a report split by a dimension: the group's value (nil: no grouping, or a country not known).
public struct Grouped<Row: Sendable>: Sendable {
    public var group: String?
    public var row: Row

    public init(group: String?, row: Row) {
        self.group = group
        self.row = row
    }
}

extension Grouped: Equatable where Row: Equatable {}
extension Grouped: Hashable where Row: Hashable {}

/// Revenue and MRR filtered and grouped by store, country, product and entitlement (docs/reports.md,
/// "Dimensions"). The rollups are kept per entitlement key only, so a report with another dimension reads the
/// transaction facts of its span (revenue) or of the instant (MRR), row by row, and `ReportDimensions` decides
/// in LedgerCore which transactions pass and where each counts.
extension ReportStore {
    /// Revenue per group, period and currency; with `fx`, in that reporting currency. Only `entitlement=` (one
    /// value) keeps the rollups; anything else streams the span's transactions.
    public func revenue(
        boundaries: [Timestamp], interval: ReportInterval, dimensions: ReportDimensions, converting fx: FXUse? = nil
    ) async throws -> [Grouped<RevenuePeriod>] {
        if let fx, let rows = try await revenueFromConvertedCells(boundaries: boundaries, dimensions: dimensions, fx: fx) {
            return rows
        }
        if let entitlement = dimensions.rollupEntitlement {
            let rows =
                if let fx {
                    try await revenue(boundaries: boundaries, entitlement: entitlement, converting: fx)
                } else {
                    try await revenue(boundaries: boundaries, interval: interval, entitlement: entitlement)
                }
            return rows.map { Grouped(group: nil, row: $0) }
        }
        if fx == nil, interval == .month, let cells = try await revenueFromRollups(boundaries: boundaries, dimensions: dimensions) {
            return cells
        }
        if fx == nil, interval != .month, let cells = try await revenueFromOwnCurrencyDays(boundaries: boundaries, dimensions: dimensions) {
            return cells
        }
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else { return [] }
        var converting: FXFactorCache?
        if let fx { converting = FXFactorCache(table: try await fxTable(version: fx.version), target: fx.currency) }
        let logger = database.logger
        // The filters in SQL too, so a filtered report reads only its transactions (LedgerCore decides again).
        let (stores, countries, products, entitlements) = Self.filterBinds(dimensions)
        return try await reading { [converting] c in
            var acc = GroupedRevenueAccumulator(boundaries: boundaries, dimensions: dimensions, include: fx?.currency)
            var factors = converting
            let rows = try await c.query(
                """
                SELECT \(unescaped: Self.transactionColumns), array_to_string(entitlements, chr(31)) FROM report_transactions
                WHERE settled_us >= \(from) AND LEAST(occurred_us, start_us, (SELECT min(r) FROM unnest(refund_at_us) r)) < \(to)
                  AND subledger_report_matches(store, country, product_id, entitlements, \(stores)::text[], \(countries)::text[],
                                                 \(products)::text[], \(entitlements)::text[])
                """, logger: logger)
            for try await row in rows {
                guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                var t = try Self.transaction(&cells)
                t.entitlements = Self.entitlements(try cells.string())
                guard dimensions.matches(t) else { continue }
                guard var cache = factors else {
                    try acc.add(t)
                    continue
                }
                try acc.add(t, currency: cache.target, factor: try cache.factor(t))
                factors = cache
            }
            return acc.periods.map { Grouped(group: $0.group, row: $0.period) }
        }
    }

    /// MRR at `at` per group and currency (with `fx`: per group, in that currency). Only `entitlement=` (one
    /// value) keeps the rollups; anything else reads the transactions covering the instant.
    public func mrr(at: Timestamp, dimensions: ReportDimensions, converting fx: FXUse? = nil) async throws -> [Grouped<MRRLine>] {
        if let entitlement = dimensions.rollupEntitlement {
            let lines =
                if let fx {
                    [try await mrr(at: at, entitlement: entitlement, converting: fx)]
                } else {
                    try await mrr(at: at, entitlement: entitlement)
                }
            return lines.map { Grouped(group: nil, row: $0) }
        }
        if fx == nil, let lines = try await mrrFromCells(at: at, dimensions: dimensions) { return lines }
        var table: FXTable?
        if let fx { table = try await fxTable(version: fx.version) }
        let logger = database.logger
        let t = at.microseconds
        let (stores, countries, products, entitlements) = Self.filterBinds(dimensions)
        struct Cell {
            var amounts: [MonthlyAmount] = []
            var converted: [ConvertedMRR.Group] = []
            var subscribers: Set<String> = []
        }
        // Keyed by group, then by currency (the reporting currency when converting).
        var cells: [String?: [String: Cell]] = try await reading { c in
            var cells: [String?: [String: Cell]] = [:]
            let rows = try await c.query(
                """
                SELECT subscriber_id, currency, occurred_us, monthly_num::text, monthly_den::text, store, country, product_id,
                       array_to_string(entitlements, chr(31))
                FROM report_transactions
                WHERE monthly_num IS NOT NULL AND greatest(start_us, held_from_us) <= \(t)
                  AND (service_end_us IS NULL OR service_end_us > \(t))
                  AND subledger_report_matches(store, country, product_id, entitlements, \(stores)::text[], \(countries)::text[],
                                                 \(products)::text[], \(entitlements)::text[])
                """, logger: logger)
            for try await (subscriber, currency, occurred, num, den, store, country, product, entitlements) in rows.decode(
                (String, String, Int64, String, String, String, String?, String, String).self)
            {
                guard let n = Int128(num), let d = Int128(den), d > 0 else { throw ReportOverflow(what: "the monthly amounts of \(currency)") }
                var fact = RevenueTransaction(
                    eventID: Self.noEventID, entitlements: Self.entitlements(entitlements), kind: .paid, currency: currency, gross: 0, commission: 0,
                    occurredAt: .init(microseconds: occurred), start: .init(microseconds: occurred), end: nil, stop: nil, refunds: [],
                    monthly: MonthlyAmount(numerator: n, denominator: d))
                (fact.store, fact.country, fact.productID) = (store, country, product)
                guard dimensions.matches(fact) else { continue }
                for g in dimensions.groups(of: fact) {
                    let line = fx?.currency ?? currency
                    var cell = cells[g, default: [:]][line, default: Cell()]
                    if fx != nil {
                        cell.converted.append(.init(currency: currency, day: FXDay(fact.occurredAt), amount: fact.monthly!))
                    } else {
                        cell.amounts.append(fact.monthly!)
                    }
                    cell.subscribers.insert(subscriber)
                    cells[g, default: [:]][line] = cell
                }
            }
            return cells
        }
        if let fx, dimensions.groupBy == nil, cells.isEmpty { cells[String?.none] = [fx.currency: Cell()] }
        var result: [Grouped<MRRLine>] = []
        for g in cells.keys.sorted(by: ReportDimensions.groupOrder) {
            for (currency, cell) in cells[g]!.sorted(by: { $0.key < $1.key }) {
                let total: Int128
                if let table {
                    do {
                        total = try ConvertedMRR.total(cell.converted, into: currency, rates: table)
                    } catch let missing as MissingFXRate {
                        throw FXRequestError(missing: missing)
                    }
                } else {
                    total = try MonthlyAmount.roundedSum(cell.amounts)
                }
                result.append(Grouped(group: g, row: MRRLine(currency: currency, mrrMinor: total, activePaid: cell.subscribers.count)))
            }
        }
        return result
    }

    /// MRR grouped by entitlement, or grouped or filtered by one of store, country and product, from the cells
    /// (`report_mrr_days` and `report_paid_days` and their hours per key; schema 0036's per value of one dimension);
    /// nil when they cannot answer, and the facts are read: two of those dimensions at once, several values of one
    /// without grouping by it, or several `entitlement=` values without grouping by entitlement (a subscriber is
    /// counted once over the values, which no sum of cells says). The cells give each group's state just before the
    /// hour boundary nearest the instant (by entitlement: days before its midnight, then hours) or the midnight
    /// nearest it (by dimension: day cells only); the subscribers whose service starts or ends between the two are
    /// read from the facts and their difference added, as for MRR without dimensions.
    func mrrFromCells(at: Timestamp, dimensions d: ReportDimensions) async throws -> [Grouped<MRRLine>]? {
        let used = ReportRollup.mrrCellDimensions.filter { !d.filter($0).isEmpty || d.groupBy == $0 }
        guard used.count <= 1 else { return nil }
        let dimension = used.first
        let values = dimension.map { d.filter($0).sorted() } ?? []
        if dimension != nil, d.groupBy != dimension, values.count != 1 { return nil }
        let byEntitlement = d.groupBy == .entitlement
        guard byEntitlement || d.entitlements.count <= 1, dimension != nil || byEntitlement, try await useRollups() else { return nil }
        let logger = database.logger
        // Per key, hour cells too (report_mrr_hours); per dimension value, day cells only.
        let (boundary, midnight, lo, hi) = dimension == nil ? ReportRollup.nearestHour(at) : ReportRollup.nearestMidnight(at)
        struct Group: Hashable {
            var key: String
            var value: String
        }
        return try await reading { c in
            var keys = byEntitlement ? d.entitlements.sorted() : [d.entitlements.first ?? ""]
            if byEntitlement, keys.isEmpty {
                // Every entitlement key (the paid coverage's table is small: days × keys × currencies).
                let rows = try await c.query("SELECT DISTINCT entitlement FROM report_paid_days WHERE entitlement > ''", logger: logger)
                for try await key in rows.decode(String.self) { keys.append(key) }
            }
            var amounts: [Group: [(currency: String, amount: MonthlyAmount)]] = [:]
            var subscribers: [Group: [String: Int64]] = [:]
            let sums =
                if let dimension {
                    try await c.query(
                        """
                        SELECT entitlement, value, currency, denominator::text, (sum(started) - sum(ended))::text
                        FROM report_mrr_dimension_days
                        WHERE entitlement = ANY(\(TextArray(keys))::text[]) AND dimension = \(dimension.rawValue) AND day_us < \(boundary)
                          AND (cardinality(\(TextArray(values))::text[]) = 0 OR value = ANY(\(TextArray(values))::text[]))
                        GROUP BY 1, 2, 3, 4 HAVING sum(started) <> sum(ended)
                        """, logger: logger)
                } else {
                    try await c.query(
                        """
                        SELECT entitlement, '', currency, denominator::text, (sum(started) - sum(ended))::text FROM (
                            SELECT entitlement, currency, denominator, started, ended FROM report_mrr_days
                            WHERE entitlement = ANY(\(TextArray(keys))::text[]) AND day_us < \(midnight)
                            UNION ALL
                            SELECT entitlement, currency, denominator, started, ended FROM report_mrr_hours
                            WHERE entitlement = ANY(\(TextArray(keys))::text[]) AND hour_us >= \(midnight) AND hour_us < \(boundary)
                        ) cells
                        GROUP BY 1, 2, 3, 4 HAVING sum(started) <> sum(ended)
                        """, logger: logger)
                }
            for try await (key, value, currency, den, num) in sums.decode((String, String, String, String, String).self) {
                guard let n = Int128(num), let d = Int128(den), d > 0 else { throw ReportOverflow(what: "the monthly amounts of \(currency)") }
                amounts[Group(key: key, value: value), default: []].append((currency, MonthlyAmount(numerator: n, denominator: d)))
            }
            let counts =
                if let dimension {
                    try await c.query(
                        """
                        SELECT entitlement, value, currency, (sum(starts) - sum(ends))::int8 FROM report_paid_dimension_days
                        WHERE entitlement = ANY(\(TextArray(keys))::text[]) AND dimension = \(dimension.rawValue) AND day_us < \(boundary)
                          AND (cardinality(\(TextArray(values))::text[]) = 0 OR value = ANY(\(TextArray(values))::text[]))
                        GROUP BY 1, 2, 3 HAVING sum(starts) <> sum(ends)
                        """, logger: logger)
                } else {
                    try await c.query(
                        """
                        SELECT entitlement, '', currency, (sum(starts) - sum(ends))::int8 FROM (
                            SELECT entitlement, currency, starts, ends FROM report_paid_days
                            WHERE entitlement = ANY(\(TextArray(keys))::text[]) AND day_us < \(midnight)
                            UNION ALL
                            SELECT entitlement, currency, starts, ends FROM report_paid_hours
                            WHERE entitlement = ANY(\(TextArray(keys))::text[]) AND hour_us >= \(midnight) AND hour_us < \(boundary)
                        ) cells
                        GROUP BY 1, 2, 3 HAVING sum(starts) <> sum(ends)
                        """, logger: logger)
                }
            for try await (key, value, currency, n) in counts.decode((String, String, String, Int64).self) {
                subscribers[Group(key: key, value: value), default: [:]][currency] = n
            }
            var changed: [Group: [MRRService]] = [:]
            for moved in try await Self.movedServices(c, key: "", between: lo, and: hi, logger: logger) {
                let value = dimension.map(moved.dimensions.value(of:)) ?? ""
                guard values.isEmpty || values.contains(value) else { continue }
                for key in keys where key.isEmpty || moved.entitlements.contains(key) {
                    changed[Group(key: key, value: value), default: []].append(moved.service)
                }
            }
            var lines: [Grouped<MRRLine>] = []
            for g in Set(amounts.keys).union(subscribers.keys).union(changed.keys) {
                let label: String? = byEntitlement ? g.key : (d.groupBy == nil ? nil : CellScope.group(g.value))
                for line in try ReportRollup.mrr(
                    at: at, boundary: Timestamp(microseconds: boundary), amounts: amounts[g] ?? [], subscribers: subscribers[g] ?? [:],
                    changed: changed[g] ?? [])
                {
                    lines.append(Grouped(group: label, row: MRRLine(currency: line.currency, mrrMinor: line.mrrMinor, activePaid: line.activePaid)))
                }
            }
            return lines.sorted {
                $0.group == $1.group ? $0.row.currency < $1.row.currency : ReportDimensions.groupOrder($0.group, $1.group)
            }
        }
    }

    /// The filters as text-array binds: stores, countries, products, entitlements (empty: not filtered).
    static func filterBinds(_ d: ReportDimensions) -> (TextArray, TextArray, TextArray, TextArray) {
        (TextArray(d.stores.sorted()), TextArray(d.countries.sorted()), TextArray(d.productIDs.sorted()), TextArray(d.entitlements.sorted()))
    }

    /// Churn per group and period. Only `entitlement=` (one value) keeps the rollups; anything else streams the
    /// runs of the span with, for each run, the transactions overlapping it (their dimensions and service start),
    /// through `GroupedChurnAccumulator`. By entitlement the runs are those of each entitlement key; otherwise those
    /// of all entitlements together, a subscriber counted once (with several `entitlement=` values, when the
    /// transaction covering the instant grants one of them).
    public func churn(boundaries: [Timestamp], interval: ReportInterval, dimensions: ReportDimensions) async throws -> [Grouped<ChurnPeriod>] {
        if let entitlement = dimensions.rollupEntitlement {
            return try await churn(boundaries: boundaries, interval: interval, entitlement: entitlement).map { Grouped(group: nil, row: $0) }
        }
        if let cells = try await churnFromRollups(boundaries: boundaries, interval: interval, dimensions: dimensions) { return cells }
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return GroupedChurnAccumulator(boundaries: boundaries, dimensions: dimensions).periods.map { Grouped(group: $0.group, row: $0.period) }
        }
        let acc = try await streamRuns(
            dimensions: dimensions, from: from, to: to, cohorts: false,
            into: GroupedChurnAccumulator(boundaries: boundaries, dimensions: dimensions))
        return acc.periods.map { Grouped(group: $0.group, row: $0.period) }
    }

    /// Retention cohorts per group. Only `entitlement=` (one value) keeps the rollups; anything else streams the
    /// runs of the cohorts' members with the transactions overlapping each run, like churn.
    public func retention(
        from: Timestamp, to: Timestamp, until: Timestamp, dimensions: ReportDimensions
    ) async throws -> [Grouped<RetentionCohort>] {
        if let entitlement = dimensions.rollupEntitlement {
            return try await retention(from: from, to: to, until: until, entitlement: entitlement).map { Grouped(group: nil, row: $0) }
        }
        let initial = GroupedRetentionAccumulator(from: from, to: to, until: until, dimensions: dimensions)
        let months = ReportCalendar.boundaries(from: from, to: to, interval: .month)
        guard let first = months.first, let last = months.last, months.count > 1 else {
            return initial.cohorts.map { Grouped(group: $0.group, row: $0.cohort) }
        }
        let acc = try await streamRuns(dimensions: dimensions, from: first.microseconds, to: last.microseconds, cohorts: true, into: initial)
        return acc.cohorts.map { Grouped(group: $0.group, row: $0.cohort) }
    }

    /// Streams paid runs with, for each, the transactions overlapping it (their dimensions and service start),
    /// one subscriber and entitlement key at a time: the runs of `[from, to)` (churn), or with `cohorts` every run
    /// of the subscribers whose first paid run started in `[from, to)` (retention). By entitlement the runs of each
    /// entitlement key (those asked for, else all); otherwise the runs over all entitlements together.
    private func streamRuns<A: DimensionedRunAccumulating>(
        dimensions: ReportDimensions, from: Int64, to: Int64, cohorts: Bool, into initial: A
    ) async throws -> A {
        let perEntitlement = dimensions.groupBy == .entitlement
        let keys = perEntitlement ? Array(dimensions.entitlements) : [""]
        let everyKey = perEntitlement && dimensions.entitlements.isEmpty
        let logger = database.logger
        return try await reading { c in
            var acc = initial
            let rows = try await c.query(
                """
                SELECT r.subscriber_id, r.entitlement, r.start_us, r.end_us, r.first_start_us, r.lapse, r.transferred_in,
                       coalesce((SELECT string_agg(concat_ws(chr(31), greatest(t.start_us, t.held_from_us)::text, t.store,
                                                             coalesce(t.country, ''), t.product_id,
                                                             array_to_string(t.entitlements, chr(29))), chr(30))
                                 FROM report_transactions t
                                 WHERE t.subscriber_id = r.subscriber_id
                                   AND coalesce(t.service_end_us, 9223372036854775807) > r.start_us
                                   AND greatest(t.start_us, t.held_from_us) < coalesce(r.end_us, 9223372036854775807)
                                   AND (r.entitlement = '' OR r.entitlement = ANY(t.entitlements))), '')
                FROM report_runs r
                WHERE ((\(everyKey) AND r.entitlement <> '') OR r.entitlement = ANY(\(TextArray(keys))::text[]))
                  AND CASE WHEN \(cohorts) THEN r.first_start_us >= \(from) AND r.first_start_us < \(to)
                           ELSE r.start_us < \(to) AND (r.end_us IS NULL OR r.end_us >= \(from)) END
                ORDER BY r.subscriber_id, r.entitlement, r.start_us
                """, logger: logger)
            var current: (subscriber: String, key: String)?
            var runs: [PaidRun] = []
            var services: [[RevenueTransaction]] = []
            var first = Timestamp(microseconds: 0)
            func flush() {
                guard let current, !runs.isEmpty else { return }
                acc.add(runs: runs, firstStart: first, services: services, group: perEntitlement ? current.key : nil)
            }
            for try await row in rows {
                guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let subscriber = try cells.string()
                let key = try cells.string()
                let start = try cells.int64()
                let end = try cells.optionalInt64()
                let firstStart = try cells.int64()
                let lapse = try cells.optionalString()
                let transferredIn = try cells.bool()
                let overlapping = try cells.string()
                if current?.subscriber != subscriber || current?.key != key {
                    flush()
                    runs.removeAll(keepingCapacity: true)
                    services.removeAll(keepingCapacity: true)
                    current = (subscriber, key)
                    first = Timestamp(microseconds: firstStart)
                }
                runs.append(
                    PaidRun(
                        entitlement: key, start: .init(microseconds: start), end: end.map(Timestamp.init(microseconds:)),
                        lapse: lapse.flatMap(LapseReason.init(rawValue:)), transferredIn: transferredIn))
                services.append(Self.services(overlapping))
            }
            flush()
            return acc
        }
    }

    /// Trials per group and period. Only `entitlement=` (one value) keeps the rollups; anything else reads the
    /// trial facts of the span (one row per trial transaction and entitlement, with its dimensions).
    public func trials(boundaries: [Timestamp], interval: ReportInterval, dimensions: ReportDimensions) async throws -> [Grouped<TrialPeriod>] {
        if let entitlement = dimensions.rollupEntitlement {
            return try await trials(boundaries: boundaries, interval: interval, entitlement: entitlement).map { Grouped(group: nil, row: $0) }
        }
        if let cells = try await trialsFromRollups(boundaries: boundaries, dimensions: dimensions) { return cells }
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return GroupedTrialAccumulator(boundaries: boundaries, dimensions: dimensions).periods.map { Grouped(group: $0.group, row: $0.period) }
        }
        let logger = database.logger
        return try await reading { c in
            var acc = GroupedTrialAccumulator(boundaries: boundaries, dimensions: dimensions)
            let rows = try await c.query(
                """
                SELECT source_event_id, entitlement, start_us, end_us, converted, store, country, product_id FROM report_trials
                WHERE start_us >= \(from) AND start_us < \(to)
                ORDER BY source_event_id, entitlement
                """, logger: logger)
            var trial: [TrialFact] = []
            for try await (id, entitlement, start, end, converted, store, country, product) in rows.decode(
                (UUID, String, Int64, Int64, Bool, String, String?, String).self)
            {
                if let first = trial.first, first.eventID != id {
                    acc.add(trial)
                    trial.removeAll(keepingCapacity: true)
                }
                trial.append(
                    TrialFact(
                        eventID: id, entitlement: entitlement, start: .init(microseconds: start), end: .init(microseconds: end),
                        converted: converted, store: store, country: country, productID: product))
            }
            acc.add(trial)
            return acc.periods.map { Grouped(group: $0.group, row: $0.period) }
        }
    }

    /// The transactions of `string_agg(concat_ws(chr(31), service start, store, country, product, entitlements))`:
    /// their dimensions, `start` their service's start.
    static func services(_ text: String) -> [RevenueTransaction] {
        guard !text.isEmpty else { return [] }
        return text.split(separator: "\u{1E}").compactMap { item in
            let f = item.split(separator: "\u{1F}", omittingEmptySubsequences: false)
            guard f.count == 5, let start = Int64(f[0]) else { return nil }
            let at = Timestamp(microseconds: start)
            return RevenueTransaction(
                eventID: Self.noEventID, entitlements: f[4].isEmpty ? [] : f[4].split(separator: "\u{1D}").map(String.init), kind: .paid,
                currency: "", gross: 0, commission: 0, occurredAt: at, start: at, end: nil, stop: nil, refunds: [], monthly: nil,
                country: f[2].isEmpty ? nil : String(f[2]), store: String(f[1]), productID: String(f[3]))
        }
    }

    /// An entitlement list written with `array_to_string(…, chr(31))` (identifiers hold no control characters).
    /// The event id of a fact read without one (the accumulators do not use it): a fixed value, because
    /// `UUID()` reads the kernel's random source, a system call per row of a report that reads hundreds of
    /// thousands.
    static let noEventID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))

    static func entitlements(_ text: String) -> [String] {
        text.isEmpty ? [] : text.split(separator: "\u{1F}", omittingEmptySubsequences: false).map(String.init)
    }
}

/// A report that takes one subscriber's paid runs of one entitlement key at a time, with the transactions
/// overlapping each run (their dimensions).
protocol DimensionedRunAccumulating: Sendable {
    mutating func add(runs: [PaidRun], firstStart: Timestamp, services: [[RevenueTransaction]], group: String?)
}

extension GroupedChurnAccumulator: DimensionedRunAccumulating {}

extension GroupedRetentionAccumulator: DimensionedRunAccumulating {
    mutating func add(runs: [PaidRun], firstStart: Timestamp, services: [[RevenueTransaction]], group: String?) {
        add(runs: runs, services: services, group: group)
    }
}
