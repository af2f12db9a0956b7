import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// MRR of one currency at an instant.
public struct MRRLine: Sendable, Hashable {
    public var currency: String
    /// 128-bit, like every report sum (`RevenueFigures`).
    public var mrrMinor: Int128
    /// Subscribers with a paid transaction of this currency covering the instant.
    public var activePaid: Int
}

/// Computes the reports from the fact tables: rows stream from PostgreSQL in subscriber order into the
/// accumulators of `LedgerCore`, so memory holds one subscriber and the result grid, never the ledger.
public struct ReportStore: Sendable {
    let database: Database
    /// Whether reports read the rollups (schema 0014) when they hold the whole ledger; false reads the facts
    /// row by row (the tests compare the two).
    let rollups: Bool

    public init(database: Database, rollups: Bool = true) {
        self.database = database
        self.rollups = rollups
    }

    public init(client: PostgresClient, logger: Logger, rollups: Bool = true) {
        self.init(database: Database(client: client, logger: logger), rollups: rollups)
    }

    /// A connection for reading the report facts or cells, once the rollup worker has followed the log to its
    /// end (on the primary): both are its (`ReportRollupWorker`, docs/reports.md "Rollups"), so a report right
    /// after an append includes it.
    func reading<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await ReportRollupWorker.catchUpIfBehind(database)
        return try await database.withConnection(body)
    }

    /// `reading`, in a transaction.
    func readingTransaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await ReportRollupWorker.catchUpIfBehind(database)
        return try await database.transaction(body)
    }

    /// Whether the rollups can answer: asked for, and complete (a migration on a ledger with events leaves
    /// them empty until the rebuild `subledger migrate` runs). On the primary, the events the rollup worker has
    /// not followed yet are applied first (`ReportRollupWorker.catchUpIfBehind`: the report facts are its too),
    /// so the report includes every event committed before it; a replica answers what it holds
    /// (`ReadRouter.readReports` says which position that is).
    func useRollups() async throws -> Bool {
        let complete = try await ReportRollupWorker.catchUpIfBehind(database)
        return rollups && complete
    }

    /// Churn per period between consecutive `boundaries`, the calendar grid of `interval`; `entitlement`
    /// nil counts all entitlements together.
    public func churn(boundaries: [Timestamp], interval: ReportInterval, entitlement: String?) async throws -> [ChurnPeriod] {
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1,
            try await useRollups()
        else { return try await churn(boundaries: boundaries, entitlement: entitlement) }
        let logger = database.logger
        let key = entitlement ?? ""
        return try await reading { c in
            var days: [(day: Int64, counts: ReportRollup.Counts)] = []
            let rows = try await c.query(
                "SELECT day_us, starts, ends FROM report_run_days WHERE entitlement = \(key) AND day_us < \(to)", logger: logger)
            for try await (day, starts, ends) in rows.decode((Int64, Int64, Int64).self) {
                days.append((day, .init(first: starts, second: ends)))
            }
            var transitions: [Int64: ReportRollup.ChurnCell] = [:]
            let cells = try await c.query(
                """
                SELECT period_us, new, reactivated, churned_refund, churned_involuntary, churned_voluntary, churned_other,
                       transferred_in, transferred_out
                FROM report_churn_periods
                WHERE entitlement = \(key) AND period_interval = \(interval.rawValue) AND period_us >= \(from) AND period_us < \(to)
                """, logger: logger)
            for try await (period, new, reactivated, refund, involuntary, voluntary, other, movedIn, movedOut) in cells.decode(
                (Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self)
            {
                transitions[period] = .init(
                    new: new, reactivated: reactivated, refund: refund, involuntary: involuntary, voluntary: voluntary, other: other,
                    transferredIn: movedIn, transferredOut: movedOut)
            }
            return ReportRollup.churnPeriods(boundaries: boundaries, runDays: days, transitions: transitions)
        }
    }

    /// Churn from the run facts, subscriber by subscriber.
    public func churn(boundaries: [Timestamp], entitlement: String?) async throws -> [ChurnPeriod] {
        var acc = ChurnAccumulator(boundaries: boundaries)
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return acc.periods
        }
        acc = try await streamRuns(
            """
            SELECT subscriber_id, start_us, end_us, first_start_us, lapse, transferred_in FROM report_runs
            WHERE entitlement = \(entitlement ?? "") AND start_us < \(to) AND (end_us IS NULL OR end_us >= \(from))
            ORDER BY subscriber_id, start_us
            """, into: acc)
        return acc.periods
    }

    /// Cohorts of the months in `[from, to)`, each month k shown when `cohort + k months <= until`.
    public func retention(from: Timestamp, to: Timestamp, until: Timestamp, entitlement: String?) async throws -> [RetentionCohort] {
        var acc = RetentionAccumulator(from: from, to: to, until: until)
        guard let first = acc.cohorts.first?.start, let last = acc.cohorts.last?.start else { return [] }
        let end = ReportCalendar.addingMonths(1, to: last)
        if try await useRollups() {
            let logger = database.logger
            let key = entitlement ?? ""
            return try await reading { c in
                var cells: [(cohort: Int64, month: Int64, delta: Int64)] = []
                let rows = try await c.query(
                    """
                    SELECT cohort_us, month_us, delta FROM report_retention_cells
                    WHERE entitlement = \(key) AND cohort_us >= \(first.microseconds) AND cohort_us < \(end.microseconds)
                    """, logger: logger)
                for try await (cohort, month, delta) in rows.decode((Int64, Int64, Int64).self) { cells.append((cohort, month, delta)) }
                return ReportRollup.retentionCohorts(from: from, to: to, until: until, cells: cells)
            }
        }
        acc = try await streamRuns(
            """
            SELECT subscriber_id, start_us, end_us, first_start_us, lapse, transferred_in FROM report_runs
            WHERE entitlement = \(entitlement ?? "") AND first_start_us >= \(first.microseconds)
              AND first_start_us < \(end.microseconds)
            ORDER BY subscriber_id, start_us
            """, into: acc)
        return acc.cohorts
    }

    /// Revenue per period and currency over the calendar grid of `interval`; `entitlement` keeps transactions
    /// that grant it. Month grids read the month cells, day and week grids the day cells and the transactions
    /// still queued for them; transactions too long for the cells are read from the facts beside them.
    public func revenue(boundaries: [Timestamp], interval: ReportInterval, entitlement: String?) async throws -> [RevenuePeriod] {
        guard let to = boundaries.last?.microseconds, boundaries.count > 1, try await useRollups() else {
            return try await revenue(boundaries: boundaries, entitlement: entitlement)
        }
        let logger = database.logger
        let key = entitlement ?? ""
        if interval == .month {
            return try await reading { c in
                let cells = try await Self.revenueCells(
                    "SELECT month_us, \(unescaped: Self.revenueCellColumns) FROM report_revenue_months WHERE entitlement = \(key) AND month_us < \(to)",
                    on: c, logger: logger)
                let rolled = ReportRollup.revenuePeriods(boundaries: boundaries, cells: cells)
                let long = try await Self.revenue(boundaries: boundaries, entitlement: entitlement, beside: .month, on: c, logger: logger)
                return ReportRollup.merge(rolled, long)
            }
        }
        // One snapshot: the worker moves rows from the queue into the day cells in one transaction.
        return try await readingTransaction { c in
            try await c.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
            var cells = try await Self.revenueCells(
                "SELECT day_us, \(unescaped: Self.revenueCellColumns) FROM report_revenue_days WHERE entitlement = \(key) AND day_us < \(to)",
                on: c, logger: logger)
            var queued = ReportRollup()
            let rows = try await c.query(
                """
                SELECT change, \(unescaped: Self.transactionColumns) FROM report_revenue_pending
                WHERE \(key) = '' OR \(key) = ANY(entitlements)
                """, logger: logger)
            for try await row in rows {
                guard var cell = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let change = try cell.int64()
                queued.addQueuedRevenueDays(try Self.transaction(&cell), change: change)
            }
            for (k, cell) in queued.revenueDays.cells where k.period < to { cells.append((k.period, k.currency, cell)) }
            let rolled = ReportRollup.revenuePeriods(boundaries: boundaries, cells: cells)
            let long = try await Self.revenue(boundaries: boundaries, entitlement: entitlement, beside: .day, on: c, logger: logger)
            return ReportRollup.merge(rolled, long)
        }
    }

    private static let revenueCellColumns = """
        currency, transactions, billings::text, commission::text, refunds::text, refunded_unrecognized::text,
        refunds_recognized::text, recognized::text, settled_deferred::text, handover::text, tax::text
        """

    /// Revenue cells (`period` first, then `revenueCellColumns`).
    private static func revenueCells(
        _ query: PostgresQuery, on c: PostgresConnection, logger: Logger
    ) async throws -> [(period: Int64, currency: String, cell: ReportRollup.RevenueCell)] {
        var cells: [(period: Int64, currency: String, cell: ReportRollup.RevenueCell)] = []
        for try await row in try await c.query(query, logger: logger) {
            let (period, currency, transactions, b, c, r, ru, rr, rec, sd, ho, tx) = try row.decode(
                (Int64, String, Int64, String, String, String, String, String, String, String, String, String).self)
            cells.append((period, currency, try revenueCell(currency, transactions, [b, c, r, ru, rr, rec, sd, ho, tx])))
        }
        return cells
    }

    /// A revenue cell from its transactions and the nine figures of `revenueCellColumns`, in that order, as text.
    static func revenueCell(_ currency: String, _ transactions: Int64, _ figures: [String]) throws -> ReportRollup.RevenueCell {
        let n = figures.compactMap { Int128($0) }
        guard n.count == 9 else { throw ReportOverflow(what: "the revenue rollup of \(currency)") }
        var cell = ReportRollup.RevenueCell(transactions: transactions, settledDeferred: n[6])
        (cell.figures.billings, cell.figures.commission, cell.figures.refunds) = (n[0], n[1], n[2])
        (cell.figures.refundedUnrecognized, cell.figures.refundsRecognized, cell.figures.recognized) = (n[3], n[4], n[5])
        (cell.figures.handover, cell.figures.tax) = (n[7], n[8])
        return cell
    }

    /// Revenue from the transaction facts, one transaction at a time.
    public func revenue(boundaries: [Timestamp], entitlement: String?) async throws -> [RevenuePeriod] {
        guard boundaries.count > 1 else { return [] }
        let logger = database.logger
        return try await reading { c in
            try await Self.revenue(boundaries: boundaries, entitlement: entitlement, beside: nil, on: c, logger: logger)
        }
    }

    /// Revenue of the transactions in range: all of them, or those left out of the month cells (`beside:
    /// .month`) or of the day cells (`beside: .day`).
    private static func revenue(
        boundaries: [Timestamp], entitlement: String?, beside cells: ReportInterval?, on c: PostgresConnection, logger: Logger
    ) async throws -> [RevenuePeriod] {
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, boundaries.count > 1 else {
            return []
        }
        let key = entitlement ?? ""
        let beside =
            switch cells {
            case nil: ""
            case .month: "AND NOT revenue_rolled_up"
            case .day, .week: "AND NOT revenue_rolled_up_days"
            }
        var acc = RevenueAccumulator(boundaries: boundaries)
        let rows = try await c.query(
            """
            SELECT \(unescaped: transactionColumns) FROM report_transactions
            WHERE settled_us >= \(from) AND LEAST(occurred_us, start_us, (SELECT min(r) FROM unnest(refund_at_us) r)) < \(to)
              AND (\(key) = '' OR \(key) = ANY(entitlements)) \(unescaped: beside)
            """, logger: logger)
        // Concrete decoding of each cell (`BinaryCells`): this streams every paid transaction of the span,
        // and PostgresNIO's generic tuple and array decoding dominated the report's time.
        for try await row in rows {
            guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
            acc.add(try transaction(&cells))
        }
        return acc.periods
    }

    /// The revenue columns of a transaction fact (`report_transactions`, `report_revenue_pending`).
    static let transactionColumns = """
        source_event_id, kind, currency, gross, commission, occurred_us, start_us, end_us, stop_us,
        array_to_string(refund_at_us, ','), array_to_string(refund_amount, ','), array_to_string(refund_cut, ','),
        held_from_us, handed_over_us, tax, country, store, product_id
        """

    /// A transaction from `transactionColumns`, without its entitlements (the query filtered by them).
    static func transaction(_ c: inout BinaryCells) throws -> RevenueTransaction {
        let id = try c.uuid()
        let kind = try c.string()
        let currency = try c.string()
        let gross = try c.int64()
        let commission = try c.int64()
        let occurred = try c.int64()
        let start = try c.int64()
        let end = try c.optionalInt64()
        let stop = try c.optionalInt64()
        let refundAt = Self.integers(try c.string())
        let refundAmount = Self.integers(try c.string())
        let refundCut = try c.string().split(separator: ",").map { $0 != "f" }  // bool[] as text is t/f
        let heldFrom = try c.optionalInt64()
        let handedOver = try c.optionalInt64()
        let tax = try c.int64()
        let country = try c.optionalString()
        let store = try c.string()
        let product = try c.string()
        return RevenueTransaction(
            eventID: id, entitlements: [], kind: Window.Kind(rawValue: kind) ?? .paid, currency: currency,
            gross: gross, commission: commission, occurredAt: .init(microseconds: occurred),
            start: .init(microseconds: start), end: end.map(Timestamp.init(microseconds:)),
            stop: stop.map(Timestamp.init(microseconds:)),
            refunds: zip(refundAt, refundAmount).enumerated().map { i, r in
                // Rows from before refund_cut existed hold only cutting refunds.
                .init(at: .init(microseconds: r.0), amount: r.1, cut: i < refundCut.count ? refundCut[i] : true)
            },
            monthly: nil, handedOver: handedOver.map(Timestamp.init(microseconds:)), heldFrom: heldFrom.map(Timestamp.init(microseconds:)),
            tax: tax, country: country, store: store, productID: product)
    }

    /// Trials started per period; a trial transaction counts once, converted if any entitlement converted.
    /// From the rollups' days when they are complete (boundaries are midnights).
    public func trials(boundaries: [Timestamp], interval: ReportInterval, entitlement: String?) async throws -> [TrialPeriod] {
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds, try await useRollups() else {
            return try await trials(boundaries: boundaries, entitlement: entitlement)
        }
        let logger = database.logger
        let key = entitlement ?? ""
        return try await reading { c in
            var days: [(day: Int64, counts: ReportRollup.Counts)] = []
            let rows = try await c.query(
                """
                SELECT day_us, started, converted FROM report_trial_days
                WHERE entitlement = \(key) AND day_us >= \(from) AND day_us < \(to)
                """, logger: logger)
            for try await (day, started, converted) in rows.decode((Int64, Int64, Int64).self) {
                days.append((day, .init(first: started, second: converted)))
            }
            return ReportRollup.trialPeriods(boundaries: boundaries, days: days)
        }
    }

    /// Trials from the trial facts.
    public func trials(boundaries: [Timestamp], entitlement: String?) async throws -> [TrialPeriod] {
        let initial = TrialAccumulator(boundaries: boundaries)
        guard let from = boundaries.first?.microseconds, let to = boundaries.last?.microseconds else { return initial.periods }
        let logger = database.logger
        let key = entitlement ?? ""
        let acc = try await reading { c in
            var acc = initial
            let rows = try await c.query(
                """
                SELECT min(start_us), bool_or(converted) FROM report_trials
                WHERE start_us >= \(from) AND start_us < \(to) AND (\(key) = '' OR entitlement = \(key))
                GROUP BY source_event_id
                """, logger: logger)
            for try await (start, converted) in rows.decode((Int64, Bool).self) {
                acc.add(start: .init(microseconds: start), converted: converted)
            }
            return acc
        }
        return acc.periods
    }

    /// MRR per currency at `at`: monthly amounts of the paid transactions covering it, summed exactly in
    /// PostgreSQL per denominator and rounded once here.
    public func mrr(at: Timestamp, entitlement: String?) async throws -> [MRRLine] {
        let logger = database.logger
        if try await useRollups() {
            let key = entitlement ?? ""
            // The cells give the state just before an hour boundary: the nearer one, before or after the
            // instant, so that at most half an hour of transactions is read.
            let (boundary, midnight, lo, hi) = ReportRollup.nearestHour(at)
            return try await reading { c in
                // The days before the boundary's midnight, then that day's hours before the boundary.
                var amounts: [(currency: String, amount: MonthlyAmount)] = []
                let sums = try await c.query(
                    """
                    SELECT currency, denominator::text, (sum(started) - sum(ended))::text FROM (
                        SELECT currency, denominator, started, ended FROM report_mrr_days
                        WHERE entitlement = \(key) AND day_us < \(midnight)
                        UNION ALL
                        SELECT currency, denominator, started, ended FROM report_mrr_hours
                        WHERE entitlement = \(key) AND hour_us >= \(midnight) AND hour_us < \(boundary)
                    ) cells GROUP BY currency, denominator
                    """, logger: logger)
                for try await (currency, den, num) in sums.decode((String, String, String).self) {
                    guard let n = Int128(num), let d = Int128(den), d > 0 else {
                        throw ReportOverflow(what: "the monthly amounts of \(currency)")
                    }
                    amounts.append((currency, MonthlyAmount(numerator: n, denominator: d)))
                }
                var subscribers: [String: Int64] = [:]
                let counts = try await c.query(
                    """
                    SELECT currency, (sum(starts) - sum(ends))::int8 FROM (
                        SELECT currency, starts, ends FROM report_paid_days WHERE entitlement = \(key) AND day_us < \(midnight)
                        UNION ALL
                        SELECT currency, starts, ends FROM report_paid_hours
                        WHERE entitlement = \(key) AND hour_us >= \(midnight) AND hour_us < \(boundary)
                    ) cells GROUP BY currency
                    """, logger: logger)
                for try await (currency, n) in counts.decode((String, Int64).self) { subscribers[currency] = n }
                let changed = try await Self.movedServices(c, key: key, between: lo, and: hi, logger: logger).map(\.service)
                return try ReportRollup.mrr(
                    at: at, boundary: Timestamp(microseconds: boundary), amounts: amounts, subscribers: subscribers, changed: changed
                ).map {
                    MRRLine(currency: $0.currency, mrrMinor: $0.mrrMinor, activePaid: $0.activePaid)
                }
            }
        }
        let key = entitlement ?? ""
        let t = at.microseconds
        return try await reading { c in
            var amounts: [String: [MonthlyAmount]] = [:]
            let sums = try await c.query(
                """
                SELECT currency, sum(monthly_num)::text, monthly_den::text FROM report_transactions
                WHERE monthly_num IS NOT NULL AND greatest(start_us, held_from_us) <= \(t)
                  AND (service_end_us IS NULL OR service_end_us > \(t))
                  AND (\(key) = '' OR \(key) = ANY(entitlements))
                GROUP BY currency, monthly_den
                """, logger: logger)
            for try await (currency, num, den) in sums.decode((String, String, String).self) {
                guard let n = Int128(num), let d = Int128(den), d > 0 else {
                    throw ReportOverflow(what: "the monthly amounts of \(currency)")
                }
                amounts[currency, default: []].append(MonthlyAmount(numerator: n, denominator: d))
            }
            var lines: [MRRLine] = []
            let counts = try await c.query(
                """
                SELECT currency, count(DISTINCT subscriber_id) FROM report_transactions
                WHERE monthly_num IS NOT NULL AND greatest(start_us, held_from_us) <= \(t)
                  AND (service_end_us IS NULL OR service_end_us > \(t))
                  AND (\(key) = '' OR \(key) = ANY(entitlements))
                GROUP BY currency ORDER BY currency
                """, logger: logger)
            for try await (currency, n) in counts.decode((String, Int64).self) {
                lines.append(MRRLine(currency: currency, mrrMinor: try MonthlyAmount.roundedSum(amounts[currency] ?? []), activePaid: Int(n)))
            }
            return lines
        }
    }

    /// Every monthly transaction of `key` of the subscribers whose service starts or ends within `[lo, hi]`
    /// (between an MRR report's cell boundary and its instant) that reaches into that span, with its rate date and
    /// dimensions. Two queries, so no plan can turn the second into a scan of the table.
    static func movedServices(
        _ c: PostgresConnection, key: String, between lo: Int64, and hi: Int64, logger: Logger
    ) async throws -> [MovedService] {
        var moved: [String] = []
        let ids = try await c.query(
            """
            SELECT DISTINCT subscriber_id FROM report_transactions
            WHERE (start_us BETWEEN \(lo) AND \(hi) OR service_end_us BETWEEN \(lo) AND \(hi) OR held_from_us BETWEEN \(lo) AND \(hi))
              AND monthly_num IS NOT NULL
            """, logger: logger)
        for try await id in ids.decode(String.self) { moved.append(id) }
        var services: [MovedService] = []
        let rows = try await c.query(
            """
            SELECT subscriber_id, currency, greatest(start_us, held_from_us), service_end_us, monthly_num::text, monthly_den::text,
                   floor(occurred_us / 86400000000.0)::int8, store, coalesce(country, ''), product_id,
                   array_to_string(entitlements, chr(31))
            FROM report_transactions
            WHERE subscriber_id = ANY(\(TextArray(moved))::text[]) AND monthly_num IS NOT NULL
              AND (\(key) = '' OR \(key) = ANY(entitlements))
              AND greatest(start_us, held_from_us) <= \(hi) AND coalesce(service_end_us, 9223372036854775807) >= \(lo)
            """, logger: logger)
        for try await (subscriber, currency, start, end, num, den, occurred, store, country, product, entitlements) in rows.decode(
            (String, String, Int64, Int64?, String, String, Int64, String, String, String, String).self)
        {
            guard let n = Int128(num), let d = Int128(den), d > 0, let day = Int(exactly: occurred) else {
                throw ReportOverflow(what: "the monthly amounts of \(currency)")
            }
            let service = MRRService(
                subscriber: subscriber, currency: currency, start: .init(microseconds: start), end: end.map(Timestamp.init(microseconds:)),
                monthly: MonthlyAmount(numerator: n, denominator: d), occurred: FXDay(days: day))
            services.append(
                MovedService(
                    service: service, dimensions: ReportRollup.CellDimensions(store: store, country: country, product: product),
                    entitlements: Self.entitlements(entitlements)))
        }
        return services
    }

    /// A monthly transaction `movedServices` read: its service, its dimensions and what it grants.
    struct MovedService {
        var service: MRRService
        var dimensions: ReportRollup.CellDimensions
        var entitlements: [String]
    }

    /// Streams runs ordered by subscriber and hands each subscriber's runs to the accumulator.
    private func streamRuns<A: RunAccumulating>(_ query: PostgresQuery, into initial: A) async throws -> A {
        let logger = database.logger
        return try await reading { c in
            var acc = initial
            var current: String?
            var runs: [PaidRun] = []
            var first = Timestamp(microseconds: 0)
            let rows = try await c.query(query, logger: logger)
            for try await row in rows {
                guard var c = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
                let subscriber = try c.string()
                let start = try c.int64()
                let end = try c.optionalInt64()
                let firstStart = try c.int64()
                let lapse = try c.optionalString()
                let transferredIn = try c.bool()
                if subscriber != current {
                    if !runs.isEmpty { acc.add(runs: runs, firstStart: first) }
                    runs.removeAll(keepingCapacity: true)
                    current = subscriber
                    first = Timestamp(microseconds: firstStart)
                }
                runs.append(
                    PaidRun(
                        entitlement: "", start: .init(microseconds: start), end: end.map(Timestamp.init(microseconds:)),
                        lapse: lapse.flatMap(LapseReason.init(rawValue:)), transferredIn: transferredIn))
            }
            if !runs.isEmpty { acc.add(runs: runs, firstStart: first) }
            return acc
        }
    }
}

extension ReportStore {
    /// The integers of `array_to_string(int8[], ',')` (empty for an empty array).
    static func integers(_ text: String) -> [Int64] {
        text.isEmpty ? [] : text.split(separator: ",").compactMap { Int64($0) }
    }
}

/// A report that consumes one subscriber's paid runs at a time.
protocol RunAccumulating: Sendable {
    mutating func add(runs: [PaidRun], firstStart: Timestamp)
}

extension ChurnAccumulator: RunAccumulating {}

extension RetentionAccumulator: RunAccumulating {
    mutating func add(runs: [PaidRun], firstStart: Timestamp) { add(runs: runs) }
}
