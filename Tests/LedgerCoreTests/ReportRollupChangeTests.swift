import Foundation
import LedgerTestSupport
import PropertyBased
import Testing

@testable import LedgerCore

/// `ReportRollup.change` skips what did not change (the transactions both fact sets share, coverage that
/// stays the same, runs that stay the same); these tests hold it to the plain definition: every old cell
/// taken off, every new one added, the zeros dropped.
@Suite("Report rollups: the change an append makes")
struct ReportRollupChangeTests {
    /// The change as defined: the old facts' cells taken off and the new ones' added, part by part.
    static func plainChange(from old: SubscriberFacts?, to new: SubscriberFacts) -> ReportRollup {
        var r = ReportRollup()
        let oldTransactions = Set(old?.transactions ?? [])
        let newTransactions = Set(new.transactions)
        for t in old?.transactions ?? [] where !newTransactions.contains(t) {
            r.addRevenue(t, sign: -1)
            r.addMRR(t, sign: -1)
            r.addRefunds(t, sign: -1)
            if ReportRollup.rollsUpDays(t) { r.pendingRevenue[t, default: 0] &-= 1 }
        }
        for t in new.transactions where !oldTransactions.contains(t) {
            r.addRevenue(t, sign: 1)
            r.addMRR(t, sign: 1)
            r.addRefunds(t, sign: 1)
            if ReportRollup.rollsUpDays(t) { r.pendingRevenue[t, default: 0] &+= 1 }
        }
        if let old { r.addCoverage(old.transactions, sign: -1) }
        r.addCoverage(new.transactions, sign: 1)
        if let old { r.addSubscriberCells(old, sign: -1) }
        r.addSubscriberCells(new, sign: 1)
        if let old { r.addTrials(old.trials, sign: -1) }
        r.addTrials(new.trials, sign: 1)
        for (key, runs) in Dictionary(grouping: old?.runs ?? [], by: \.entitlement) { r.addRuns(runs, key: key, sign: -1) }
        for (key, runs) in Dictionary(grouping: new.runs, by: \.entitlement) { r.addRuns(runs, key: key, sign: 1) }
        r.prune()
        return r
    }

    static func facts(_ events: [RecordedEvent]) -> SubscriberFacts {
        SubscriberFacts.derive(events: events, ledger: Fold.fold(events))
    }

    @Test("on random histories, the change from any earlier state of the stream equals the plain definition")
    func changeFromEarlierStates() async {
        await propertyCheck(count: 200, input: Gen.int(in: 0...Int.max)) { seed in
            let events = RandomHistory.make(seed: UInt64(seed)).sorted { $0.position < $1.position }
            let new = Self.facts(events)
            #expect(ReportRollup.change(from: nil, to: new) == Self.plainChange(from: nil, to: new))
            #expect(ReportRollup.change(from: new, to: new) == ReportRollup())
            for cut in Set([0, events.count / 2, events.count - 1]) where cut > 0 {
                let old = Self.facts(Array(events[..<cut]))
                #expect(ReportRollup.change(from: old, to: new) == Self.plainChange(from: old, to: new))
                #expect(ReportRollup.change(from: new, to: old) == Self.plainChange(from: new, to: old))
            }
        }
    }

    @Test("two unrelated histories: transactions in neither order nor common, long enough for the set look-up")
    func changeBetweenUnrelatedFacts() async {
        await propertyCheck(count: 100, input: Gen.int(in: 0...Int.max)) { seed in
            let a = Self.facts(RandomHistory.make(seed: UInt64(seed), count: 40))
            let b = Self.facts(RandomHistory.make(seed: UInt64(seed) &+ 1, count: 40))
            #expect(ReportRollup.change(from: a, to: b) == Self.plainChange(from: a, to: b))
        }
    }

    @Test("the transactions' difference is a set difference, duplicates and order included")
    func transactionDifference() {
        let t = Self.facts(RandomHistory.make(seed: 7, count: 40)).transactions
        #expect(t.count >= 3)
        let (x, y, z) = (t[0], t[1], t[2])
        #expect(ReportRollup.difference([x, y], [x, y, z]) == ([], [z]))
        #expect(ReportRollup.difference([x, y, z], [x, z]) == ([y], []))
        #expect(ReportRollup.difference([x, y], [y, x]) == ([], []))
        #expect(ReportRollup.difference([x, x], []) == ([x, x], []))
        #expect(ReportRollup.difference([x, x], [x]) == ([], []))
        #expect(ReportRollup.difference(t, Array(t.reversed())) == ([], []))
        #expect(ReportRollup.difference(t, Array(t.dropFirst())) == ([x], []))
    }
}
