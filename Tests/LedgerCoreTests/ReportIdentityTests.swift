import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

/// The identities of docs/semantics.md sections 5–6 on generated populations, for every period of several grids.
@Suite struct ReportIdentityTests {
    typealias B = StreamBuilder

    static let population: [SubscriberFacts] = (0..<400).map { seed in
        let events = RandomHistory.make(seed: UInt64(seed) &* 7919 &+ 17)
        return SubscriberFacts.derive(events: events, ledger: Fold.fold(events))
    }

    static let grids: [[Timestamp]] = [
        ReportCalendar.boundaries(from: B.t("2025-12-01"), to: B.t("2027-03-01"), interval: .month),
        ReportCalendar.boundaries(from: B.t("2025-12-01"), to: B.t("2027-03-01"), interval: .week),
        ReportCalendar.boundaries(from: B.t("2026-02-10"), to: B.t("2026-07-01"), interval: .day),
    ]

    @Test(arguments: 0..<3, ["", "pro", "basic"])
    func churnIdentitiesHoldForEveryPeriod(grid: Int, entitlement: String) {
        var acc = ChurnAccumulator(boundaries: Self.grids[grid])
        for facts in Self.population {
            let runs = facts.runs.filter { $0.entitlement == entitlement }
            if let first = runs.first { acc.add(runs: runs, firstStart: first.start) }
        }
        var churned = 0
        for (i, p) in acc.periods.enumerated() {
            #expect(p.activeEnd == p.activeStart + p.new + p.reactivated - p.churnedTotal, "period \(p.start)")
            if i > 0 { #expect(p.activeStart == acc.periods[i - 1].activeEnd, "chain at \(p.start)") }
            churned += p.churnedTotal
        }
        #expect(churned > 0, "the population churns at all")
    }

    @Test(arguments: 0..<3)
    func revenueIdentitiesHoldForEveryPeriodAndCurrency(grid: Int) {
        var acc = RevenueAccumulator(boundaries: Self.grids[grid])
        for facts in Self.population { for t in facts.transactions { acc.add(t) } }
        var previous: [String: Int128] = [:]
        for row in acc.periods {
            let f = row.figures
            #expect(row.deferredEnd == row.deferredStart + f.billings - f.recognized - f.refundedUnrecognized)
            #expect(f.refunds == f.refundedUnrecognized + f.refundsRecognized)
            #expect(f.proceeds == f.billings - f.commission)
            if let p = previous[row.currency] { #expect(row.deferredStart == p, "deferred chains in \(row.currency)") }
            previous[row.currency] = row.deferredEnd
        }
    }

    /// Every transaction's recognised parts plus its refunded deferred money sum to its gross, exactly,
    /// whatever the grid: the per-period parts telescope.
    @Test func noCentIsLostToRounding() {
        var r = SplitMix64(seed: 42)
        for facts in Self.population {
            for t in facts.transactions {
                let schedule = RevenueSchedule(t)
                let far = Timestamp(microseconds: t.settledAt.microseconds + 1)
                let total = schedule.cumulative(before: far)
                #expect(total.recognized + total.refundedUnrecognized == t.gross, "\(t.eventID)")
                var cuts = (0..<20).map { _ in
                    Timestamp(microseconds: t.start.microseconds - 86_400_000_000 + Int64(r.int(0...(90 * 86_400))) * 1_000_000)
                }
                cuts = ([Timestamp(microseconds: 0)] + cuts + [far]).sorted()
                let parts = zip(cuts, cuts.dropFirst()).map { a, b in
                    schedule.cumulative(before: b).recognized - schedule.cumulative(before: a).recognized
                }
                #expect(parts.reduce(0, +) == total.recognized)
            }
        }
    }

    /// A month is the sum of its days: grids of different sizes agree.
    @Test func gridsAgree() {
        let months = ReportCalendar.boundaries(from: B.t("2026-03-01"), to: B.t("2026-06-01"), interval: .month)
        let days = ReportCalendar.boundaries(from: B.t("2026-03-01"), to: B.t("2026-06-01"), interval: .day)
        var m = RevenueAccumulator(boundaries: months)
        var d = RevenueAccumulator(boundaries: days)
        for facts in Self.population {
            for t in facts.transactions {
                m.add(t)
                d.add(t)
            }
        }
        for row in m.periods {
            let inside = d.periods.filter { $0.currency == row.currency && $0.start >= row.start && $0.end <= row.end }
            #expect(inside.map(\.figures.recognized).reduce(0, +) == row.figures.recognized)
            #expect(inside.map(\.figures.billings).reduce(0, +) == row.figures.billings)
            #expect(inside.first?.deferredStart == row.deferredStart)
        }
    }
}
