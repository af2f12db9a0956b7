import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore
import LedgerStore

/// Analysts' reports (docs/semantics.md sections 5–6): JSON, or CSV with `Accept: text/csv` (or `format=csv`).
struct ReportRoutes {
    /// Reports read the fact tables and rollups on a replica that has the position asked for, else on the primary.
    let router: ReadRouter
    /// "Now" for the default period and `at`.
    var clock: WallClock = .system
    /// Reports never span more periods than this (a day grid over ~2.7 years).
    static let maxPeriods = 1000

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.get("reports/churn", use: cancelledOnDisconnect(churn))
        group.get("reports/mrr", use: cancelledOnDisconnect(mrr))
        group.get("reports/retention", use: cancelledOnDisconnect(retention))
        group.get("reports/trials", use: cancelledOnDisconnect(trials))
        group.get("reports/revenue", use: cancelledOnDisconnect(revenue))
        registerReportsII(on: group)
    }

    @Sendable func churn(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request, now: clock.now())
        let (result, position) = try await router.readReports(atLeast: q.minimum) {
            try await ReportStore(database: $0).churn(boundaries: q.boundaries, interval: q.interval, dimensions: q.dimensions)
        }
        let rows = result.map { g -> [JSONValue] in
            let p = g.row
            return q.dimensions.groupCell(g.group) + [
                .string(p.start.rfc3339), .string(p.end.rfc3339), .int(p.activeStart), .int(p.new), .int(p.reactivated),
                .int(p.churnedTotal), .int(p.churned[.voluntary] ?? 0), .int(p.churned[.involuntary] ?? 0),
                .int(p.churned[.refund] ?? 0), .int(p.churned[.other] ?? 0), .int(p.activeEnd), .ratio(p.churnRate),
                .int(p.transferredIn), .int(p.transferredOut),
            ]
        }
        return q.respond(ReportTable(name: "churn", columns: q.dimensions.groupColumn + ReportTable.churnColumns, rows: rows))
            .ledgerPosition(position)
    }

    @Sendable func revenue(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request, now: clock.now())
        let currency = try QueryParameters(request: request).reportingCurrency()
        let ((result, fx), position) = try await router.readReports(atLeast: q.minimum) { database -> ([Grouped<RevenuePeriod>], FXUse?) in
            let store = ReportStore(database: database)
            var fx: FXUse?
            if let currency { fx = try await Self.fxUse(currency, request: request, database: database) }
            return (try await store.revenue(boundaries: q.boundaries, interval: q.interval, dimensions: q.dimensions, converting: fx), fx)
        }
        let rows = result.map { g -> [JSONValue] in
            let (p, f) = (g.row, g.row.figures)
            return q.dimensions.groupCell(g.group) + [
                .string(p.start.rfc3339), .string(p.end.rfc3339), .string(p.currency), .int(f.billings), .int(f.tax), .int(f.commission),
                .int(f.proceeds), .int(f.refunds), .int(f.refundedUnrecognized), .int(f.refundsRecognized), .int(f.recognized),
                .int(p.deferredStart), .int(p.deferredEnd),
            ]
        }
        let table = ReportTable(name: "revenue", columns: q.dimensions.groupColumn + ReportTable.revenueColumns, rows: rows)
        guard let fx else { return q.respond(table).ledgerPosition(position) }
        if q.wantsCSV { return table.csv().fxVersion(fx).ledgerPosition(position) }
        return Response.json(
            q.envelope(["periods": .array(table.objects), "currency": .string(fx.currency), "fx_version": fx.json])
        ).fxVersion(fx).ledgerPosition(position)
    }

    /// The reporting currency and the rate version a converted report uses: `fx_version`, else the newest.
    static func fxUse(_ currency: String, request: Request, database: Database) async throws -> FXUse {
        let latest = try await FXStore(database: database).latestVersion()
        return FXUse(currency: currency, version: try QueryParameters(request: request).fxVersion(latest: latest) ?? latest)
    }

    @Sendable func trials(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request, now: clock.now())
        let (result, position) = try await router.readReports(atLeast: q.minimum) {
            try await ReportStore(database: $0).trials(boundaries: q.boundaries, interval: q.interval, dimensions: q.dimensions)
        }
        let rows = result.map { g -> [JSONValue] in
            let p = g.row
            return q.dimensions.groupCell(g.group) + [
                .string(p.start.rfc3339), .string(p.end.rfc3339), .int(p.started), .int(p.converted), .ratio(p.conversionRate),
            ]
        }
        return q.respond(ReportTable(name: "trials", columns: q.dimensions.groupColumn + ReportTable.trialColumns, rows: rows))
            .ledgerPosition(position)
    }

    @Sendable func retention(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request, interval: .month, now: clock.now())
        let (cohorts, position) = try await router.readReports(atLeast: q.minimum) {
            try await ReportStore(database: $0).retention(from: q.from, to: q.to, until: q.now, dimensions: q.dimensions)
        }
        if q.wantsCSV {
            let rows = cohorts.flatMap { g in
                g.row.retained.indices.map { k -> [JSONValue] in
                    let c = g.row
                    return q.dimensions.groupCell(g.group) + [
                        .string(c.start.rfc3339), .int(c.size), .int(k), .int(c.retained[k]), .ratio(c.ratio(k)),
                    ]
                }
            }
            return ReportTable(name: "retention", columns: q.dimensions.groupColumn + ReportTable.retentionCSVColumns, rows: rows).csv()
                .ledgerPosition(position)
        }
        let periods: [JSONValue] = cohorts.map { g in
            let c = g.row
            var members: [String: JSONValue] = [
                "period_start": .string(c.start.rfc3339), "cohort_size": .int(c.size),
                "retained": .array(
                    c.retained.indices.map { k in
                        .object(["month": .int(k), "subscribers": .int(c.retained[k]), "ratio": .ratio(c.ratio(k))])
                    }),
            ]
            if let column = q.dimensions.groupColumn.first { members[column] = q.dimensions.groupCell(g.group)[0] }
            return .object(members)
        }
        return Response.json(q.envelope(["periods": .array(periods)])).ledgerPosition(position)
    }

    @Sendable func mrr(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let query = QueryParameters(request: request)
        let at = try query.timestamp("at") ?? clock.now()
        let dimensions = try ReportDimensionsQuery.parse(request)
        let currency = try query.reportingCurrency()
        let minimum = try LedgerPosition.minimum(request)
        let ((lines, fx), position) = try await router.readReports(atLeast: minimum) { database -> ([Grouped<MRRLine>], FXUse?) in
            let store = ReportStore(database: database)
            var fx: FXUse?
            if let currency { fx = try await Self.fxUse(currency, request: request, database: database) }
            return (try await store.mrr(at: at, dimensions: dimensions, converting: fx), fx)
        }
        let table = ReportTable(
            name: "mrr", columns: dimensions.groupColumn + ReportTable.mrrColumns,
            rows: lines.map { dimensions.groupCell($0.group) + [.string($0.row.currency), .int($0.row.mrrMinor), .int($0.row.activePaid)] })
        if try ReportQuery.wantsCSV(request) { return table.csv().fxVersion(fx).ledgerPosition(position) }
        var members = dimensions.envelope
        members["at"] = .string(at.rfc3339)
        members["currencies"] = .array(table.objects)
        if let fx {
            members["currency"] = .string(fx.currency)
            members["fx_version"] = fx.json
        }
        return Response.json(.object(members)).fxVersion(fx).ledgerPosition(position)
    }
}

/// A report's rows under named columns, so JSON objects and CSV columns come out the same, and a CSV
/// without rows still starts with its header line.
struct ReportTable {
    static let churnColumns = [
        "period_start", "period_end", "active_start", "new", "reactivated", "churned", "churned_voluntary",
        "churned_involuntary", "churned_refund", "churned_other", "active_end", "churn_rate", "transferred_in", "transferred_out",
    ]
    static let revenueColumns = [
        "period_start", "period_end", "currency", "billings", "tax", "commission", "proceeds", "refunds", "refunded_unrecognized",
        "refunds_recognized", "recognized", "deferred_start", "deferred_end",
    ]
    static let trialColumns = ["period_start", "period_end", "started", "converted", "conversion_rate"]
    static let retentionCSVColumns = ["period_start", "cohort_size", "month", "subscribers", "ratio"]
    static let mrrColumns = ["currency", "mrr_minor", "active_paid"]

    let name: String
    let columns: [String]
    /// Values in the order of `columns`.
    let rows: [[JSONValue]]

    var objects: [JSONValue] {
        rows.map { .object(Dictionary(zip(columns, $0), uniquingKeysWith: { a, _ in a })) }
    }

    /// RFC 4180 CSV: the header line, then one line per row; JSON null is an empty field.
    func csv() -> Response {
        var buffer = ByteBuffer()
        buffer.writeImmutableBuffer(CSV.line(columns))
        for row in rows {
            buffer.writeImmutableBuffer(
                CSV.line(
                    row.map { value in
                        switch value {
                        case .null: ""
                        case .string(let s): s
                        case .number(let n): n.canonical
                        case .bool(let b): b ? "true" : "false"
                        default: value.canonicalString()
                        }
                    }))
        }
        return Response(status: .ok, headers: CSV.headers(filename: "\(name).csv"), body: .init(byteBuffer: buffer))
    }
}

/// The query every period report shares: `from`, `to`, `interval`, `entitlement`, and the answer's format.
struct ReportQuery {
    let from: Timestamp
    let to: Timestamp
    let now: Timestamp
    let interval: ReportInterval
    /// `store=`, `country=`, `product_id=`, `entitlement=` and `group_by=`.
    let dimensions: ReportDimensions
    let boundaries: [Timestamp]
    let wantsCSV: Bool
    /// The position the answer must include (`min_position`, `Ledger-Min-Position`).
    let minimum: Int64

    /// Defaults: `to` is the end of the current period, `from` twelve periods (thirty days) earlier.
    init(_ request: Request, interval fixed: ReportInterval? = nil, now: Timestamp) throws {
        let query = QueryParameters(request: request)
        let interval: ReportInterval
        if let fixed {
            interval = fixed
        } else if let text = request.uri.queryParameters["interval"] {
            guard let i = ReportInterval(rawValue: String(text)) else {
                throw APIError.invalidRequest("query parameter 'interval' must be day, week or month, not '\(text)'")
            }
            interval = i
        } else {
            interval = .month
        }
        self.now = now
        let to = try query.dateOrTimestamp("to") ?? interval.next(after: interval.periodStart(containing: now))
        var from = interval.periodStart(containing: Timestamp(microseconds: to.microseconds - 1))
        for _ in 0..<(interval == .day ? 29 : 11) { from = Self.previous(from, interval) }
        from = try query.dateOrTimestamp("from") ?? from
        guard from < to else { throw APIError.invalidRequest("query parameter 'from' (\(from.rfc3339)) must be before 'to' (\(to.rfc3339))") }
        let count = ReportCalendar.periodCount(from: from, to: to, interval: interval)
        guard count <= ReportRoutes.maxPeriods else {
            throw APIError.invalidRequest("from/to span \(count) \(interval.rawValue) periods; at most \(ReportRoutes.maxPeriods) per report")
        }
        self.from = from
        self.to = to
        self.interval = interval
        dimensions = try ReportDimensionsQuery.parse(request)
        boundaries = ReportCalendar.boundaries(from: from, to: to, interval: interval)
        wantsCSV = try Self.wantsCSV(request)
        minimum = try LedgerPosition.minimum(request)
    }

    static func previous(_ start: Timestamp, _ interval: ReportInterval) -> Timestamp {
        switch interval {
        case .day: Timestamp(microseconds: start.microseconds - 86_400_000_000)
        case .week: Timestamp(microseconds: start.microseconds - 7 * 86_400_000_000)
        case .month: ReportCalendar.addingMonths(-1, to: start)
        }
    }

    /// `format=csv` or `Accept: text/csv`; `format` is `json` or `csv`, anything else is a 400.
    static func wantsCSV(_ request: Request) throws -> Bool {
        switch request.uri.queryParameters["format"].map(String.init) {
        case "csv": return true
        case "json": return false
        case nil: return request.headers[.accept]?.contains("text/csv") ?? false
        case let other?: throw APIError.invalidRequest("query parameter 'format' must be json or csv, not '\(other)'")
        }
    }

    func envelope(_ members: [String: JSONValue]) -> JSONValue {
        var m = dimensions.envelope
        for (k, v) in members { m[k] = v }
        m["from"] = .string(from.rfc3339)
        m["to"] = .string(to.rfc3339)
        m["interval"] = .string(interval.rawValue)
        return .object(m)
    }

    func respond(_ table: ReportTable) -> Response {
        if wantsCSV { return table.csv() }
        return .json(envelope(["periods": .array(table.objects)]))
    }
}

extension JSONValue {
    static func int(_ n: Int) -> JSONValue { .number(JSONNumber(Int64(n))) }
    static func int(_ n: Int64) -> JSONValue { .number(JSONNumber(n)) }
    static func int(_ n: Int128) -> JSONValue { .number(JSONNumber(wide: n)) }
    /// A ratio with six decimals, or null when undefined (nobody to divide by).
    static func ratio(_ r: Double?) -> JSONValue {
        guard let r, r.isFinite else { return .null }
        let micro = Int64((r * 1_000_000).rounded())
        let text = micro == 0 ? "0" : String(format: "%d.%06d", micro / 1_000_000, micro % 1_000_000)
        return JSONNumber(jsonText: Substring(text)).map(JSONValue.number) ?? .null
    }
}

extension FXUse {
    /// The rate version as the answer names it (null when no rate was ever stored).
    var json: JSONValue { version.map { JSONValue.int($0) } ?? .null }
}

extension Response {
    /// `Ledger-FX-Version`: the rate version a converted report used, on JSON and CSV answers alike.
    func fxVersion(_ fx: FXUse?) -> Response {
        guard let fx else { return self }
        var r = self
        r.headers[HTTPField.Name("Ledger-FX-Version")!] = fx.version.map(String.init) ?? "none"
        return r
    }
}
