import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerTestSupport
import NIOCore
import Testing

@Suite("Reports II over HTTP: MRR movement, LTV, refunds and conversion")
struct ReportsIIAPITests {
    /// The worked example of docs/reports.md, and a sandbox subscriber who never counts.
    static var events: JSONValue {
        var list = ReportsIIExample.events.indices.map(ReportsIIExample.json)
        list.append(
            .object(
                eventJSON(
                    subscriber: "rx-sandbox", key: "rx-s1",
                    overrides: [
                        "environment": "sandbox", "occurred_at": "2025-03-03T00:00:00Z",
                        "data": [
                            "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": "s1", "kind": "auto_renewable",
                            "period_start": "2025-03-03T00:00:00Z", "period_end": "2025-04-03T00:00:00Z", "period": "P1M",
                            "price_minor": 999, "currency": "USD", "commission_rate": "0.30",
                        ],
                    ])))
        return .object(["events": .array(list)])
    }

    static func rows(_ response: TestResponse) throws -> [[String: JSONValue]] {
        try #require(try response.json.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue))
    }

    /// A ratio as the server writes it (six decimals).
    static func ratio(_ text: String) -> JSONValue { .number(JSONNumber(jsonText: Substring(text))!) }

    static func column(_ rows: [[String: JSONValue]], _ name: String) -> [JSONValue] { rows.map { $0[name] ?? .null } }

    @Test("the worked example over HTTP, JSON and CSV, in USD and in euros")
    func workedExample() async throws {
        try await APIHarness.run(maxBodyBytes: 8 * 1024 * 1024) { http, api in
            let created = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(Self.events))
            #expect(created.status == .created)
            let get = { (uri: String) in try await http.execute(uri: uri, method: .get, headers: api.headers(.analyst)) }

            // MRR movement, and its ends equal to the MRR report one microsecond before each boundary.
            let movementURI = "/v1/reports/mrr-movement?from=2025-03-01&to=2025-05-01&interval=month"
            let movement = try Self.rows(try await get(movementURI))
            #expect(Self.column(movement, "currency") == ["USD", "USD"])
            #expect(Self.column(movement, "mrr_start") == [1999, 2498])
            #expect(Self.column(movement, "new") == [499, 0])
            #expect(Self.column(movement, "reactivation") == [0, 999])
            #expect(Self.column(movement, "expansion") == [0, 1000])
            #expect(Self.column(movement, "contraction") == [0, 0])
            #expect(Self.column(movement, "churned") == [0, 1000])
            #expect(Self.column(movement, "transferred_in") == [0, 0] && Self.column(movement, "transferred_out") == [0, 0])
            #expect(Self.column(movement, "mrr_end") == [2498, 3497])
            #expect(Self.column(movement, "subscribers_start") == [2, 3] && Self.column(movement, "subscribers_end") == [3, 3])
            #expect(Self.column(movement, "new_subscribers") == [1, 0] && Self.column(movement, "churned_subscribers") == [0, 1])
            for (instant, expected) in [("2025-03-31T23:59:59.999999Z", 2498), ("2025-04-30T23:59:59.999999Z", 3497)] {
                let mrr = try await get("/v1/reports/mrr?at=\(instant)")
                let lines = try #require(try mrr.json.objectValue?["currencies"]?.arrayValue?.compactMap(\.objectValue))
                #expect(lines.map { $0["mrr_minor"] } == [JSONValue.number(JSONNumber(Int64(expected)))], "\(instant)")
            }
            var csvHeaders = api.headers(.analyst)
            csvHeaders[.accept] = "text/csv"
            let csv = String(buffer: try await http.execute(uri: movementURI, method: .get, headers: csvHeaders).body)
            let csvLines = csv.split(whereSeparator: \.isNewline)
            #expect(csvLines.first?.hasPrefix("period_start,period_end,currency,mrr_start,new,reactivation,expansion,contraction,churned,") == true)
            #expect(csvLines.count == 3 && csvLines[2].contains(",USD,2498,0,999,1000,0,1000,0,0,3497,"))

            // Realized LTV.
            let ltv = try Self.rows(try await get("/v1/reports/ltv?from=2025-01-01&to=2025-04-01&months=3"))
            #expect(Self.column(ltv, "cohort_size") == [1, 2, 1])
            let february = try #require(try ltv[1]["months"]?.arrayValue?.compactMap(\.objectValue))
            #expect(Self.column(february, "realized_gross") == [12998, 13997, 3997])
            #expect(Self.column(february, "realized_proceeds") == [9098, 9797, -803])
            #expect(Self.column(february, "ltv_gross") == [6499, 6999, 1999])
            #expect(Self.column(february, "ltv_proceeds") == [4549, 4899, -401])
            let ltvCSV = String(
                buffer: try await http.execute(
                    uri: "/v1/reports/ltv?from=2025-03-01&to=2025-04-01&months=3&format=csv", method: .get, headers: api.headers(.analyst)
                ).body)
            #expect(
                ltvCSV.split(whereSeparator: \.isNewline) == [
                    "period_start,currency,cohort_size,month,realized_gross,realized_proceeds,ltv_gross,ltv_proceeds",
                    "2025-03-01T00:00:00Z,USD,1,0,499,424,499,424", "2025-03-01T00:00:00Z,USD,1,1,798,648,798,648",
                    "2025-03-01T00:00:00Z,USD,1,2,798,648,798,648",
                ])

            // Refunds (the reversed refund of March is gone).
            let refunds = try Self.rows(try await get("/v1/reports/refunds?from=2025-03-01&to=2025-06-01&interval=month"))
            #expect(Self.column(refunds, "refunds") == [0, 2, 0])
            #expect(Self.column(refunds, "amount") == [0, 12199, 0])
            #expect(Self.column(refunds, "refunded_transactions") == [0, 2, 0])
            #expect(Self.column(refunds, "paid_transactions") == [3, 3, 0])
            #expect(Self.column(refunds, "refund_rate") == [Self.ratio("0"), Self.ratio("0.666667"), .null])

            // Conversion to paying (the sandbox subscriber is nobody).
            let conversion = try Self.rows(try await get("/v1/reports/conversion?from=2025-01-01&to=2025-05-01&interval=month"))
            #expect(Self.column(conversion, "subscribers") == [1, 2, 3, 0])
            #expect(Self.column(conversion, "converted_7d") == [1, 2, 1, 0])
            #expect(Self.column(conversion, "converted_30d") == [1, 2, 2, 0])
            #expect(Self.column(conversion, "conversion_rate_7d") == [Self.ratio("1.000000"), Self.ratio("1.000000"), Self.ratio("0.333333"), .null])
            let oneDay = try Self.rows(try await get("/v1/reports/conversion?from=2025-03-01&to=2025-04-01&days=30,1,30"))
            #expect(
                oneDay.first.map { Array($0.keys).sorted() } == [
                    "conversion_rate_1d", "conversion_rate_30d", "converted_1d", "converted_30d", "period_end", "period_start", "subscribers",
                ])

            // In euros, with ECB's rates: the identity holds and the ends are converted MRR's.
            var adminCSV = api.headers(.admin)
            adminCSV[.contentType] = "text/csv"
            #expect(
                try await http.execute(uri: "/v1/fx/rates", method: .put, headers: adminCSV, body: body(try FXAPITests.sample)).status == .created)
            let euros = try await get(movementURI + "&currency=EUR")
            #expect(euros.status == .ok && euros.headers[HTTPField.Name("Ledger-FX-Version")!] == "1")
            #expect(try euros.json.objectValue?["fx_version"] == 1 && euros.json.objectValue?["currency"] == "EUR")
            for row in try Self.rows(euros) {
                let v = { (name: String) in row[name]?.numberValue?.int64Value ?? -1 }
                #expect(
                    v("mrr_end") == v("mrr_start") + v("new") + v("reactivation") + v("expansion") + v("transferred_in") - v("contraction")
                        - v("churned") - v("transferred_out"))
            }
            let eurMRR = try await get("/v1/reports/mrr?at=2025-04-30T23:59:59.999999Z&currency=EUR")
            #expect(try eurMRR.json.objectValue?["currencies"]?.arrayValue?.first?.objectValue?["mrr_minor"] == Self.rows(euros).last?["mrr_end"])
            let euroRefunds = try Self.rows(try await get("/v1/reports/refunds?from=2025-03-01&to=2025-06-01&currency=EUR"))
            let euroRevenue = try Self.rows(try await get("/v1/reports/revenue?from=2025-03-01&to=2025-06-01&currency=EUR"))
            #expect(Self.column(euroRefunds, "amount") == Self.column(euroRevenue, "refunds"))
            #expect(try await get("/v1/reports/ltv?from=2025-02-01&to=2025-04-01&months=3&currency=EUR").status == .ok)
            // D's purchase of 1 January 2025 has no rate in the sample (it starts on 2 January).
            let missing = try await get("/v1/reports/ltv?from=2025-01-01&to=2025-04-01&months=3&currency=EUR")
            #expect(missing.status == .unprocessableContent && missing.errorCode == "missing_fx_rate")
            #expect(try missing.json.objectValue?["error"]?.objectValue?["date"] == "2025-01-01")

            // Roles, and every bad parameter named in a 400.
            for uri in [movementURI, "/v1/reports/ltv", "/v1/reports/refunds", "/v1/reports/conversion"] {
                #expect(try await http.execute(uri: uri, method: .get, headers: api.headers(.writer)).status == .forbidden)
            }
            for (uri, parameter) in [
                ("/v1/reports/mrr-movement?interval=year", "interval"),
                ("/v1/reports/mrr-movement?currency=usd", "currency"),
                ("/v1/reports/mrr-movement?currency=XYZ", "currency"),
                ("/v1/reports/refunds?currency=EURO", "currency"),
                ("/v1/reports/ltv?months=0", "months"),
                ("/v1/reports/ltv?months=121", "months"),
                ("/v1/reports/ltv?currency=EUR&fx_version=9", "fx_version"),
                ("/v1/reports/conversion?days=0", "days"),
                ("/v1/reports/conversion?days=7,x", "days"),
                ("/v1/reports/conversion?days=1,2,3,4,5,6,7,8,9,10,11", "days"),
                ("/v1/reports/refunds?from=2025-05-01&to=2025-03-01", "from"),
                ("/v1/reports/refunds?format=xml", "format"),
                ("/v1/reports/mrr-movement?group_by=planet", "group_by"),
                ("/v1/reports/ltv?country=de", "country"),
                ("/v1/reports/refunds?group_by=currency", "group_by"),
                ("/v1/reports/conversion?country=DEU", "country"),
            ] {
                let r = try await get(uri)
                #expect(r.status == .badRequest, "\(uri)")
                #expect(try r.json.objectValue?["error"]?.objectValue?["message"]?.stringValue?.contains("'\(parameter)'") == true, "\(uri)")
            }
            // Dimensions: grouped by store every row carries `store` ("web", all of this ledger) and equals the
            // ungrouped row; filtered to another store nothing is counted; the envelope names them.
            for uri in [
                movementURI, "/v1/reports/ltv?from=2025-01-01&to=2025-04-01&months=3",
                "/v1/reports/refunds?from=2025-03-01&to=2025-06-01&interval=month",
                "/v1/reports/conversion?from=2025-01-01&to=2025-05-01&interval=month",
            ] {
                let whole = try Self.rows(try await get(uri))
                let grouped = try await get(uri + "&group_by=store")
                let groupedRows = try Self.rows(grouped)
                #expect(groupedRows.map { $0["store"] } == whole.map { _ in JSONValue.string("web") }, "\(uri)")
                #expect(groupedRows.map { $0.filter { $0.key != "store" } } == whole, "\(uri)")
                #expect(try grouped.json.objectValue?["group_by"] == "store")
                let other = try await get(uri + "&store=apple&country=DE")
                #expect(try other.json.objectValue?["filters"]?.objectValue?["store"] == ["apple"])
                let otherRows = try Self.rows(other)
                #expect(otherRows.allSatisfy { ($0["subscribers"] ?? 0) == 0 && ($0["cohort_size"] ?? 0) == 0 }, "\(uri)")
                #expect(otherRows.allSatisfy { ($0["refunds"] ?? 0) == 0 && ($0["mrr_end"] ?? 0) == 0 }, "\(uri)")
            }
            let byProduct = String(
                buffer: try await http.execute(
                    uri: "/v1/reports/refunds?from=2025-04-01&to=2025-05-01&format=csv&group_by=product_id", method: .get,
                    headers: api.headers(.analyst)
                ).body)
            #expect(byProduct.hasPrefix("product_id,period_start,period_end,currency,refunds,"))
            for uri in [
                "/v1/reports/mrr-movement?from=1925-01-01&to=2025-01-01&interval=day", "/v1/reports/ltv?from=1925-01-01&to=2025-01-01",
                "/v1/reports/refunds?from=1925-01-01&to=2025-01-01&interval=week", "/v1/reports/conversion?from=1925-01-01&to=2025-01-01",
            ] {
                #expect(try await get(uri).status == .badRequest, "\(uri)")
            }
        }
    }
}
