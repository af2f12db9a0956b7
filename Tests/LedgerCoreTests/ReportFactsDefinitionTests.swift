import Foundation
import LedgerTestSupport
import PropertyBased
import Testing

@testable import LedgerCore

/// `SubscriberFacts.paidRuns` sorts the windows once and, for a subscriber with one entitlement, takes that
/// entitlement's runs from the runs over all entitlements; `transactions` finds each event's window without
/// grouping copies of the windows. These tests hold both to the plain definitions: for the empty key and
/// then each entitlement in order, the components of that key's windows sorted by start; for a
/// transaction, its event's windows sorted by entitlement, the first.
@Suite("Report facts: paid runs and transactions")
struct ReportFactsDefinitionTests {
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

    /// The transactions as first written: each event's windows grouped, sorted by entitlement, the first taken.
    static func plainTransactions(events: [FoldEvent], windows: [Window]) -> [RevenueTransaction] {
        var refunds: [(transactionID: String, refund: RevenueTransaction.Refund, reversed: Bool)] = []
        var refundsByTransaction: [String: [Int]] = [:]
        for event in events {
            switch event.payload {
            case .refund(let r):
                guard let txn = r.transactionID else { continue }
                refundsByTransaction[txn, default: []].append(refunds.count)
                refunds.append((txn, .init(at: event.occurredAt, amount: r.amountMinor, cut: r.cut), false))
            case .refundReversal(let r):
                guard let txn = r.transactionID, let i = refundsByTransaction[txn]?.last(where: { !refunds[$0].reversed }) else { continue }
                refunds[i].reversed = true
            default:
                continue
            }
        }
        let windowsByEvent = Dictionary(grouping: windows, by: \.sourceEventID)
        var result: [RevenueTransaction] = []
        for event in events {
            guard case .transaction(let t) = event.payload else { continue }
            guard t.isPaid, let price = t.priceMinor, let currency = t.currency else { continue }
            let lifetime = t.kind == .lifetime
            let own = (windowsByEvent[event.eventID] ?? []).sorted { $0.entitlement < $1.entitlement }
            let window = own.first
            let txn = t.transactionID
            // Revenue books a lifetime purchase at once whatever its offer; otherwise the window's own kind.
            let windowKind: Window.Kind = lifetime ? .lifetime : window?.kind ?? t.windowKind
            let rate = t.commissionRate
            let period = t.period
            let ownRefunds = (txn.flatMap { refundsByTransaction[$0] } ?? []).filter { !refunds[$0].reversed }.map { refunds[$0].refund }
            result.append(
                RevenueTransaction(
                    eventID: event.eventID, entitlements: t.entitlements.sorted(), kind: windowKind,
                    currency: currency, gross: price, commission: Money.commission(price - min(t.taxMinor, price), rate: rate),
                    occurredAt: event.occurredAt, start: window?.start ?? event.occurredAt,
                    end: lifetime ? nil : (window?.grantedEnd ?? event.occurredAt),
                    stop: lifetime ? nil : window?.effectiveCut?.at,
                    refunds: ownRefunds.sorted { $0.at < $1.at },
                    monthly: lifetime ? nil : period.flatMap { MonthlyAmount(price: price, period: $0) }, tax: min(t.taxMinor, price),
                    country: t.country, store: event.source, productID: t.productID ?? ""))
        }
        return result
    }

    @Test("on random histories, each transaction takes the window of its first entitlement, as defined")
    func transactionsMatchDefinition() async {
        await propertyCheck(count: 300, input: Gen.int(in: 0...Int.max)) { seed in
            let events = Fold.inFoldOrder(RandomHistory.make(seed: UInt64(seed)).map(FoldEvent.init))
            let windows = Fold.fold(events).windows
            #expect(SubscriberFacts.transactions(events: events, windows: windows) == Self.plainTransactions(events: events, windows: windows))
        }
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
