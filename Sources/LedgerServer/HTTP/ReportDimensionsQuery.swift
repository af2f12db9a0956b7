import Hummingbird
import LedgerCore

/// The report dimension parameters (http-api.md "Reports II"), read the same way for every report: `store=`,
/// `country=`, `product_id=`, `entitlement=` (each repeatable: any of the values) and `group_by=`. A malformed
/// value is a 400 naming its parameter.
enum ReportDimensionsQuery {
    /// At most this many values per filter (docs/limits.md).
    static let maxValues = 100

    static func parse(_ request: Request) throws -> ReportDimensions {
        let q = request.uri.queryParameters
        func values(_ name: String, _ check: (String) -> String?) throws -> Set<String> {
            let all = q.getAll(name).map(\.percentDecoded)
            guard all.count <= maxValues else {
                throw APIError.invalidRequest("query parameter '\(name)' may be given at most \(maxValues) times, not \(all.count)")
            }
            for v in all {
                if let problem = check(v) { throw APIError.invalidRequest("query parameter '\(name)' \(problem), not '\(v.prefix(64))'") }
            }
            return Set(all)
        }
        var d = ReportDimensions()
        d.stores = try values("store") { Identifiers.isValidSource($0) ? nil : "must be a store (source) such as apple, google or stripe" }
        d.countries = try values("country") {
            Countries.isValidAlpha2($0) ? nil : "must be an ISO 3166-1 alpha-2 country code of two upper-case letters such as DE"
        }
        d.productIDs = try values("product_id") { Identifiers.problem($0) }
        d.entitlements = try values("entitlement") { Identifiers.problem($0) }
        let groups = q.getAll("group_by")
        guard groups.count <= 1 else { throw APIError.invalidRequest("query parameter 'group_by' may be given once") }
        if let text = groups.first {
            guard let g = ReportDimension(rawValue: text) else {
                throw APIError.invalidRequest(
                    "query parameter 'group_by' must be one of store, country, product_id or entitlement, not '\(text.prefix(64))'")
            }
            d.groupBy = g
        }
        return d
    }
}

extension ReportDimensions {
    /// The column a grouped row carries its group's value in, first: the dimension's name (none without grouping).
    var groupColumn: [String] { groupBy.map { [$0.rawValue] } ?? [] }

    /// A row's group value for `groupColumn` (null: a country not known).
    func groupCell(_ group: String?) -> [JSONValue] { groupBy == nil ? [] : [group.map(JSONValue.string) ?? .null] }

    /// What every report answers about its dimensions: `entitlement` (the one asked for, else null, as before),
    /// `group_by` and the `filters` as given (sorted).
    var envelope: [String: JSONValue] {
        func list(_ s: Set<String>) -> JSONValue { .array(s.sorted().map(JSONValue.string)) }
        return [
            "entitlement": entitlements.count == 1 ? .string(entitlements.first!) : .null,
            "group_by": groupBy.map { .string($0.rawValue) } ?? .null,
            "filters": .object([
                "store": list(stores), "country": list(countries), "product_id": list(productIDs), "entitlement": list(entitlements),
            ]),
        ]
    }
}
