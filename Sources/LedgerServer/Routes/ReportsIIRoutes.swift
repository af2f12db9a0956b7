import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore
import LedgerStore

/// Reports II (docs/reports.md): MRR movement, realized LTV, refunds and conversion to paying. Same query,
/// roles, CSV and reporting-currency conventions as the other reports.
extension ReportRoutes {
    /// `months` of the LTV report: at most ten years of months per cohort.
    static let maxLTVMonths: Int64 = 120
    /// `days` of the conversion report: each 1…3650 (ten years), at most ten distinct windows.
    static let maxConversionDays: Int64 = 3650
    static let maxConversionWindows = 10

    func registerReportsII(on group: RouterGroup<LedgerRequestContext>) {
        group.get("reports/mrr-movement", use: cancelledOnDisconnect(mrrMovement))
        group.get("reports/ltv", use: cancelledOnDisconnect(ltv))
        group.get("reports/refunds", use: cancelledOnDisconnect(refunds))
        group.get("reports/conversion", use: cancelledOnDisconnect(conversion))
    }

    @Sendable func mrrMovement(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request, now: clock.now())
        let currency = try QueryParameters(request: request).reportingCurrency()
        let ((result, fx), position) = try await router.read(atLeast: q.minimum) { database -> ([Grouped<MRRMovementPeriod>], FXUse?) in
            let fx = try await currency.asyncMap { try await Self.fxUse($0, request: request, database: database) }
            return (try await ReportStore(database: database).mrrMovement(boundaries: q.boundaries, dimensions: q.dimensions, converting: fx), fx)
        }
        let rows = result.map { g -> [JSONValue] in
            let (p, f) = (g.row, g.row.figures)
            var row: [JSONValue] = q.dimensions.groupCell(g.group) + [.string(p.start.rfc3339), .string(p.end.rfc3339), .string(p.currency)]
            row += Self.movementOrder.map { .int(f[$0]) }
            row.append(.int(f.mrrEnd))
            row += Self.movementOrder.map { .int(f.count($0)) }
            row.append(.int(f.subscribersEnd))
            return row
        }
        let table = ReportTable(name: "mrr-movement", columns: q.dimensions.groupColumn + ReportTable.mrrMovementColumns, rows: rows)
        return q.respond(table, fx: fx).ledgerPosition(position)
    }

    /// The movement columns in the contract's order (`mrr_start` first).
    static let movementOrder: [MRRMovementFigures.Part] = [
        .start, .new, .reactivation, .expansion, .contraction, .churned, .transferredIn, .transferredOut,
    ]

    @Sendable func ltv(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request, interval: .month, now: clock.now())
        let query = QueryParameters(request: request)
        let months = Int(try query.int64("months", default: 12, range: 1...Self.maxLTVMonths))
        let currency = try query.reportingCurrency()
        let ((cohorts, fx), position) = try await router.read(atLeast: q.minimum) { database -> ([Grouped<LTVCohort>], FXUse?) in
            let fx = try await currency.asyncMap { try await Self.fxUse($0, request: request, database: database) }
            let store = ReportStore(database: database)
            return (try await store.ltv(from: q.from, to: q.to, months: months, until: q.now, dimensions: q.dimensions, converting: fx), fx)
        }
        func month(_ c: LTVCohort, _ k: Int) -> [JSONValue] {
            [
                .int(k), .int(c.gross[k]), .int(c.proceeds[k]), c.perCustomer(c.gross[k]).map(JSONValue.int) ?? .null,
                c.perCustomer(c.proceeds[k]).map(JSONValue.int) ?? .null,
            ]
        }
        if q.wantsCSV {
            let rows = cohorts.flatMap { g in
                g.row.gross.indices.map { k in
                    q.dimensions.groupCell(g.group) + [.string(g.row.start.rfc3339), .string(g.row.currency), .int(g.row.size)] + month(g.row, k)
                }
            }
            let table = ReportTable(name: "ltv", columns: q.dimensions.groupColumn + ReportTable.ltvCSVColumns, rows: rows)
            return table.csv().fxVersion(fx).ledgerPosition(position)
        }
        let periods: [JSONValue] = cohorts.map { g in
            let c = g.row
            var members: [String: JSONValue] = [
                "period_start": .string(c.start.rfc3339), "currency": .string(c.currency), "cohort_size": .int(c.size),
                "months": .array(
                    c.gross.indices.map { k in
                        .object(Dictionary(uniqueKeysWithValues: zip(ReportTable.ltvCSVColumns.dropFirst(3), month(c, k))))
                    }),
            ]
            if let column = q.dimensions.groupColumn.first { members[column] = q.dimensions.groupCell(g.group)[0] }
            return .object(members)
        }
        var members: [String: JSONValue] = ["periods": .array(periods), "months": .int(months)]
        if let fx {
            members["currency"] = .string(fx.currency)
            members["fx_version"] = fx.json
        }
        return Response.json(q.envelope(members)).fxVersion(fx).ledgerPosition(position)
    }

    @Sendable func refunds(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request, now: clock.now())
        let currency = try QueryParameters(request: request).reportingCurrency()
        let ((result, fx), position) = try await router.read(atLeast: q.minimum) { database -> ([Grouped<RefundPeriod>], FXUse?) in
            let fx = try await currency.asyncMap { try await Self.fxUse($0, request: request, database: database) }
            return (try await ReportStore(database: database).refunds(boundaries: q.boundaries, dimensions: q.dimensions, converting: fx), fx)
        }
        let rows = result.map { g -> [JSONValue] in
            let p = g.row
            return q.dimensions.groupCell(g.group) + [
                .string(p.start.rfc3339), .string(p.end.rfc3339), .string(p.currency), .int(p.refunds), .int(p.amount),
                .int(p.refundedTransactions), .int(p.paidTransactions), .ratio(p.refundRate),
            ]
        }
        return q.respond(ReportTable(name: "refunds", columns: q.dimensions.groupColumn + ReportTable.refundColumns, rows: rows), fx: fx)
            .ledgerPosition(position)
    }

    @Sendable func conversion(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let q = try ReportQuery(request, now: clock.now())
        let days = try Self.conversionDays(request)
        let (result, position) = try await router.read(atLeast: q.minimum) {
            try await ReportStore(database: $0).conversion(boundaries: q.boundaries, days: days, dimensions: q.dimensions)
        }
        var columns = q.dimensions.groupColumn + ["period_start", "period_end", "subscribers"]
        for d in days { columns += ["converted_\(d)d", "conversion_rate_\(d)d"] }
        let rows = result.map { g -> [JSONValue] in
            let p = g.row
            var row: [JSONValue] = q.dimensions.groupCell(g.group) + [.string(p.start.rfc3339), .string(p.end.rfc3339), .int(p.subscribers)]
            for k in days.indices { row += [.int(p.converted[k]), .ratio(p.rate(k))] }
            return row
        }
        let table = ReportTable(name: "conversion", columns: columns, rows: rows)
        if q.wantsCSV { return table.csv().ledgerPosition(position) }
        return Response.json(q.envelope(["periods": .array(table.objects), "days": .array(days.map { .int($0) })])).ledgerPosition(position)
    }

    /// `days`: comma-separated whole days, each 1…`maxConversionDays`, at most `maxConversionWindows`
    /// distinct; answered in ascending order. Default 7 and 30.
    static func conversionDays(_ request: Request) throws -> [Int] {
        guard let text = request.uri.queryParameters["days"].map(String.init) else { return [7, 30] }
        let parts = text.split(separator: ",", omittingEmptySubsequences: false)
        var days = Set<Int>()
        for part in parts {
            guard let d = Int64(part), (1...maxConversionDays).contains(d) else {
                throw APIError.invalidRequest(
                    "query parameter 'days' must be whole days from 1 to \(maxConversionDays), comma-separated, not '\(text.prefix(60))'")
            }
            days.insert(Int(d))
        }
        guard days.count <= maxConversionWindows else {
            throw APIError.invalidRequest("query parameter 'days' names \(days.count) windows; at most \(maxConversionWindows)")
        }
        return days.sorted()
    }
}

extension ReportTable {
    static let mrrMovementColumns = [
        "period_start", "period_end", "currency", "mrr_start", "new", "reactivation", "expansion", "contraction", "churned",
        "transferred_in", "transferred_out", "mrr_end", "subscribers_start", "new_subscribers", "reactivation_subscribers",
        "expansion_subscribers", "contraction_subscribers", "churned_subscribers", "transferred_in_subscribers",
        "transferred_out_subscribers", "subscribers_end",
    ]
    static let ltvCSVColumns = [
        "period_start", "currency", "cohort_size", "month", "realized_gross", "realized_proceeds", "ltv_gross", "ltv_proceeds",
    ]
    static let refundColumns = [
        "period_start", "period_end", "currency", "refunds", "amount", "refunded_transactions", "paid_transactions", "refund_rate",
    ]
}

extension ReportQuery {
    /// The table as JSON or CSV; converted, the envelope names the currency and rate version (and the header
    /// `Ledger-FX-Version` is set on both).
    func respond(_ table: ReportTable, fx: FXUse?) -> Response {
        guard let fx else { return respond(table) }
        if wantsCSV { return table.csv().fxVersion(fx) }
        return Response.json(envelope(["periods": .array(table.objects), "currency": .string(fx.currency), "fx_version": fx.json])).fxVersion(fx)
    }
}

extension Optional {
    func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
