import Hummingbird
import LedgerCore
import LedgerStore

/// Exchange rates (docs/reports.md, "Reporting currency"): `PUT /v1/fx/rates` (admin) with the European Central
/// Bank's history CSV or JSON, `GET /v1/fx/rates?currency=&from=&to=&version=` (analysts and admins).
struct FXRoutes {
    let database: Database
    let router: ReadRouter
    let maxBodyBytes: Int

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.put("fx/rates", use: put)
        group.get("fx/rates", use: cancelledOnDisconnect(list))
    }

    @Sendable func put(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let body = try await RequestBody.collect(request, limit: maxBodyBytes)
        let bytes = body.readableBytesView
        let contentType = request.headers[.contentType]?.lowercased() ?? ""
        let isJSON =
            contentType.contains("json") || (!contentType.contains("csv") && bytes.first(where: { $0 != 0x20 && $0 != 0x0A }) == UInt8(ascii: "{"))
        let rows: [FXRateRow]
        do {
            if isJSON {
                let value: JSONValue
                do {
                    value = try JSONParser.parse(bytes)
                } catch {
                    throw APIError.invalidRequest("the body is not valid JSON: \(error)")
                }
                rows = try FXUpload.json(value)
            } else {
                rows = try FXUpload.ecbCSV(bytes)
            }
        } catch let error as FXInputError {
            throw APIError.invalidRequest("rates: \(error.message); nothing was stored")
        }
        let label = context.apiKey.map { "PUT /v1/fx/rates by key \($0.keyID)" } ?? "PUT /v1/fx/rates"
        let result = try await FXStore(database: database).upload(rows, origin: "api", label: label)
        return .json(result.json, status: result.created ? .created : .ok)
    }

    @Sendable func list(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.reports)
        let query = QueryParameters(request: request)
        let currency = try query.currency("currency")
        let from = try query.fxDay("from") ?? FXLimits.firstDay
        let to = try query.fxDay("to") ?? FXLimits.lastDay
        guard from <= to else { throw APIError.invalidRequest("query parameter 'from' (\(from)) must not be after 'to' (\(to))") }
        let minimum = try LedgerPosition.minimum(request)
        let (answer, position) = try await router.read(atLeast: minimum) { database -> JSONValue in
            let store = FXStore(database: database)
            let latest = try await store.latestVersion()
            let version = try query.fxVersion(latest: latest) ?? latest
            guard let version else {
                return .object(["base": "EUR", "version": .null, "rates": .array([])])
            }
            let rates = try await store.rates(
                version: version, currencies: currency.map { [$0] }, from: from, to: to, limit: FXLimits.maxRowsPerUpload + 1)
            guard rates.count <= FXLimits.maxRowsPerUpload else {
                throw APIError.invalidRequest(
                    "more than \(FXLimits.maxRowsPerUpload) rates match; at most \(FXLimits.maxRowsPerUpload) per answer: narrow 'currency', 'from' or 'to'"
                )
            }
            return .object([
                "base": "EUR", "version": .int(version),
                "rates": .array(
                    rates.map {
                        .object([
                            "date": .string($0.day.description), "currency": .string($0.currency), "rate": .string($0.rate.description),
                            "version": .int($0.version),
                        ])
                    }),
            ])
        }
        return Response.json(answer).ledgerPosition(position)
    }
}

extension FXUploadResult {
    var json: JSONValue {
        .object([
            "version": version.map { JSONValue.int($0) } ?? .null, "created": .bool(created), "rates": .int(rates), "added": .int(added),
            "corrected": .int(corrected), "unchanged": .int(unchanged),
        ])
    }
}

extension QueryParameters {
    /// A currency code the ledger knows (ISO 4217), or a 400 naming the parameter.
    func currency(_ name: String) throws -> String? {
        guard let text = request.uri.queryParameters[name[...]] else { return nil }
        let value = String(text)
        guard Identifiers.isValidCurrency(value), CurrencyExponent.isKnown(value) else {
            throw APIError.invalidRequest("query parameter '\(name)' must be an ISO 4217 currency code such as USD, not '\(value.prefix(40))'")
        }
        return value
    }

    /// A report's `currency`; `fx_version` without it is a 400 (it would be ignored).
    func reportingCurrency() throws -> String? {
        let currency = try currency("currency")
        if currency == nil, request.uri.queryParameters["fx_version"] != nil {
            throw APIError.invalidRequest("query parameter 'fx_version' applies to a converted report: give currency= too")
        }
        return currency
    }

    /// A date `YYYY-MM-DD` within the rates' range, or a 400 naming the parameter.
    func fxDay(_ name: String) throws -> FXDay? {
        guard let text = request.uri.queryParameters[name[...]] else { return nil }
        guard let day = FXDay(iso: text), day >= FXLimits.firstDay, day <= FXLimits.lastDay else {
            throw APIError.invalidRequest(
                "query parameter '\(name)' must be a date YYYY-MM-DD from \(FXLimits.firstDay) to \(FXLimits.lastDay), not '\(text.prefix(40))'")
        }
        return day
    }

    /// `fx_version`: a stored rate version (1…latest), or a 400 naming the parameter.
    func fxVersion(latest: Int64?) throws -> Int64? {
        guard let text = request.uri.queryParameters["fx_version"] else { return nil }
        guard let n = Int64(String(text)), n >= 1, n <= (latest ?? 0) else {
            throw APIError.invalidRequest(
                "query parameter 'fx_version' must be a stored rate version (1…\(latest ?? 0)), not '\(text.prefix(40))'")
        }
        return n
    }
}
