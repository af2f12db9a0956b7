import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Reports II on PostgreSQL")
struct ReportsIIStoreTests {
    @Test("MRR movement, LTV, refunds and conversion from the facts equal the accumulators over a fresh fold, converted too")
    func reportsMatchTheFold() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let events = try await ReportStoreTests.appendGenerated(store, seed: 23, subscribers: 80)
            let facts = try await ReportStoreTests.referenceFacts(store, Set(events.map(\.subscriberID)).sorted())
            let reports = ReportStore(client: client, logger: TestDatabase.logger)
            let t = ReportStoreTests.t
            let grids = [
                ReportCalendar.boundaries(from: t("2025-12-01"), to: t("2027-02-01"), interval: .month),
                ReportCalendar.boundaries(from: t("2026-02-09"), to: t("2026-08-03"), interval: .week),
                ReportCalendar.boundaries(from: t("2026-03-01"), to: t("2026-05-01"), interval: .day),
            ]
            var moved = 0
            for boundaries in grids {
                for key in ["", "pro"] {
                    let entitlement = key.isEmpty ? nil : key
                    let movement = try await reports.mrrMovement(boundaries: boundaries, entitlement: entitlement)
                    let expectedMovement = try ReportsIIFeed.movement(facts, boundaries, key: key)
                    let firstDifference =
                        zip(movement, expectedMovement).first { $0 != $1 }.map { "\($0)\n vs \($1)" }
                        ?? "\(movement.count) vs \(expectedMovement.count) rows"
                    #expect(movement == expectedMovement, "movement \(key) \(boundaries.count): \(firstDifference)")
                    moved += movement.map { $0.figures.count(.new) + $0.figures.count(.churned) }.reduce(0, +)
                    let refunds = try await reports.refunds(boundaries: boundaries, entitlement: entitlement)
                    #expect(refunds == (try ReportsIIFeed.refunds(facts, boundaries, key: key)), "refunds \(key) \(boundaries.count)")
                    let conversion = try await reports.conversion(boundaries: boundaries, days: [1, 7, 30], entitlement: entitlement)
                    #expect(conversion == ReportsIIFeed.conversion(facts, boundaries, days: [1, 7, 30], key: key))
                    #expect(conversion.map(\.subscribers).reduce(0, +) > 0 || boundaries.count < 40)
                }
            }
            #expect(moved > 0)
            for key in ["", "pro"] {
                let (from, to, until) = (t("2025-10-01"), t("2026-12-01"), t("2027-03-01"))
                let ltv = try await reports.ltv(from: from, to: to, months: 12, until: until, entitlement: key.isEmpty ? nil : key)
                #expect(ltv == (try ReportsIIFeed.ltv(facts, from: from, to: to, months: 12, until: until, key: key)), "ltv \(key)")
                #expect(!ltv.isEmpty)
            }

            // Converted, with random rates: the same as the accumulators with the same table.
            let fx = FXStore(client: client, logger: TestDatabase.logger)
            #expect(try await fx.upload(ConvertedReportStoreTests.rates(seed: 5), origin: "cli", label: "rates").version == 1)
            let table = try await fx.table(version: 1, currencies: ["USD", "JPY"])
            let months = grids[0]
            for target in ["EUR", "JPY"] {
                let use = FXUse(currency: target, version: 1)
                let reporting = ReportingCurrency(currency: target, rates: table)
                #expect(
                    try await reports.mrrMovement(boundaries: months, entitlement: nil, converting: use)
                        == (try ReportsIIFeed.movement(facts, months, key: "", reporting: reporting)))
                #expect(
                    try await reports.refunds(boundaries: months, entitlement: nil, converting: use)
                        == (try ReportsIIFeed.refunds(facts, months, key: "", reporting: reporting)))
                let (from, to, until) = (t("2025-10-01"), t("2026-12-01"), t("2027-03-01"))
                #expect(
                    try await reports.ltv(from: from, to: to, months: 12, until: until, entitlement: nil, converting: use)
                        == (try ReportsIIFeed.ltv(facts, from: from, to: to, months: 12, until: until, key: "", reporting: reporting)))
            }
            // A currency without rates refuses, naming it.
            await #expect(throws: FXRequestError.self) {
                _ = try await reports.mrrMovement(boundaries: months, entitlement: nil, converting: FXUse(currency: "GBP", version: 1))
            }
        }
    }

    @Test("Reports II filtered and grouped from PostgreSQL equal the grouped accumulators over the fold, and the groups add up")
    func dimensionsMatchTheFold() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let events = try await ReportStoreTests.appendGenerated(store, seed: 11, subscribers: 80)
            let facts = try await ReportStoreTests.referenceFacts(store, Set(events.map(\.subscriberID)).sorted())
            let reports = ReportStore(client: client, logger: TestDatabase.logger)
            let t = ReportStoreTests.t
            let months = ReportCalendar.boundaries(from: t("2025-12-01"), to: t("2027-02-01"), interval: .month)
            let (from, to, until) = (t("2025-10-01"), t("2026-12-01"), t("2027-03-01"))
            let all: [ReportDimensions] = [
                .none, .only("pro"), ReportDimensions(groupBy: .store), ReportDimensions(groupBy: .country), ReportDimensions(groupBy: .productID),
                ReportDimensions(groupBy: .entitlement), ReportDimensions(countries: ["DE", "JP"], groupBy: .productID),
                ReportDimensions(stores: ["apple"]), ReportDimensions(entitlements: ["pro", "basic"]),
                ReportDimensions(entitlements: ["pro"], groupBy: .store),
            ]
            for d in all {
                let movement = try await reports.mrrMovement(boundaries: months, dimensions: d)
                let movementFeed = try ReportsIIFeed.movement(facts, months, d)
                #expect(movement.map(\.group) == movementFeed.map(\.group) && movement.map(\.row) == movementFeed.map(\.period), "\(d)")
                #expect(movement.allSatisfy { ReportsIIFeed.identityHolds($0.row.figures) }, "the movement identity within each group: \(d)")
                let ltv = try await reports.ltv(from: from, to: to, months: 12, until: until, dimensions: d)
                let ltvFeed = try ReportsIIFeed.ltv(facts, from: from, to: to, months: 12, until: until, d)
                #expect(ltv.map(\.group) == ltvFeed.map(\.group) && ltv.map(\.row) == ltvFeed.map(\.cohort), "\(d)")
                let refunds = try await reports.refunds(boundaries: months, dimensions: d)
                let refundsFeed = try ReportsIIFeed.refunds(facts, months, d)
                #expect(refunds.map(\.group) == refundsFeed.map(\.group) && refunds.map(\.row) == refundsFeed.map(\.period), "\(d)")
                let conversion = try await reports.conversion(boundaries: months, days: [1, 7, 30], dimensions: d)
                let conversionFeed = ReportsIIFeed.conversion(facts, months, days: [1, 7, 30], d)
                #expect(
                    conversion.map(\.group) == conversionFeed.map(\.group) && conversion.map(\.row) == conversionFeed.map(\.period), "\(d)")
            }

            // Without dimensions the grouped reports are the plain ones; by store, country and product the groups
            // add up to the whole wherever the report says they do.
            let wholeMovement = try await reports.mrrMovement(boundaries: months, entitlement: nil)
            #expect(wholeMovement == (try ReportsIIFeed.movement(facts, months, key: "")))
            let wholeLTV = try await reports.ltv(from: from, to: to, months: 12, until: until, entitlement: nil)
            let wholeRefunds = try await reports.refunds(boundaries: months, entitlement: nil)
            let wholeConversion = try await reports.conversion(boundaries: months, days: [1, 7, 30], entitlement: nil)
            for dimension in [ReportDimension.store, .country, .productID] {
                let d = ReportDimensions(groupBy: dimension)
                let movement = try await reports.mrrMovement(boundaries: months, dimensions: d)
                #expect(Set(movement.map(\.group)).count > 1, "\(dimension)")
                for row in wholeMovement {
                    let parts = movement.map(\.row).filter { $0.start == row.start && $0.currency == row.currency }
                    // A subscriber holding transactions of two groups at once counts in both (as in the MRR report).
                    #expect(parts.map(\.figures.subscribersEnd).reduce(0, +) >= row.figures.subscribersEnd, "\(dimension)")
                    // MRR is rounded once per group: within half a minor unit per group.
                    #expect(abs(parts.map(\.figures.mrrEnd).reduce(0, +) - row.figures.mrrEnd) * 2 <= Int128(parts.count), "\(dimension)")
                }
                let ltv = try await reports.ltv(from: from, to: to, months: 12, until: until, dimensions: d)
                for c in wholeLTV {
                    let parts = ltv.map(\.row).filter { $0.start == c.start && $0.currency == c.currency }
                    #expect(parts.map(\.size).reduce(0, +) == c.size, "\(dimension) LTV sizes")
                    for k in c.gross.indices { #expect(parts.map { $0.gross[k] }.reduce(0, +) == c.gross[k], "\(dimension) LTV gross month \(k)") }
                }
                let refunds = try await reports.refunds(boundaries: months, dimensions: d)
                for p in wholeRefunds {
                    let parts = refunds.map(\.row).filter { $0.start == p.start && $0.currency == p.currency }
                    #expect(parts.map(\.amount).reduce(0, +) == p.amount && parts.map(\.refunds).reduce(0, +) == p.refunds)
                    #expect(parts.map(\.paidTransactions).reduce(0, +) == p.paidTransactions)
                }
                let conversion = try await reports.conversion(boundaries: months, days: [1, 7, 30], dimensions: d)
                for p in wholeConversion {
                    let parts = conversion.map(\.row).filter { $0.start == p.start }
                    #expect(parts.map(\.subscribers).reduce(0, +) == p.subscribers, "\(dimension) conversion subscribers")
                    for k in 0..<3 { #expect(parts.map { $0.converted[k] }.reduce(0, +) == p.converted[k]) }
                }
                // A filter is its group's rows.
                if let value = refunds.compactMap(\.group).first {
                    var filter = ReportDimensions()
                    switch dimension {
                    case .store: filter.stores = [value]
                    case .country: filter.countries = [value]
                    case .productID: filter.productIDs = [value]
                    case .entitlement: filter.entitlements = [value]
                    }
                    let filtered = try await reports.refunds(boundaries: months, dimensions: filter)
                    let group = refunds.filter { $0.group == value }.map(\.row)
                    #expect(
                        filtered.map(\.row).filter { $0.refunds + $0.paidTransactions > 0 } == group.filter { $0.refunds + $0.paidTransactions > 0 })
                    let filteredConversion = try await reports.conversion(boundaries: months, days: [7], dimensions: filter)
                    let groupConversion = try await reports.conversion(boundaries: months, days: [7], dimensions: d)
                    #expect(filteredConversion.map(\.row) == groupConversion.filter { $0.group == value }.map(\.row))
                }
            }
        }
    }
}
