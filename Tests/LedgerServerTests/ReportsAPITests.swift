import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerTestSupport
import NIOCore
import Testing

@Suite("Reports over HTTP")
struct ReportsAPITests {
    /// Two subscribers: one paying March and April then lapsing with auto-renew off, one refunded in March.
    static let events: JSONValue = .object([
        "events": [
            .object(eventJSON(subscriber: "a", key: "a1", overrides: [:])),
            .object(
                eventJSON(
                    subscriber: "a", key: "a2",
                    overrides: [
                        "type": "renewal", "occurred_at": "2026-04-01T10:00:00Z",
                        "data": [
                            "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": "t-a2", "kind": "auto_renewable",
                            "period_start": "2026-04-01T10:00:00Z", "period_end": "2026-05-01T10:00:00Z", "period": "P1M",
                            "price_minor": 999, "currency": "USD", "commission_rate": "0.30",
                        ],
                    ])),
            .object(
                eventJSON(
                    subscriber: "a", key: "a3",
                    overrides: [
                        "type": "auto_renew_changed", "occurred_at": "2026-04-20T10:00:00Z",
                        "data": ["enabled": false, "product_id": "pro.monthly", "entitlements": ["pro"]],
                    ])),
            .object(eventJSON(subscriber: "b", key: "b1", overrides: [:])),
            .object(
                eventJSON(
                    subscriber: "b", key: "b2",
                    overrides: [
                        "type": "refund", "occurred_at": "2026-03-16T10:00:00Z",
                        "data": ["transaction_id": "t-b1", "amount_minor": 999, "currency": "USD", "reason": "customer"],
                    ])),
            .object(eventJSON(subscriber: "sandbox", key: "s1", overrides: ["environment": "sandbox"])),
        ]
    ])

    @Test("churn, revenue, MRR, trials and retention answer JSON and CSV to analysts only")
    func reports() async throws {
        try await APIHarness.run { http, api in
            let created = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(Self.events))
            #expect(created.status == .created)

            let churnURI = "/v1/reports/churn?from=2026-03-01&to=2026-06-01&interval=month"
            for role in [APIRole.reader, .writer, .auditor] {
                #expect(try await http.execute(uri: churnURI, method: .get, headers: api.headers(role)).status == .forbidden)
            }
            #expect(try await http.execute(uri: churnURI, method: .get, headers: api.headers(nil)).status == .unauthorized)

            let churn = try await http.execute(uri: churnURI, method: .get, headers: api.headers(.analyst))
            #expect(churn.status == .ok)
            let periods = try #require(try churn.json.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue))
            #expect(periods.map { $0["period_start"] } == ["2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z"])
            #expect(periods.map { $0["new"] } == [1, 0, 0])
            #expect(periods.map { $0["active_end"] } == [1, 1, 0])
            try #require(periods.count == 3)
            #expect(periods[2]["churned_voluntary"] == 1 && periods[2]["churn_rate"] == 1)
            #expect(periods[0]["churn_rate"] == .null)

            let revenue = try await http.execute(
                uri: "/v1/reports/revenue?from=2026-03-01&to=2026-06-01", method: .get, headers: api.headers(.admin))
            let rows = try #require(try revenue.json.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue))
            #expect(rows.map { $0["currency"] } == ["USD", "USD", "USD"], "sandbox never counts")
            #expect(rows.map { $0["billings"] } == [1998, 999, 0])
            try #require(rows.count == 3)
            #expect(rows[0]["commission"] == 600 && rows[0]["proceeds"] == 1398 && rows[0]["refunds"] == 999)
            #expect(rows[2]["deferred_end"] == 0)

            let csv = try await http.execute(
                uri: "/v1/reports/revenue?from=2026-03-01&to=2026-06-01", method: .get,
                headers: [.authorization: "Bearer \(api.keys[.analyst]!)", .accept: "text/csv"])
            #expect(csv.headers[.contentType] == "text/csv; charset=utf-8")
            let lines = String(buffer: csv.body).split(separator: "\r\n")
            #expect(
                lines.first
                    == "period_start,period_end,currency,billings,tax,commission,proceeds,refunds,refunded_unrecognized,refunds_recognized,recognized,deferred_start,deferred_end"
            )
            #expect(lines.count == 4)
            #expect(lines[1].hasPrefix("2026-03-01T00:00:00Z,2026-04-01T00:00:00Z,USD,1998,0,600,1398,999,"))

            let mrr = try await http.execute(uri: "/v1/reports/mrr?at=2026-04-15T00:00:00Z", method: .get, headers: api.headers(.analyst))
            #expect(try mrr.json.objectValue?["currencies"] == [["currency": "USD", "mrr_minor": 999, "active_paid": 1]])

            let trials = try await http.execute(uri: "/v1/reports/trials?from=2026-03-01&to=2026-04-01", method: .get, headers: api.headers(.analyst))
            #expect(
                try trials.json.objectValue?["periods"] == [
                    [
                        "period_start": "2026-03-01T00:00:00Z", "period_end": "2026-04-01T00:00:00Z", "started": 0, "converted": 0,
                        "conversion_rate": .null,
                    ]
                ])

            let retention = try await http.execute(
                uri: "/v1/reports/retention?from=2026-03-01&to=2026-04-01", method: .get, headers: api.headers(.analyst))
            let cohort = try #require(try retention.json.objectValue?["periods"]?.arrayValue?.first?.objectValue)
            // b's refunded March counts in the cohort: their first paid run started then.
            #expect(cohort["cohort_size"] == 2)
            let retained = try #require(cohort["retained"]?.arrayValue)
            try #require(retained.count > 3)
            #expect(retained.prefix(4).map { $0.objectValue?["subscribers"] } == [2, 1, 1, 0])
            #expect(retained[1].objectValue?["ratio"]?.numberValue?.canonical == "0.5")
        }
    }

    @Test("the server's worker turns queued transactions into day cells; week and day grids answer the same before and after")
    func revenueDayCells() async throws {
        try await APIHarness.run(live: true) { http, api in
            let weeks = "/v1/reports/revenue?from=2026-02-23&to=2026-05-11&interval=week"
            let days = "/v1/reports/revenue?from=2026-03-10&to=2026-03-20&interval=day&entitlement=pro"
            let created = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(Self.events))
            #expect(created.status == .created)
            // Right after the append, whatever the worker has applied yet.
            let weekly = try await http.execute(uri: weeks, method: .get, headers: api.headers(.analyst))
            let daily = try await http.execute(uri: days, method: .get, headers: api.headers(.analyst))
            #expect(weekly.status == .ok && daily.status == .ok)
            let url = try #require(api.url)
            let pending = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 1)) { c in
                for _ in 0..<300 {
                    let n = try await c.query("SELECT count(*) FROM report_revenue_pending", logger: TestDatabase.logger)
                        .collect().first?.decode(Int64.self)
                    if n == 0 { return Int64(0) }
                    try await Task.sleep(for: .milliseconds(100))
                }
                return Int64(-1)
            }
            #expect(pending == 0, "the worker emptied the queue within 30 s")
            let cells = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 1)) { c in
                try await c.query("SELECT count(*) FROM report_revenue_days", logger: TestDatabase.logger).collect().first?
                    .decode(Int64.self) ?? 0
            }
            #expect(cells > 0)
            let weeklyAfter = try await http.execute(uri: weeks, method: .get, headers: api.headers(.analyst))
            let dailyAfter = try await http.execute(uri: days, method: .get, headers: api.headers(.analyst))
            #expect(try weeklyAfter.json == weekly.json)
            #expect(try dailyAfter.json == daily.json)
            // Both purchases of Sunday 2026-03-01 are billed in the ISO week that starts on Monday 2026-02-23.
            let rows = try #require(try weeklyAfter.json.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue))
            #expect(rows.first { $0["period_start"] == "2026-02-23T00:00:00Z" }?["billings"] == 1998)
        }
    }

    @Test("a report with no rows still answers its CSV header line")
    func emptyCSVHasHeader() async throws {
        try await APIHarness.run { http, api in
            let csvHeaders: HTTPFields = [.authorization: "Bearer \(api.keys[.analyst]!)", .accept: "text/csv"]
            let expected: [(String, String)] = [
                (
                    "revenue?from=2025-01-01&to=2025-03-01",
                    "period_start,period_end,currency,billings,tax,commission,proceeds,refunds,refunded_unrecognized,refunds_recognized,recognized,deferred_start,deferred_end"
                ),
                ("mrr?at=2025-06-01T00:00:00Z", "currency,mrr_minor,active_paid"),
            ]
            for (query, header) in expected {
                let r = try await http.execute(uri: "/v1/reports/\(query)", method: .get, headers: csvHeaders)
                #expect(r.status == .ok, "\(query)")
                #expect(String(buffer: r.body) == "\(header)\r\n", "\(query): an empty ledger answers the header line alone")
            }
            let churn = try await http.execute(
                uri: "/v1/reports/churn?from=2025-01-01&to=2025-03-01&format=csv", method: .get, headers: api.headers(.analyst))
            let lines = String(buffer: churn.body).split(separator: "\r\n")
            #expect(
                lines.first
                    == "period_start,period_end,active_start,new,reactivated,churned,churned_voluntary,churned_involuntary,churned_refund,churned_other,active_end,churn_rate,transferred_in,transferred_out"
            )
            #expect(lines.count == 3, "a header and one line per month")
        }
    }

    @Test("bad report parameters are 400 invalid_request naming the parameter")
    func badParameters() async throws {
        try await APIHarness.run { http, api in
            for (query, word) in [
                ("interval=year", "interval"), ("from=2026-13-01", "from"), ("from=2026-05-01&to=2026-04-01", "from"),
                ("from=2000-01-01&to=2026-01-01&interval=day", "periods"),
            ] {
                let r = try await http.execute(uri: "/v1/reports/churn?\(query)", method: .get, headers: api.headers(.analyst))
                #expect(r.status == .badRequest, "\(query)")
                #expect(r.errorCode == "invalid_request")
                let message = try r.json.objectValue?["error"]?.objectValue?["message"]?.stringValue ?? ""
                #expect(message.contains(word), "\(message)")
            }
            let mrr = try await http.execute(uri: "/v1/reports/mrr?at=yesterday", method: .get, headers: api.headers(.analyst))
            #expect(mrr.status == .badRequest)
        }
    }
}
