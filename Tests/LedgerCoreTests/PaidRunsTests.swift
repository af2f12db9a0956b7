import Foundation
import LedgerTestSupport
import PropertyBased
import Testing

@testable import LedgerCore

/// `SubscriberFacts.paidRuns` sorts the windows once and, for a subscriber with one entitlement, takes that
/// entitlement's runs from the runs over all entitlements; these tests hold it to the plain definition: for
/// the empty key and then each entitlement in order, the components of that key's windows sorted by start.
@Suite("Report facts: paid runs")
struct PaidRunsTests {
    /// The runs as defined, key by key, each key's windows sorted on their own.
    static func plainRuns(windows: [Window], events: [FoldEvent]) -> [PaidRun] {
        let relevant = windows.filter { $0.kind.isPaid || $0.kind == .grace }
        let byEntitlement = Dictionary(grouping: relevant, by: \.entitlement)
        let index = SubscriberFacts.LapseIndex(events: events)
        var runs: [PaidRun] = []
        for key in [""] + byEntitlement.keys.sorted() {
            var component: [Window] = []
            var end: Timestamp?
            func close() {
                defer { component = [] }
                guard component.contains(where: \.kind.isPaid), let first = component.first else { return }
                let lapse = end.map { SubscriberFacts.lapse(of: component, at: $0, index: index) }
                runs.append(PaidRun(entitlement: key, start: first.start, end: end, lapse: lapse))
            }
            for w in (key.isEmpty ? relevant : byEntitlement[key] ?? []).sorted(by: { $0.start < $1.start }) {
                if !component.isEmpty, let e = end, w.start > e { close() }
                if component.isEmpty {
                    end = w.end
                } else if let e = end {
                    end = w.end.map { max($0, e) }
                }
                component.append(w)
            }
            close()
        }
        return runs
    }

    @Test("on random histories of one or two entitlements, the runs equal the plain definition")
    func runsMatchDefinition() async {
        let kinds = Kinds()
        await propertyCheck(count: 300, input: Gen.int(in: 0...Int.max)) { seed in
            let events = RandomHistory.make(seed: UInt64(seed)).map(FoldEvent.init)
            let ordered = Fold.inFoldOrder(events)
            let windows = Fold.fold(events).windows.filter { !$0.isVoid }
            let runs = SubscriberFacts.paidRuns(windows: windows, events: ordered)
            #expect(runs == Self.plainRuns(windows: windows, events: ordered))
            kinds.note(entitlements: Set(windows.filter { $0.kind.isPaid || $0.kind == .grace }.map(\.entitlement)).count)
        }
        // Both ways through `paidRuns` were taken.
        #expect(kinds.seen(1) && kinds.seen(2))
    }

    /// Which numbers of entitlements the random histories had.
    private final class Kinds: @unchecked Sendable {
        private let lock = NSLock()
        private var counts: Set<Int> = []
        func note(entitlements: Int) { lock.withLock { _ = counts.insert(entitlements) } }
        func seen(_ n: Int) -> Bool { lock.withLock { counts.contains(n) } }
    }
}
