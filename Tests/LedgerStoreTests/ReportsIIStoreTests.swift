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
                    #expect(movement == (try ReportsIIFeed.movement(facts, boundaries, key: key)), "movement \(key) \(boundaries.count)")
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
}
