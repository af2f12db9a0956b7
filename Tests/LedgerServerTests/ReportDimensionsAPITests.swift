import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerTestSupport
import NIOCore
import Testing

@Suite("Report dimensions and tax over HTTP")
struct ReportDimensionsAPITests {
    static func purchase(
        _ subscriber: String, source: String, country: String?, tax: Int64?, price: Int64, currency: String, rate: String,
        product: String = "pro.monthly"
    ) -> JSONValue {
        var data: [String: JSONValue] = [
            "product_id": .string(product), "entitlements": ["pro"], "transaction_id": .string("t-\(subscriber)"), "kind": "auto_renewable",
            "period_start": "2025-03-03T10:00:00Z", "period_end": "2025-04-03T10:00:00Z", "period": "P1M",
            "price_minor": .number(JSONNumber(price)), "currency": .string(currency), "commission_rate": .string(rate),
        ]
        if let country { data["country"] = .string(country) }
        if let tax { data["tax_minor"] = .number(JSONNumber(tax)) }
        return .object(
            eventJSON(
                subscriber: subscriber, key: "k-\(subscriber)",
                overrides: ["occurred_at": "2025-03-03T10:00:00Z", "source": .string(source), "data": .object(data)]))
    }

    /// The worked example of docs/reports.md ("Revenue with tax") and three more buyers.
    static let events: JSONValue = .object([
        "events": [
            purchase("de", source: "google", country: "DE", tax: 190, price: 1190, currency: "EUR", rate: "0.15"),
            purchase("us", source: "apple", country: "US", tax: nil, price: 999, currency: "USD", rate: "0.30"),
            purchase("fr", source: "stripe", country: "FR", tax: 200, price: 1200, currency: "EUR", rate: "0.03", product: "pro.web"),
            purchase("xx", source: "apple", country: nil, tax: nil, price: 899, currency: "EUR", rate: "0.30"),
        ]
    ])

    static func rows(_ r: TestResponse, _ member: String = "periods") throws -> [[String: JSONValue]] {
        try #require(try r.json.objectValue?[member]?.arrayValue?.compactMap(\.objectValue))
    }

    static let money = [
        "billings", "tax", "commission", "proceeds", "refunds", "refunded_unrecognized", "refunds_recognized", "recognized", "deferred_start",
        "deferred_end",
    ]

    static func int(_ v: JSONValue?) -> Int64 { v?.numberValue?.int64Value ?? 0 }

    @Test("tax in revenue; filters and group_by on revenue and MRR, JSON and CSV; the 400s name their parameter")
    func dimensions() async throws {
        try await APIHarness.run { http, api in
            let created = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(Self.events))
            #expect(created.status == .created)
            let get = { (uri: String) in try await http.execute(uri: uri, method: .get, headers: api.headers(.analyst)) }
            let span = "/v1/reports/revenue?from=2025-03-01&to=2025-05-01"

            // The worked example: 11.90 EUR with 1.90 tax, commission 0.15 on the 10.00 net.
            let de = try Self.rows(try await get(span + "&country=DE"))
            #expect(de.map { $0["currency"] } == ["EUR", "EUR"])
            #expect(de[0]["billings"] == 1190 && de[0]["tax"] == 190 && de[0]["commission"] == 150 && de[0]["proceeds"] == 850)
            #expect(de[0]["recognized"] == 1097 && de[0]["deferred_end"] == 93 && de[1]["recognized"] == 93)

            // Grouped rows add up to the whole (the whole from the rollups, the groups from the facts).
            let whole = try Self.rows(try await get(span))
            for dimension in ["store", "country", "product_id", "entitlement"] {
                let response = try await get(span + "&group_by=\(dimension)")
                #expect(response.status == .ok)
                #expect(try response.json.objectValue?["group_by"] == .string(dimension))
                let grouped = try Self.rows(response)
                #expect(grouped.allSatisfy { $0.keys.contains(dimension) }, "\(dimension) on every row")
                for row in whole {
                    let parts = grouped.filter { $0["period_start"] == row["period_start"] && $0["currency"] == row["currency"] }
                    for m in Self.money { #expect(parts.map { Self.int($0[m]) }.reduce(0, +) == Self.int(row[m]), "\(dimension) \(m)") }
                }
            }
            let byCountry = try Self.rows(try await get(span + "&group_by=country"))
            #expect(Set(byCountry.map { $0["country"] }) == ["DE", "FR", "US", .null], "an unknown country is its own group, null")
            // Every store given: the facts path equals the rollups.
            #expect(try Self.rows(try await get(span + "&store=apple&store=google&store=stripe")) == whole)
            #expect(try Self.rows(try await get(span + "&store=apple&country=US")).map { $0["billings"] } == [999, 0])
            #expect(try Self.rows(try await get(span + "&product_id=pro.web")).map { $0["billings"] } == [1200, 0])
            let envelope = try await get(span + "&country=FR&country=DE&group_by=store").json.objectValue
            #expect(envelope?["filters"]?.objectValue?["country"] == ["DE", "FR"] && envelope?["entitlement"] == .null)

            // In a reporting currency too: the groups are converted transaction by transaction, so they add up.
            let rates: JSONValue = ["rates": [["date": "2025-03-03", "currency": "USD", "rate": "1.0465"]]]
            let put = try await http.execute(uri: "/v1/fx/rates", method: .put, headers: api.headers(.admin), body: body(rates))
            #expect(put.status == .created)
            let converted = try Self.rows(try await get(span + "&currency=EUR"))
            let convertedByStore = try Self.rows(try await get(span + "&currency=EUR&group_by=store"))
            #expect(Set(convertedByStore.map { $0["store"] }) == ["apple", "google", "stripe"])
            for row in converted {
                let parts = convertedByStore.filter { $0["period_start"] == row["period_start"] }
                #expect(parts.allSatisfy { $0["currency"] == "EUR" })
                for m in Self.money { #expect(parts.map { Self.int($0[m]) }.reduce(0, +) == Self.int(row[m]), "converted \(m)") }
            }
            // 1190 + 1200 + 899 EUR, and 999 USD = round(954.61) = 955 EUR.
            #expect(converted.first?["billings"] == .number(JSONNumber(Int64(1190 + 1200 + 899 + 955))))
            let convertedMRR = try Self.rows(try await get("/v1/reports/mrr?at=2025-03-15T00:00:00Z&currency=EUR&group_by=country"), "currencies")
            #expect(convertedMRR.map { [$0["country"], $0["mrr_minor"]] } == [["DE", 1190], ["FR", 1200], ["US", 955], [.null, 899]])

            // CSV: the group's column first.
            var csv = api.headers(.analyst)
            csv[.accept] = "text/csv"
            let text = String(buffer: try await http.execute(uri: span + "&group_by=store", method: .get, headers: csv).body)
            #expect(text.hasPrefix("store,period_start,period_end,currency,billings,tax,commission,proceeds,"))
            #expect(text.contains("\ngoogle,2025-03-01T00:00:00Z,2025-04-01T00:00:00Z,EUR,1190,190,150,850,"))

            // MRR per group adds up to MRR.
            let mrrURI = "/v1/reports/mrr?at=2025-03-15T00:00:00Z"
            let mrr = try Self.rows(try await get(mrrURI), "currencies")
            #expect(mrr == [["currency": "EUR", "mrr_minor": 3289, "active_paid": 3], ["currency": "USD", "mrr_minor": 999, "active_paid": 1]])
            let mrrByStore = try Self.rows(try await get(mrrURI + "&group_by=store"), "currencies")
            #expect(
                mrrByStore == [
                    ["store": "apple", "currency": "EUR", "mrr_minor": 899, "active_paid": 1],
                    ["store": "apple", "currency": "USD", "mrr_minor": 999, "active_paid": 1],
                    ["store": "google", "currency": "EUR", "mrr_minor": 1190, "active_paid": 1],
                    ["store": "stripe", "currency": "EUR", "mrr_minor": 1200, "active_paid": 1],
                ])
            #expect(
                try Self.rows(try await get(mrrURI + "&country=FR&country=DE"), "currencies") == [
                    ["currency": "EUR", "mrr_minor": 2390, "active_paid": 2]
                ])
            #expect(try Self.rows(try await get(mrrURI + "&entitlement=pro"), "currencies") == mrr)

            // Clear 400s naming the parameter, fast.
            for (uri, parameter) in [
                (span + "&group_by=planet", "group_by"),
                (span + "&group_by=store&group_by=country", "group_by"),
                (span + "&country=de", "country"),
                (span + "&country=DEU", "country"),
                (span + "&store=Apple%20Store", "store"),
                (mrrURI + "&group_by=currency", "group_by"),
                ("/v1/reports/churn?country=Germany", "country"),
                ("/v1/reports/trials?group_by=shop", "group_by"),
                ("/v1/reports/retention?store=Apple", "store"),
                ("/v1/reports/retention?group_by=month", "group_by"),
                ("/v1/reports/retention?product_id=%01", "product_id"),
                ("/v1/reports/revenue?from=1950-01-01&to=2050-01-01&interval=day&group_by=country", "from/to"),
            ] {
                let started = ContinuousClock.now
                let r = try await get(uri)
                #expect(r.status == .badRequest, "\(uri)")
                #expect(try r.json.objectValue?["error"]?.objectValue?["message"]?.stringValue?.contains(parameter) == true, "\(uri)")
                #expect(ContinuousClock.now - started < .seconds(2), "\(uri)")
            }
            // Churn by store and country: the groups add up to the whole (from the rollups); a filter is its group.
            let churnURI = "/v1/reports/churn?from=2025-03-01&to=2025-06-01"
            let churn = try Self.rows(try await get(churnURI))
            #expect(churn.map { $0["active_end"] } == [4, 0, 0] && churn.map { $0["churned"] } == [0, 4, 0])
            for dimension in ["store", "country", "product_id", "entitlement"] {
                let grouped = try Self.rows(try await get(churnURI + "&group_by=\(dimension)"))
                for row in churn {
                    for m in ["active_start", "new", "reactivated", "churned", "churned_other", "active_end"] {
                        let parts = grouped.filter { $0["period_start"] == row["period_start"] }
                        #expect(parts.map { Self.int($0[m]) }.reduce(0, +) == Self.int(row[m]), "churn by \(dimension): \(m)")
                    }
                }
            }
            // Retention by store: the March cohort splits into its stores, a filter is its group.
            let retentionURI = "/v1/reports/retention?from=2025-03-01&to=2025-04-01"
            let cohorts = try Self.rows(try await get(retentionURI))
            #expect(cohorts.map { $0["cohort_size"] } == [4])
            let cohortsByStore = try Self.rows(try await get(retentionURI + "&group_by=store"))
            #expect(cohortsByStore.map { [$0["store"], $0["cohort_size"]] } == [["apple", 2], ["google", 1], ["stripe", 1]])
            #expect(try Self.rows(try await get(retentionURI + "&country=DE")).map { $0["cohort_size"] } == [1])
            let byStore = try Self.rows(try await get(churnURI + "&group_by=store"))
            #expect(byStore.filter { $0["store"] == "apple" }.map { $0["new"] } == [2, 0, 0])
            #expect(try Self.rows(try await get(churnURI + "&store=apple")).map { $0["new"] } == [2, 0, 0])
            #expect(try Self.rows(try await get(churnURI + "&country=DE&country=FR")).map { $0["churned"] } == [0, 2, 0])
        }
    }

    static func trial(_ subscriber: String, source: String, country: String, converts: Bool) -> [JSONValue] {
        func event(_ key: String, at: String, _ data: [String: JSONValue]) -> JSONValue {
            var d: [String: JSONValue] = [
                "product_id": "pro.monthly", "entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M", "currency": "EUR",
                "country": .string(country),
            ]
            for (k, v) in data { d[k] = v }
            return .object(
                eventJSON(
                    subscriber: subscriber, key: "\(subscriber)-\(key)",
                    overrides: ["occurred_at": .string(at), "source": .string(source), "data": .object(d)]))
        }
        let trial = event(
            "trial", at: "2025-03-03T10:00:00Z",
            [
                "transaction_id": .string("\(subscriber)-t"), "offer": "trial", "price_minor": 0, "period_start": "2025-03-03T10:00:00Z",
                "period_end": "2025-03-10T10:00:00Z",
            ])
        guard converts else { return [trial] }
        return [
            trial,
            event(
                "paid", at: "2025-03-10T10:00:00Z",
                [
                    "transaction_id": .string("\(subscriber)-p"), "offer": "none", "price_minor": 999, "period_start": "2025-03-10T10:00:00Z",
                    "period_end": "2025-04-10T10:00:00Z",
                ]),
        ]
    }

    @Test("trials take the dimensions of their own transaction: grouped, filtered, adding up to the rollups' trials")
    func trialsByDimension() async throws {
        var list: [JSONValue] = Self.trial("t1", source: "apple", country: "DE", converts: true)
        list += Self.trial("t2", source: "google", country: "DE", converts: false)
        list += Self.trial("t3", source: "google", country: "JP", converts: true)
        let events: JSONValue = .object(["events": .array(list)])
        try await APIHarness.run { http, api in
            let created = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(events))
            #expect(created.status == .created)
            let uri = "/v1/reports/trials?from=2025-03-01&to=2025-04-01"
            func counts(_ query: String, _ member: String? = nil) async throws -> [[JSONValue]] {
                let response = try await http.execute(uri: uri + query, method: .get, headers: api.headers(.analyst))
                return try Self.rows(response).map { row in
                    (member.map { [row[$0] ?? .null] } ?? []) + [row["started"] ?? .null, row["converted"] ?? .null]
                }
            }
            let whole = try await counts("")
            #expect(whole == [[3, 2]])
            let byStore = try await counts("&group_by=store", "store")
            #expect(byStore == [["apple", 1, 1], ["google", 2, 1]])
            let byCountry = try await counts("&group_by=country", "country")
            #expect(byCountry == [["DE", 2, 1], ["JP", 1, 1]])
            let filtered = try await counts("&store=google&country=JP")
            #expect(filtered == [[1, 1]])
            let byEntitlement = try await counts("&group_by=entitlement", "entitlement")
            #expect(byEntitlement == [["pro", 3, 2]])
            let anyOf = try await counts("&entitlement=pro&entitlement=basic")
            #expect(anyOf == [[3, 2]])
        }
    }

    @Test("country and tax_minor are validated at the append, 422 naming the field, and stored as sent")
    func validation() async throws {
        try await APIHarness.run { http, api in
            for (set, field): ([String: JSONValue], String) in [
                (["country": "de"], "data.country"), (["country": "DEU"], "data.country"), (["tax_minor": 2000], "data.tax_minor"),
                (["tax_minor": -1], "data.tax_minor"), (["tax_minor": "1"], "data.tax_minor"),
            ] {
                guard case .object(var e) = Self.purchase("v", source: "web", country: nil, tax: nil, price: 999, currency: "USD", rate: "0.3"),
                    case .object(var data)? = e["data"]
                else { return }
                for (k, v) in set { data[k] = v }
                e["data"] = .object(data)
                let r = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(e)))
                #expect(r.status == .unprocessableContent && r.errorCode == "invalid_event", "\(set)")
                #expect(try r.json.objectValue?["error"]?.objectValue?["message"]?.stringValue?.contains(field) == true, "\(set)")
            }
            let good = Self.purchase("v", source: "web", country: "CH", tax: 70, price: 999, currency: "CHF", rate: "0.3")
            #expect(try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(good)).status == .created)
            let stored = try await http.execute(uri: "/v1/subscribers/v/events", method: .get, headers: api.headers(.auditor))
            let data = try stored.json.objectValue?["events"]?.arrayValue?.first?.objectValue?["data"]?.objectValue
            #expect(data?["country"] == "CH" && data?["tax_minor"] == 70)
            #expect(data == good.objectValue?["data"]?.objectValue, "stored as sent")
        }
    }
}
