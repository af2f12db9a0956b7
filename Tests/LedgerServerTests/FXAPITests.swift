import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import NIOCore
import PostgresNIO
import Testing

@Suite("Exchange rates and the reporting currency over HTTP")
struct FXAPITests {
    static var sample: String {
        get throws {
            try String(
                contentsOf: TestDatabase.schemaDirectory.deletingLastPathComponent().appendingPathComponent(
                    "tools/data/fx/ecb-eurofxref-hist-2025-01-to-05.csv"), encoding: .utf8)
        }
    }

    /// The worked example of docs/reports.md: 9.99 USD a month from 2025-03-03 10:00 UTC.
    static let purchase: JSONValue = .object(
        eventJSON(
            subscriber: "a", key: "a1",
            overrides: [
                "occurred_at": "2025-03-03T10:00:00Z",
                "data": [
                    "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": "t-a1", "kind": "auto_renewable",
                    "period_start": "2025-03-03T10:00:00Z", "period_end": "2025-04-03T10:00:00Z", "period": "P1M",
                    "price_minor": 999, "currency": "USD", "commission_rate": "0.30",
                ],
            ]))

    static func rows(_ response: TestResponse) throws -> [[String: JSONValue]] {
        try #require(try response.json.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue))
    }

    @Test("rates are uploaded as versions, read back, and convert revenue and MRR as the worked example says")
    func ratesAndConvertedReports() async throws {
        try await APIHarness.run(maxBodyBytes: 8 * 1024 * 1024) { http, api in
            #expect(
                try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(Self.purchase)).status == .created)
            let revenueURI = "/v1/reports/revenue?from=2025-03-01&to=2025-05-01&currency=EUR"

            // No rate yet: refused naming the currency and the date.
            let missing = try await http.execute(uri: revenueURI, method: .get, headers: api.headers(.analyst))
            #expect(missing.status == .unprocessableContent && missing.errorCode == "missing_fx_rate")
            let error = try missing.json.objectValue?["error"]?.objectValue
            #expect(error?["currency"] == "USD" && error?["date"] == "2025-03-03")

            // Uploads: admins only; the ECB file is version 1; the same file again changes nothing.
            var csvHeaders = api.headers(.admin)
            csvHeaders[.contentType] = "text/csv"
            var analystCSV = api.headers(.analyst)
            analystCSV[.contentType] = "text/csv"
            let sample = try Self.sample
            #expect(try await http.execute(uri: "/v1/fx/rates", method: .put, headers: analystCSV, body: body(sample)).status == .forbidden)
            let first = try await http.execute(uri: "/v1/fx/rates", method: .put, headers: csvHeaders, body: body(sample))
            #expect(first.status == .created)
            let firstJSON = try first.json.objectValue
            #expect(firstJSON?["version"] == 1 && firstJSON?["corrected"] == 0)
            let again = try await http.execute(uri: "/v1/fx/rates", method: .put, headers: csvHeaders, body: body(sample))
            #expect(again.status == .ok)
            #expect(try again.json.objectValue?["version"] == 1 && again.json.objectValue?["created"] == .bool(false))

            // Converted revenue at version 1 (the ECB rate of 2025-03-03, USD 1.0465).
            let converted = try await http.execute(uri: revenueURI, method: .get, headers: api.headers(.analyst))
            #expect(converted.status == .ok)
            #expect(converted.headers[HTTPField.Name("Ledger-FX-Version")!] == "1")
            #expect(try converted.json.objectValue?["fx_version"] == 1 && converted.json.objectValue?["currency"] == "EUR")
            let rows = try Self.rows(converted)
            #expect(rows.map { $0["currency"] } == ["EUR", "EUR"])
            #expect(rows.map { $0["billings"] } == [955, 0])
            #expect(rows.map { $0["commission"] } == [287, 0])
            #expect(rows.map { $0["proceeds"] } == [668, 0])
            #expect(rows.map { $0["recognized"] } == [880, 75])
            #expect(rows.map { $0["deferred_end"] } == [75, 0])
            let yen = try Self.rows(
                try await http.execute(
                    uri: "/v1/reports/revenue?from=2025-03-01&to=2025-05-01&currency=JPY", method: .get, headers: api.headers(.analyst)))
            #expect(yen.map { $0["billings"] } == [1511, 0] && yen.map { $0["recognized"] } == [1393, 118])

            // A correction is a new version; the old one stays readable and reports can pin it.
            let correction: JSONValue = [
                "base": "EUR",
                "rates": [["date": "2025-03-03", "currency": "USD", "rate": "1.05"], ["date": "2025-03-03", "currency": "JPY", "rate": "158.33"]],
            ]
            let second = try await http.execute(uri: "/v1/fx/rates", method: .put, headers: api.headers(.admin), body: body(correction))
            #expect(second.status == .created)
            #expect(
                try second.json.objectValue?["version"] == 2 && second.json.objectValue?["corrected"] == 1
                    && second.json.objectValue?["unchanged"] == 1)
            let listed = try await http.execute(
                uri: "/v1/fx/rates?currency=USD&from=2025-03-03&to=2025-03-03", method: .get, headers: api.headers(.analyst))
            let listedRates = try #require(try listed.json.objectValue?["rates"]?.arrayValue?.compactMap(\.objectValue))
            #expect(listedRates.map { $0["rate"] } == ["1.05"] && listedRates.map { $0["version"] } == [2])
            let old = try await http.execute(
                uri: "/v1/fx/rates?currency=USD&from=2025-03-03&to=2025-03-03&fx_version=1", method: .get, headers: api.headers(.analyst))
            #expect(try old.json.objectValue?["rates"]?.arrayValue?.first?.objectValue?["rate"] == "1.0465")
            let now = try Self.rows(try await http.execute(uri: revenueURI, method: .get, headers: api.headers(.analyst)))
            #expect(now.map { $0["billings"] } == [951, 0])  // round(999 / 1.05)
            let pinned = try Self.rows(try await http.execute(uri: revenueURI + "&fx_version=1", method: .get, headers: api.headers(.analyst)))
            #expect(pinned == rows)

            // CSV answers carry the version in a header.
            var csvAccept = api.headers(.analyst)
            csvAccept[.accept] = "text/csv"
            let csv = try await http.execute(uri: revenueURI + "&fx_version=1", method: .get, headers: csvAccept)
            #expect(csv.headers[HTTPField.Name("Ledger-FX-Version")!] == "1")
            #expect(String(buffer: csv.body).split(whereSeparator: \.isNewline).dropFirst().first?.contains(",EUR,955,0,287,668,") == true)

            // MRR in a reporting currency: one line.
            let mrr = try await http.execute(
                uri: "/v1/reports/mrr?at=2025-03-15T00:00:00Z&currency=EUR&fx_version=1", method: .get, headers: api.headers(.analyst))
            let lines = try #require(try mrr.json.objectValue?["currencies"]?.arrayValue?.compactMap(\.objectValue))
            #expect(lines == [["currency": "EUR", "mrr_minor": 955, "active_paid": 1]])
            #expect(try mrr.json.objectValue?["fx_version"] == 1)

            // Parameters: named in a 400.
            for (uri, parameter) in [
                ("/v1/reports/revenue?from=2025-03-01&to=2025-05-01&currency=usd", "currency"),
                ("/v1/reports/revenue?from=2025-03-01&to=2025-05-01&currency=XYZ", "currency"),
                ("/v1/reports/mrr?currency=EURO", "currency"),
                (revenueURI + "&fx_version=3", "fx_version"),
                ("/v1/fx/rates?from=1990-01-01", "from"),
                ("/v1/fx/rates?currency=dollars", "currency"),
            ] {
                let r = try await http.execute(uri: uri, method: .get, headers: api.headers(.analyst))
                #expect(r.status == .badRequest, "\(uri)")
                #expect(try r.json.objectValue?["error"]?.objectValue?["message"]?.stringValue?.contains("'\(parameter)'") == true, "\(uri)")
            }
            let bad = try await http.execute(
                uri: "/v1/fx/rates", method: .put, headers: csvHeaders, body: body("Date,USD,\n2025-03-03,1.0465,\n2025-03-04,abc,\n"))
            #expect(bad.status == .badRequest)
            #expect(try bad.json.objectValue?["error"]?.objectValue?["message"]?.stringValue?.contains("line 3") == true)
            #expect(try await http.execute(uri: "/v1/fx/rates", method: .get, headers: api.headers(.writer)).status == .forbidden)
        }
    }

    @Test("stored rates are never changed, not even by the table's owner")
    func ratesAreAppendOnly() async throws {
        try await TestDatabase.with { client, _ in
            let store = FXStore(client: client, logger: TestDatabase.logger)
            let rows = try FXUpload.ecbCSV(Array("Date,USD,\n2025-03-03,1.0465,\n".utf8))
            let result = try await store.upload(rows, origin: "cli", label: "test")
            #expect(result.version == 1 && result.added == 1)
            await #expect(throws: (any Error).self) { try await client.query("UPDATE fx_rates SET rate = 2") }
            await #expect(throws: (any Error).self) { try await client.query("DELETE FROM fx_rate_versions") }
            let rates = try await store.rates(version: 1, currencies: ["USD"], from: FXLimits.firstDay, to: FXLimits.lastDay)
            #expect(rates.map(\.rate) == [FXRate("1.0465")!])
        }
    }

    @Test("a running server keeps the reporting currencies it is told: their cells follow rate uploads and answer the worked example")
    func reportingCurrencyCells() async throws {
        try await APIHarness.run(maxBodyBytes: 8 * 1024 * 1024, live: true, reportingCurrencies: ["GBP", "EUR"]) { http, api in
            #expect(
                try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(Self.purchase)).status == .created)
            var csvHeaders = api.headers(.admin)
            csvHeaders[.contentType] = "text/csv"
            #expect(try await http.execute(uri: "/v1/fx/rates", method: .put, headers: csvHeaders, body: body(try Self.sample)).status == .created)
            let url = try #require(api.url)
            // The server's workers: the day cells' queue moves the purchase on, the reporting currency cells follow
            // version 1 for GBP and EUR (USD, kept from the start, is dropped; the own-currency cells stay).
            let kept = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 1)) { c in
                let deadline = ContinuousClock.now + .seconds(30)
                while true {
                    let state = try await c.query(
                        """
                        SELECT string_agg(
                                   reporting_currency || ':' || complete || ':'
                                       || CASE reporting_currency WHEN '' THEN 'any' ELSE coalesce(fx_version, 0)::text END, ','
                                   ORDER BY 1),
                               (SELECT count(*) FROM report_fx_pending) + (SELECT count(*) FROM report_revenue_pending)
                                 + (SELECT (SELECT max(position) FROM events) - applied_position FROM report_rollup_state),
                               (SELECT sum(billings)::int8 FROM report_fx_revenue_days WHERE reporting_currency = 'GBP' AND entitlement = '')
                        FROM report_fx_cells
                        """, logger: TestDatabase.logger
                    ).collect().first?.decode((String?, Int64, Int64?).self)
                    if let state, state.0 == ":true:any,EUR:true:1,GBP:true:1", state.1 == 0, state.2 == 788 { return true }
                    guard ContinuousClock.now < deadline else {
                        Issue.record("reporting currency cells: \(String(describing: state))")
                        return false
                    }
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            #expect(kept)
            // The worked example in GBP (docs/reports.md): 788 billed, 726 recognised in March, 62 in April.
            let gbp = try Self.rows(
                try await http.execute(
                    uri: "/v1/reports/revenue?from=2025-03-01&to=2025-05-01&currency=GBP", method: .get, headers: api.headers(.analyst)))
            #expect(gbp.map { $0["billings"] } == [788, 0] && gbp.map { $0["recognized"] } == [726, 62])
            let byStore = try Self.rows(
                try await http.execute(
                    uri: "/v1/reports/revenue?from=2025-03-01&to=2025-05-01&interval=week&currency=EUR&group_by=store", method: .get,
                    headers: api.headers(.analyst)))
            #expect(byStore.compactMap { $0["billings"] }.filter { $0 != 0 } == [955])
            // By store on a week grid in the transactions' own currencies: the own-currency cells.
            let own = try Self.rows(
                try await http.execute(
                    uri: "/v1/reports/revenue?from=2025-03-01&to=2025-05-01&interval=week&group_by=store", method: .get,
                    headers: api.headers(.analyst)))
            #expect(own.compactMap { $0["billings"] }.filter { $0 != 0 } == [999] && own.allSatisfy { $0["currency"] == "USD" })
        }
    }
}
