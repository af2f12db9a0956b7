import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

/// `country` and `tax_minor` on purchases and renewals (ledger-semantics sections 2 and 6), revenue with tax, and
/// report dimensions (section 5, "Dimensions").
@Suite struct ReportDimensionsTests {
    typealias B = StreamBuilder

    static func purchase(_ set: [String: JSONValue]) -> [String: JSONValue] {
        var data: [String: JSONValue] = [
            "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": "t1", "kind": "auto_renewable",
            "period_start": "2025-03-03T10:00:00Z", "period_end": "2025-04-03T10:00:00Z", "period": "P1M", "price_minor": 1190,
            "currency": "EUR", "commission_rate": "0.15",
        ]
        for (k, v) in set { data[k] = v }
        return data
    }

    static func validate(_ type: EventType = .purchase, _ set: [String: JSONValue]) -> EventValidationError? {
        do {
            try EventDataValidator.validate(type: type, data: purchase(set), occurredAt: B.t("2025-03-03T10:00:00Z"), path: "data")
            return nil
        } catch {
            return error
        }
    }

    @Test(
        arguments: [
            (["country": "DE", "tax_minor": 190], nil),
            (["country": "US", "tax_minor": 0], nil),
            (["tax_minor": 1190], nil),
            (["country": .null, "tax_minor": .null], nil),
            (["country": "de"], "data.country"),
            (["country": "DEU"], "data.country"),
            (["country": "D1"], "data.country"),
            (["country": 49], "data.country"),
            (["tax_minor": 1191], "data.tax_minor"),
            (["tax_minor": -1], "data.tax_minor"),
            (["tax_minor": .number(JSONNumber(jsonText: "1.5")!)], "data.tax_minor"),
            (["tax_minor": "190"], "data.tax_minor"),
        ] as [([String: JSONValue], String?)])
    func countryAndTaxAreValidated(set: [String: JSONValue], field: String?) {
        for type in [EventType.purchase, .renewal] {
            let error = Self.validate(type, set)
            #expect(error?.field == field, "\(type) \(set): \(error.map { "\($0)" } ?? "accepted")")
        }
    }

    @Test func aFreeProductCarriesNoTax() {
        let error = Self.validate(.purchase, ["kind": "free", "price_minor": 0, "tax_minor": 1, "period_start": .null, "period_end": .null])
        #expect(error?.field == "data.tax_minor")
    }

    @Test func typedDataAndFactsCarryTaxCountryStoreAndProduct() {
        var b = B()
        b.add(.purchase, "2025-03-03T10:00:00Z", Self.purchase(["country": "DE", "tax_minor": 190]))
        b.events[0].source = "google"
        guard case .transaction(let t) = FoldEvent(b.events[0]).payload else {
            Issue.record("not a transaction")
            return
        }
        #expect(t.country == "DE" && t.taxMinor == 190)
        let facts = SubscriberFacts.derive(events: b.events, ledger: Fold.fold(b.events))
        let fact = try! #require(facts.transactions.first)
        #expect(fact.tax == 190 && fact.country == "DE" && fact.store == "google" && fact.productID == "pro.monthly")
        // Commission on the price net of tax: round((1190 − 190) × 0.15) = 150.
        #expect(fact.commission == 150)
    }

    /// The worked example of docs/reports.md ("Revenue with tax"), by hand.
    @Test func theWorkedExampleWithTax() {
        var b = B()
        b.add(.purchase, "2025-03-03T10:00:00Z", Self.purchase(["country": "DE", "tax_minor": 190]))
        b.add(
            .purchase, "2025-03-03T10:00:00Z",
            Self.purchase(["transaction_id": "t2", "price_minor": 999, "currency": "USD", "commission_rate": "0.30", "country": "US"]))
        let facts = SubscriberFacts.derive(events: b.events, ledger: Fold.fold(b.events))
        var acc = RevenueAccumulator(boundaries: [B.t("2025-03-01"), B.t("2025-04-01"), B.t("2025-05-01")])
        for t in facts.transactions { acc.add(t) }
        let rows = Dictionary(uniqueKeysWithValues: acc.periods.map { ("\($0.start.rfc3339.prefix(7)) \($0.currency)", $0) })
        let march = rows["2025-03 EUR"]!.figures
        #expect(march.billings == 1190 && march.tax == 190 && march.commission == 150 && march.proceeds == 850)
        // R(April 1) = round(1190 × 686 h / 744 h) = round(1097.23) = 1097.
        #expect(march.recognized == 1097 && rows["2025-03 EUR"]!.deferredEnd == 93)
        #expect(rows["2025-04 EUR"]!.figures.recognized == 93 && rows["2025-04 EUR"]!.deferredEnd == 0)
        // No tax: the v1 figures.
        let usd = rows["2025-03 USD"]!.figures
        #expect(usd.billings == 999 && usd.tax == 0 && usd.commission == 300 && usd.proceeds == 699 && usd.recognized == 921)
    }

    /// Tax converts like commission: a cumulative figure, so parts still add up; proceeds is derived.
    @Test func taxInAReportingCurrency() throws {
        var b = B()
        b.add(.purchase, "2025-03-03T10:00:00Z", Self.purchase(["country": "DE", "tax_minor": 190]))
        let t = SubscriberFacts.derive(events: b.events, ledger: Fold.fold(b.events)).transactions[0]
        let factor = FXFactor(numerator: 10465, denominator: 10000)
        let whole = try RevenueSchedule(t).cumulative(before: B.t("2025-05-01"), converting: factor)
        // 190 × 1.0465 = 198.835 → 199; 1190 × 1.0465 = 1245.335 → 1245; 150 × 1.0465 = 156.975 → 157.
        #expect(whole.tax == 199 && whole.billings == 1245 && whole.commission == 157 && whole.proceeds == 1245 - 199 - 157)
    }

    // MARK: grouping

    /// The generated histories with a store, a country (or none) and tax on each transaction, drawn apart.
    static let population: [SubscriberFacts] = (0..<300).map { seed in
        var events = RandomHistory.make(seed: UInt64(seed) &* 7919 &+ 17)
        var r = SplitMix64(seed: UInt64(seed) &+ 99)
        let store = r.pick(["apple", "google", "stripe"])
        for i in events.indices {
            events[i].source = store
            guard [.purchase, .renewal].contains(events[i].type) else { continue }
            if let c = r.pick([nil, "DE", "US", "JP"] as [String?]) { events[i].data["country"] = .string(c) }
            let price = events[i].data["price_minor"]?.numberValue?.int64Value ?? 0
            events[i].data["tax_minor"] = .number(JSONNumber(Int64(r.int(0...Int(price / 4)))))
            if r.int(0...2) == 0 { events[i].data["product_id"] = "pro.yearly" }
        }
        return SubscriberFacts.derive(events: events, ledger: Fold.fold(events))
    }

    static let grids: [[Timestamp]] = [
        ReportCalendar.boundaries(from: B.t("2025-12-01"), to: B.t("2027-03-01"), interval: .month),
        ReportCalendar.boundaries(from: B.t("2026-02-10"), to: B.t("2026-07-01"), interval: .day),
    ]

    static var additive: [KeyPath<RevenueFigures, Int128>] {
        [
            \.billings, \.tax, \.commission, \.proceeds, \.refunds, \.refundedUnrecognized, \.refundsRecognized, \.recognized,
        ]
    }

    /// Grouped rows add up to the ungrouped row, per period and currency, for every additive figure; a filter on
    /// one value answers exactly that group's rows.
    @Test(arguments: 0..<2, [ReportDimension.store, .country, .productID])
    func groupedRevenueAddsUpToTheWhole(grid: Int, dimension: ReportDimension) throws {
        let boundaries = Self.grids[grid]
        var whole = RevenueAccumulator(boundaries: boundaries)
        var grouped = GroupedRevenueAccumulator(boundaries: boundaries, dimensions: ReportDimensions(groupBy: dimension))
        for facts in Self.population {
            for t in facts.transactions {
                whole.add(t)
                try grouped.add(t)
            }
        }
        let rows = grouped.periods
        #expect(Set(rows.map(\.group)).count > 1, "several groups")
        var taxed: Int128 = 0
        for row in whole.periods {
            let parts = rows.filter { $0.period.start == row.start && $0.period.currency == row.currency }.map(\.period)
            for f in Self.additive { #expect(parts.map { $0.figures[keyPath: f] }.reduce(0, +) == row.figures[keyPath: f], "\(row.start) \(f)") }
            #expect(parts.map(\.deferredEnd).reduce(0, +) == row.deferredEnd)
            #expect(row.figures.proceeds == row.figures.billings - row.figures.tax - row.figures.commission)
            taxed += row.figures.tax
        }
        #expect(taxed > 0)
        // A filter is its group.
        for value in Set(rows.map(\.group)) {
            var d = ReportDimensions()
            switch dimension {
            case .store: d.stores = [value ?? ""]
            case .country: d.countries = value.map { [$0] } ?? []
            case .productID: d.productIDs = [value ?? ""]
            case .entitlement: d.entitlements = [value ?? ""]
            }
            guard value != nil else { continue }
            var filtered = GroupedRevenueAccumulator(boundaries: boundaries, dimensions: d)
            for facts in Self.population { for t in facts.transactions { try filtered.add(t) } }
            #expect(filtered.periods.map(\.period) == rows.filter { $0.group == value }.map(\.period), "\(dimension) = \(value!)")
        }
    }

    /// By entitlement a transaction granting two entitlements counts in both groups (as in each entitlement's own
    /// report); the groups add up to the whole where every transaction grants one.
    @Test func groupedByEntitlementCountsEachEntitlement() throws {
        let boundaries = Self.grids[0]
        var single = RevenueAccumulator(boundaries: boundaries)
        var grouped = GroupedRevenueAccumulator(boundaries: boundaries, dimensions: ReportDimensions(groupBy: .entitlement))
        var pro = RevenueAccumulator(boundaries: boundaries)
        for facts in Self.population {
            for t in facts.transactions {
                try grouped.add(t)
                if t.entitlements.contains("pro") { pro.add(t) }
                if t.entitlements.count == 1 { single.add(t) }
            }
        }
        #expect(grouped.periods.filter { $0.group == "pro" }.map(\.period) == pro.periods)
    }

    /// Churn's counts by group add up to the whole for every period (each subscriber counts in one group at an
    /// instant); without dimensions the grouped accumulator is the plain one.
    @Test(arguments: 0..<2, [nil, .store, .country, .productID] as [ReportDimension?])
    func groupedChurnAddsUpToTheWhole(grid: Int, dimension: ReportDimension?) {
        let boundaries = Self.grids[grid]
        var whole = ChurnAccumulator(boundaries: boundaries)
        var grouped = GroupedChurnAccumulator(boundaries: boundaries, dimensions: ReportDimensions(groupBy: dimension))
        for facts in Self.population {
            let runs = facts.runs.filter { $0.entitlement == "" }
            guard let first = runs.first else { continue }
            whole.add(runs: runs, firstStart: first.start)
            grouped.add(runs: runs, firstStart: first.start, services: RunServices.of(facts, runs))
        }
        let rows = grouped.periods
        if dimension == nil { #expect(rows.map(\.period) == whole.periods) }
        var churned = 0
        for p in whole.periods {
            let parts = rows.filter { $0.period.start == p.start }.map(\.period)
            #expect(parts.map(\.activeStart).reduce(0, +) == p.activeStart, "\(p.start)")
            #expect(parts.map(\.activeEnd).reduce(0, +) == p.activeEnd, "\(p.start)")
            #expect(parts.map(\.new).reduce(0, +) == p.new && parts.map(\.reactivated).reduce(0, +) == p.reactivated)
            for reason in LapseReason.churn {
                #expect(parts.map { $0.churned[reason] ?? 0 }.reduce(0, +) == p.churned[reason] ?? 0, "\(p.start) \(reason)")
            }
            churned += p.churnedTotal
        }
        #expect(churned > 0)
        // A filter on one value is its group.
        if dimension == .store {
            var apple = GroupedChurnAccumulator(boundaries: boundaries, dimensions: ReportDimensions(stores: ["apple"]))
            for facts in Self.population {
                let runs = facts.runs.filter { $0.entitlement == "" }
                guard let first = runs.first else { continue }
                apple.add(runs: runs, firstStart: first.start, services: RunServices.of(facts, runs))
            }
            #expect(apple.periods.map(\.period) == rows.filter { $0.group == "apple" }.map(\.period))
        }
    }

    /// Retention by group: cohort sizes and every month's retained members add up to the whole (each member
    /// counts in one group at an instant); without dimensions the grouped accumulator is the plain one.
    @Test(arguments: [nil, .store, .country, .productID] as [ReportDimension?])
    func groupedRetentionAddsUpToTheWhole(dimension: ReportDimension?) {
        let (from, to, until) = (B.t("2026-01-01"), B.t("2026-12-01"), B.t("2027-06-01"))
        var whole = RetentionAccumulator(from: from, to: to, until: until)
        var grouped = GroupedRetentionAccumulator(from: from, to: to, until: until, dimensions: ReportDimensions(groupBy: dimension))
        for facts in Self.population {
            let runs = facts.runs.filter { $0.entitlement == "" }
            guard !runs.isEmpty else { continue }
            whole.add(runs: runs)
            grouped.add(runs: runs, services: RunServices.of(facts, runs))
        }
        let rows = grouped.cohorts
        if dimension == nil { #expect(rows.map(\.cohort) == whole.cohorts) }
        #expect(whole.cohorts.map(\.size).reduce(0, +) > 0)
        for c in whole.cohorts {
            let parts = rows.filter { $0.cohort.start == c.start }.map(\.cohort)
            #expect(parts.map(\.size).reduce(0, +) == c.size, "\(c.start)")
            for k in c.retained.indices { #expect(parts.map { $0.retained[k] }.reduce(0, +) == c.retained[k], "\(c.start) month \(k)") }
        }
    }

    /// Trials by group add up to all trials (a trial counts once, in its transaction's group); without
    /// dimensions the grouped accumulator is the plain one.
    @Test(arguments: [nil, .store, .country, .productID] as [ReportDimension?])
    func groupedTrialsAddUpToTheWhole(dimension: ReportDimension?) {
        let boundaries = Self.grids[0]
        var whole = TrialAccumulator(boundaries: boundaries)
        var grouped = GroupedTrialAccumulator(boundaries: boundaries, dimensions: ReportDimensions(groupBy: dimension))
        var started = 0
        for facts in Self.population {
            for rows in Dictionary(grouping: facts.trials, by: \.eventID).values {
                whole.add(start: rows[0].start, converted: rows.contains(where: \.converted))
                grouped.add(rows)
                started += 1
            }
        }
        #expect(started > 0 && Self.population.contains { $0.trials.contains { $0.store == "apple" } })
        let rows = grouped.periods
        if dimension == nil { #expect(rows.map(\.period) == whole.periods) }
        for p in whole.periods {
            let parts = rows.filter { $0.period.start == p.start }.map(\.period)
            #expect(parts.map(\.started).reduce(0, +) == p.started && parts.map(\.converted).reduce(0, +) == p.converted, "\(p.start)")
        }
    }

    @Test func filtersAreAnyOfAndEveryFilterMustPass() {
        var t = RevenueTransaction(
            eventID: UUID(), entitlements: ["pro"], kind: .paid, currency: "USD", gross: 1, commission: 0, occurredAt: B.t("2026-01-01"),
            start: B.t("2026-01-01"), end: nil, stop: nil, refunds: [], monthly: nil, store: "apple", productID: "p")
        #expect(ReportDimensions(stores: ["apple", "google"]).matches(t))
        #expect(!ReportDimensions(stores: ["apple"], countries: ["DE"]).matches(t), "an unknown country matches no country")
        t.country = "DE"
        #expect(ReportDimensions(stores: ["apple"], countries: ["DE", "FR"], productIDs: ["p"], entitlements: ["pro"]).matches(t))
        #expect(!ReportDimensions(entitlements: ["basic"]).matches(t))
        #expect(ReportDimensions(entitlements: ["pro"]).rollupEntitlement == .some("pro"))
        #expect(ReportDimensions.none.rollupEntitlement == .some(nil))
        #expect(ReportDimensions(entitlements: ["pro", "basic"]).rollupEntitlement == nil)
        #expect(ReportDimensions(groupBy: .country).groups(of: t) == ["DE"])
    }

    @Test func appleStorefrontsMapToAlpha2() {
        #expect(Countries.alpha2(fromAlpha3: "USA") == "US")
        #expect(Countries.alpha2(fromAlpha3: "DEU") == "DE")
        #expect(Countries.alpha2(fromAlpha3: "GBR") == "GB")
        #expect(Countries.alpha2(fromAlpha3: "JPN") == "JP")
        #expect(Countries.alpha2(fromAlpha3: "XKS") == "XK")
        #expect(Countries.alpha2(fromAlpha3: "ZZZ") == nil)
        #expect(Countries.alpha3To2.count >= 249)
        #expect(Countries.alpha3To2.values.allSatisfy(Countries.isValidAlpha2))
    }
}
