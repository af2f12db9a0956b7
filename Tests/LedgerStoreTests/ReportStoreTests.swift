import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Reports on PostgreSQL")
struct ReportStoreTests {
    static func t(_ s: String) -> Timestamp { try! Timestamp(rfc3339: s + "T00:00:00Z") }

    /// The facts of every subscriber, folded in memory from the stored log (the reference the SQL path must match).
    /// A generated ledger appended in batches of nine (several subscribers per append), returned as generated.
    static func appendGenerated(_ store: EventStore, seed: UInt64, subscribers: Int) async throws -> [NewEvent] {
        let events = GeneratedLedger.events(seed: seed, subscribers: subscribers, eventsPerSubscriber: 1...20)
        var i = 0
        while i < events.count {
            let batch = Array(events[i..<min(events.count, i + 9)])
            _ = try await store.append(batch)
            i += batch.count
        }
        return events
    }

    static func referenceFacts(_ store: EventStore, _ subscribers: [String]) async throws -> [SubscriberFacts] {
        var all: [SubscriberFacts] = []
        for s in subscribers {
            let events = try await store.stream(subscriberID: s, afterVersion: 0, limit: 1000)
            all.append(SubscriberFacts.derive(events: events, ledger: Fold.fold(events)))
        }
        return all
    }

    @Test("reports computed from the kept facts equal the fold of the log, late events included")
    func reportsMatchTheFold() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let events = try await ReportStoreTests.appendGenerated(store, seed: 7, subscribers: 80)
            let subscribers = Set(events.map(\.subscriberID)).sorted()
            let facts = try await Self.referenceFacts(store, subscribers)
            let reports = ReportStore(client: client, logger: TestDatabase.logger)
            let months = ReportCalendar.boundaries(from: Self.t("2025-12-01"), to: Self.t("2027-02-01"), interval: .month)

            for entitlement in [nil, "pro", "basic"] as [String?] {
                var churn = ChurnAccumulator(boundaries: months)
                for f in facts {
                    let runs = f.runs.filter { $0.entitlement == (entitlement ?? "") }
                    if let first = runs.first { churn.add(runs: runs, firstStart: first.start) }
                }
                let stored = try await reports.churn(boundaries: months, entitlement: entitlement)
                #expect(stored == churn.periods, "churn for \(entitlement ?? "all")")
            }
            #expect(try await reports.churn(boundaries: months, entitlement: nil).contains { $0.activeEnd > 0 })

            var revenue = RevenueAccumulator(boundaries: months)
            for f in facts { for t in f.transactions { revenue.add(t) } }
            #expect(try await reports.revenue(boundaries: months, entitlement: nil) == revenue.periods)
            #expect(!revenue.periods.isEmpty)

            var trials = TrialAccumulator(boundaries: months)
            for f in facts {
                for (id, group) in Dictionary(grouping: f.trials, by: \.eventID) {
                    _ = id
                    trials.add(start: group.map(\.start).min()!, converted: group.contains(where: \.converted))
                }
            }
            #expect(try await reports.trials(boundaries: months, entitlement: nil) == trials.periods)

            let at = Self.t("2026-05-01")
            let covering = facts.flatMap(\.transactions).filter {
                $0.monthly != nil && $0.start <= at && ($0.serviceEnd.map { at < $0 } ?? true)
            }
            let mrr = try await reports.mrr(at: at, entitlement: nil)
            for line in mrr {
                #expect(try line.mrrMinor == MonthlyAmount.roundedSum(covering.filter { $0.currency == line.currency }.compactMap(\.monthly)))
            }
            #expect(Set(mrr.map(\.currency)) == Set(covering.map(\.currency)))

            let cohorts = try await reports.retention(
                from: Self.t("2026-01-01"), to: Self.t("2026-07-01"), until: Self.t("2026-12-01"), entitlement: nil)
            var retention = RetentionAccumulator(from: Self.t("2026-01-01"), to: Self.t("2026-07-01"), until: Self.t("2026-12-01"))
            for f in facts { retention.add(runs: f.runs.filter { $0.entitlement == "" }) }
            #expect(cohorts == retention.cohorts)
        }
    }

    @Test("reports filtered and grouped by store, country and product from PostgreSQL equal the accumulators over the fold")
    func dimensionReportsMatchTheFold() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let events = GeneratedLedger.events(seed: 11, subscribers: 80, eventsPerSubscriber: 1...20)
            for i in stride(from: 0, to: events.count, by: 9) { _ = try await store.append(Array(events[i..<min(events.count, i + 9)])) }
            let facts = try await Self.referenceFacts(store, Set(events.map(\.subscriberID)).sorted())
            let reports = ReportStore(client: client, logger: TestDatabase.logger)
            let months = ReportCalendar.boundaries(from: Self.t("2025-12-01"), to: Self.t("2027-02-01"), interval: .month)
            for dimensions in [
                ReportDimensions(groupBy: .store), ReportDimensions(groupBy: .country),
                ReportDimensions(countries: ["DE", "JP"], groupBy: .productID),
                ReportDimensions(stores: ["apple"]), ReportDimensions(entitlements: ["pro", "basic"]),
            ] {
                var revenue = GroupedRevenueAccumulator(boundaries: months, dimensions: dimensions)
                for f in facts { for t in f.transactions { try revenue.add(t) } }
                let storedRevenue = try await reports.revenue(boundaries: months, interval: .month, dimensions: dimensions)
                #expect(storedRevenue.map(\.group) == revenue.periods.map(\.group), "\(dimensions)")
                #expect(storedRevenue.map(\.row) == revenue.periods.map(\.period), "\(dimensions)")

                var churn = GroupedChurnAccumulator(boundaries: months, dimensions: dimensions)
                var retention = GroupedRetentionAccumulator(
                    from: Self.t("2026-01-01"), to: Self.t("2026-07-01"), until: Self.t("2026-12-01"), dimensions: dimensions)
                var trials = GroupedTrialAccumulator(boundaries: months, dimensions: dimensions)
                for f in facts {
                    let runs = f.runs.filter { $0.entitlement == "" }
                    if let first = runs.first {
                        churn.add(runs: runs, firstStart: first.start, services: RunServices.of(f, runs))
                        retention.add(runs: runs, services: RunServices.of(f, runs))
                    }
                    for rows in Dictionary(grouping: f.trials, by: \.eventID).values { trials.add(rows.sorted { $0.entitlement < $1.entitlement }) }
                }
                let storedChurn = try await reports.churn(boundaries: months, interval: .month, dimensions: dimensions)
                #expect(
                    storedChurn.map(\.group) == churn.periods.map(\.group) && storedChurn.map(\.row) == churn.periods.map(\.period), "\(dimensions)")
                let storedRetention = try await reports.retention(
                    from: Self.t("2026-01-01"), to: Self.t("2026-07-01"), until: Self.t("2026-12-01"), dimensions: dimensions)
                #expect(storedRetention.map(\.row) == retention.cohorts.map(\.cohort), "\(dimensions)")
                let storedTrials = try await reports.trials(boundaries: months, interval: .month, dimensions: dimensions)
                #expect(storedTrials.map(\.row) == trials.periods.map(\.period), "\(dimensions)")
            }
            // MRR by store adds up to MRR, per currency.
            let at = Self.t("2026-05-01")
            let whole = try await reports.mrr(at: at, entitlement: nil)
            let byStore = try await reports.mrr(at: at, dimensions: ReportDimensions(groupBy: .store))
            #expect(Set(byStore.compactMap(\.group)).count > 1)
            for line in whole {
                let parts = byStore.filter { $0.row.currency == line.currency }.map(\.row)
                let difference = parts.map(\.mrrMinor).reduce(0, +) - line.mrrMinor
                #expect(abs(difference) * 2 <= Int128(parts.count), "each group rounded once: within half a minor unit per group")
                #expect(parts.map(\.activePaid).reduce(0, +) >= line.activePaid)
            }
        }
    }

    @Test("a late refund moves churn and revenue as soon as it is appended")
    func lateEventsChangeReports() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let reports = ReportStore(client: client, logger: TestDatabase.logger)
            _ = try await store.append([SampleEvents.purchase(subscriber: "late-1", key: "p1", occurredAt: "2026-01-01T00:00:00Z")])
            let months = ReportCalendar.boundaries(from: Self.t("2026-01-01"), to: Self.t("2026-03-01"), interval: .month)
            let before = try await reports.revenue(boundaries: months, entitlement: nil)
            #expect(before.map(\.figures.billings) == [999, 0])
            #expect(before.allSatisfy { $0.figures.refunds == 0 })
            #expect(try await reports.churn(boundaries: months, entitlement: "pro")[0].new == 1)
            _ = try await store.append([
                SampleEvents.event(
                    subscriber: "late-1", type: "refund", key: "r1", occurredAt: "2026-01-16T12:00:00Z",
                    data: ["transaction_id": "t-p1", "amount_minor": 999, "currency": "USD", "reason": "customer"])
            ])
            let after = try await reports.revenue(boundaries: months, entitlement: nil)
            #expect(after[0].figures.refunds == 999)
            #expect(after[0].figures.recognized + after[0].figures.refundedUnrecognized == 999)
            #expect(after[1].figures.recognized == 0 && after[1].deferredEnd == 0)
            let churn = try await reports.churn(boundaries: months, entitlement: "pro")
            #expect(churn[0].new == 0 && churn[0].activeEnd == 0)
        }
    }
}
