import Foundation
import Hummingbird
import LedgerCore
import LedgerStore

/// Analysts' reports (ledger-semantics sections 5–6): JSON, or CSV with `Accept: text/csv` (or `format=csv`).
struct ReportRoutes {
    /// Reports read the fact tables on a replica that has the position asked for, else on the primary.
    let router: ReadRouter
    /// Reports never span more periods than this (a day grid over ~2.7 years).
    static let maxPeriods = 1000

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.get("reports/churn", use: churn)
        group.get("reports/mrr", use: mrr)
        group.get("reports/retention", use: retention)
        group.get("reports/trials", use: trials)
        group.get("reports/revenue", use: revenue)
    }

    @Sendable func churn(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request)
        let (result, position) = try await router.read(atLeast: q.minimum) {
            try await ReportStore(database: $0).churn(boundaries: q.boundaries, entitlement: q.entitlement)
        }
        let rows = result.map { p -> ReportRow in
            [
                ("period_start", .string(p.start.rfc3339)), ("period_end", .string(p.end.rfc3339)),
                ("active_start", .int(p.activeStart)), ("new", .int(p.new)), ("reactivated", .int(p.reactivated)),
                ("churned", .int(p.churnedTotal)), ("churned_voluntary", .int(p.churned[.voluntary] ?? 0)),
                ("churned_involuntary", .int(p.churned[.involuntary] ?? 0)), ("churned_refund", .int(p.churned[.refund] ?? 0)),
                ("churned_other", .int(p.churned[.other] ?? 0)), ("active_end", .int(p.activeEnd)),
                ("churn_rate", .ratio(p.churnRate)),
            ]
        }
        return q.respond(name: "churn", rows: rows).ledgerPosition(position)
    }

    @Sendable func revenue(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request)
        let (result, position) = try await router.read(atLeast: q.minimum) {
            try await ReportStore(database: $0).revenue(boundaries: q.boundaries, entitlement: q.entitlement)
        }
        let rows = result.map { p -> ReportRow in
            let f = p.figures
            return [
                ("period_start", .string(p.start.rfc3339)), ("period_end", .string(p.end.rfc3339)),
                ("currency", .string(p.currency)), ("billings", .int(f.billings)), ("commission", .int(f.commission)),
                ("proceeds", .int(f.proceeds)), ("refunds", .int(f.refunds)),
                ("refunded_unrecognized", .int(f.refundedUnrecognized)), ("refunds_recognized", .int(f.refundsRecognized)),
                ("recognized", .int(f.recognized)), ("deferred_start", .int(p.deferredStart)), ("deferred_end", .int(p.deferredEnd)),
            ]
        }
        return q.respond(name: "revenue", rows: rows).ledgerPosition(position)
    }

    @Sendable func trials(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request)
        let (result, position) = try await router.read(atLeast: q.minimum) {
            try await ReportStore(database: $0).trials(boundaries: q.boundaries, entitlement: q.entitlement)
        }
        let rows = result.map { p -> ReportRow in
            [
                ("period_start", .string(p.start.rfc3339)), ("period_end", .string(p.end.rfc3339)),
                ("started", .int(p.started)), ("converted", .int(p.converted)), ("conversion_rate", .ratio(p.conversionRate)),
            ]
        }
        return q.respond(name: "trials", rows: rows).ledgerPosition(position)
    }

    @Sendable func retention(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request, interval: .month)
        let (cohorts, position) = try await router.read(atLeast: q.minimum) {
            try await ReportStore(database: $0).retention(from: q.from, to: q.to, until: q.now, entitlement: q.entitlement)
        }
        if q.wantsCSV {
            var rows: [ReportRow] = []
            for c in cohorts {
                for k in c.retained.indices {
                    rows.append([
                        ("period_start", .string(c.start.rfc3339)), ("cohort_size", .int(c.size)), ("month", .int(k)),
                        ("subscribers", .int(c.retained[k])), ("ratio", .ratio(c.ratio(k))),
                    ])
                }
            }
            return q.respond(name: "retention", rows: rows).ledgerPosition(position)
        }
        let periods: [JSONValue] = cohorts.map { c in
            .object([
                "period_start": .string(c.start.rfc3339), "cohort_size": .int(c.size),
                "retained": .array(c.retained.indices.map { k in
                    .object(["month": .int(k), "subscribers": .int(c.retained[k]), "ratio": .ratio(c.ratio(k))])
                }),
            ])
        }
        return Response.json(q.envelope(["periods": .array(periods)])).ledgerPosition(position)
    }

    @Sendable func mrr(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let query = QueryParameters(request: request)
        let at = try query.timestamp("at") ?? Timestamp.now()
        let entitlement = try query.entitlement()
        let minimum = try LedgerPosition.minimum(request)
        let wantsCSV = try ReportQuery.wantsCSV(request)
        let (lines, position) = try await router.read(atLeast: minimum) {
            try await ReportStore(database: $0).mrr(at: at, entitlement: entitlement)
        }
        let rows: [ReportRow] = lines.map {
            [("currency", .string($0.currency)), ("mrr_minor", .int($0.mrrMinor)), ("active_paid", .int($0.activePaid))]
        }
        if wantsCSV { return ReportQuery.csv(name: "mrr", rows: rows).ledgerPosition(position) }
        return Response.json([
            "at": .string(at.rfc3339), "entitlement": entitlement.map(JSONValue.string) ?? .null,
            "currencies": .array(rows.map(ReportQuery.object)),
        ]).ledgerPosition(position)
    }
}

/// One report row: ordered columns, so JSON objects and CSV columns come out in the same order.
typealias ReportRow = [(String, JSONValue)]

/// The query every period report shares: `from`, `to`, `interval`, `entitlement`, and the answer's format.
struct ReportQuery {
    let from: Timestamp
    let to: Timestamp
    let now: Timestamp
    let interval: ReportInterval
    let entitlement: String?
    let boundaries: [Timestamp]
    let wantsCSV: Bool
    /// `min_position` / `Ledger-Min-Position`.
    let minimum: Int64

    /// Defaults: `to` is the end of the current period, `from` twelve periods (thirty days) earlier.
    init(_ request: Request, interval fixed: ReportInterval? = nil) throws {
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
        now = Timestamp.now()
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
        entitlement = try query.entitlement()
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
        var m = members
        m["from"] = .string(from.rfc3339)
        m["to"] = .string(to.rfc3339)
        m["interval"] = .string(interval.rawValue)
        m["entitlement"] = entitlement.map(JSONValue.string) ?? .null
        return .object(m)
    }

    func respond(name: String, rows: [ReportRow]) -> Response {
        if wantsCSV { return Self.csv(name: name, rows: rows) }
        return .json(envelope(["periods": .array(rows.map(Self.object))]))
    }

    static func object(_ row: ReportRow) -> JSONValue {
        .object(Dictionary(row.map { ($0.0, $0.1) }, uniquingKeysWith: { a, _ in a }))
    }

    /// RFC 4180 CSV with a header row; JSON null is an empty field.
    static func csv(name: String, rows: [ReportRow], header: [String]? = nil) -> Response {
        var buffer = ByteBuffer()
        if let first = rows.first { buffer.writeImmutableBuffer(CSV.line(first.map(\.0))) }
        for row in rows {
            buffer.writeImmutableBuffer(CSV.line(row.map { field in
                switch field.1 {
                case .null: ""
                case .string(let s): s
                case .number(let n): n.canonical
                case .bool(let b): b ? "true" : "false"
                default: field.1.canonicalString()
                }
            }))
        }
        return Response(status: .ok, headers: CSV.headers(filename: "\(name).csv"), body: .init(byteBuffer: buffer))
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
