import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Reports in a reporting currency on PostgreSQL")
struct ConvertedReportStoreTests {
    /// Random rates (USD and JPY per EUR) for the generated ledger's span, some days missing, never a week.
    static func rates(seed: UInt64) -> [FXRateRow] {
        var r = SplitMix64(seed: seed)
        var rows: [FXRateRow] = []
        let first = FXDay(iso: "2025-10-01")!
        for day in first.days..<(first.days + 700) where r.int(0...5) != 0 {
            rows.append(FXRateRow(day: FXDay(days: day), currency: "USD", rate: FXRate("1.\(r.int(0...9999))")!))
            rows.append(FXRateRow(day: FXDay(days: day), currency: "JPY", rate: FXRate("\(r.int(100...200)).\(r.int(0...99))")!))
        }
        return rows
    }

    @Test("converted revenue and MRR from the facts equal the accumulators over a fresh fold, at each rate version")
    func convertedReportsMatchTheFold() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let events = try await ReportStoreTests.appendGenerated(store, seed: 11, subscribers: 60)
            let facts = try await ReportStoreTests.referenceFacts(store, Set(events.map(\.subscriberID)).sorted())
            let transactions = facts.flatMap(\.transactions)
            #expect(Set(transactions.map(\.currency)) == ["USD", "EUR"])
            let fx = FXStore(client: client, logger: TestDatabase.logger)
            let first = Self.rates(seed: 1)
            #expect(try await fx.upload(first, origin: "cli", label: "first").version == 1)
            // Version 2 corrects every USD rate of one month.
            let corrected = first.filter { $0.currency == "USD" && $0.day.description.hasPrefix("2026-04") }.map {
                FXRateRow(day: $0.day, currency: "USD", rate: FXRate(units: $0.rate.units + 7, decimals: $0.rate.decimals))
            }
            let second = try await fx.upload(corrected, origin: "cli", label: "second")
            #expect(second.version == 2 && second.corrected == corrected.count)

            let reports = ReportStore(client: client, logger: TestDatabase.logger)
            let months = ReportCalendar.boundaries(
                from: ReportStoreTests.t("2025-12-01"), to: ReportStoreTests.t("2027-02-01"), interval: .month)
            for version in [Int64(1), 2] {
                let table = try await fx.table(version: version, currencies: ["USD", "JPY"])
                for target in ["EUR", "USD", "JPY"] {
                    var acc = RevenueAccumulator(boundaries: months)
                    acc.include(currency: target)
                    for t in transactions {
                        try acc.add(t, currency: target, factor: try table.factor(from: t.currency, to: target, on: FXDay(t.occurredAt)))
                    }
                    let stored = try await reports.revenue(
                        boundaries: months, entitlement: nil, converting: FXUse(currency: target, version: version))
                    #expect(stored == acc.periods, "revenue in \(target) at version \(version)")
                    // Midnights, and instants nearer the day's start or end (the cells' boundary is the nearest midnight).
                    for at in ["2026-03-15T00:00:00Z", "2026-04-20T13:45:00Z", "2026-09-01T06:00:00Z", "2026-06-30T23:59:59.999999Z"] {
                        let instant = try Timestamp(rfc3339: at)
                        var groups: [ConvertedMRR.Group] = []
                        var subscribers = Set<String>()
                        for (n, f) in facts.enumerated() {
                            for t in f.transactions {
                                guard let monthly = t.monthly, t.serviceStart <= instant, t.serviceEnd.map({ $0 > instant }) ?? true else {
                                    continue
                                }
                                groups.append(.init(currency: t.currency, day: FXDay(t.occurredAt), amount: monthly))
                                subscribers.insert("\(n)")
                            }
                        }
                        let line = try await reports.mrr(at: instant, entitlement: nil, converting: FXUse(currency: target, version: version))
                        #expect(line.mrrMinor == (try ConvertedMRR.total(groups, into: target, rates: table)), "MRR in \(target) at \(at)")
                        #expect(line.activePaid == subscribers.count)
                    }
                }
            }
            // From the cells (schema 0035) as from the facts, for every entitlement key, at the instants where
            // services start and end (the edges of "covers") and a microsecond either side of them.
            let facts2 = ReportStore(client: client, logger: TestDatabase.logger, rollups: false)
            let entitlements = Set(transactions.flatMap(\.entitlements)).sorted()
            var instants = Set<Int64>()
            for t in transactions.prefix(40) {
                for x in [t.serviceStart.microseconds] + (t.serviceEnd.map { [$0.microseconds] } ?? []) {
                    instants.formUnion([x - 1, x, x + 1])
                }
            }
            var compared = 0
            for us in instants.sorted() {
                for key in [nil] + entitlements.map(Optional.some) {
                    let use = FXUse(currency: "EUR", version: 2)
                    let instant = Timestamp(microseconds: us)
                    var fromFacts: MRRLine?
                    var refused = false
                    do { fromFacts = try await facts2.mrr(at: instant, entitlement: key, converting: use) } catch is FXRequestError { refused = true }
                    if refused {
                        await #expect(throws: FXRequestError.self) { _ = try await reports.mrr(at: instant, entitlement: key, converting: use) }
                    } else {
                        #expect(
                            try await reports.mrr(at: instant, entitlement: key, converting: use) == fromFacts, "MRR in EUR at \(us), \(key ?? "all")"
                        )
                        compared += 1
                    }
                }
            }
            #expect(compared > 100)
            // A date without a rate refuses the report, naming the currency and the date.
            await #expect(throws: FXRequestError.self) {
                _ = try await reports.revenue(boundaries: months, entitlement: nil, converting: FXUse(currency: "GBP", version: 2))
            }
        }
    }
}
