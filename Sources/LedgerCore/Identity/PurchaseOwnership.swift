import Foundation

/// A store purchase as one subscriber's stream holds it (docs/identity.md).
public struct OwnedPurchase: Sendable, Hashable {
    /// The source of its transactions (`apple`, `google`, `stripe`, …), or the store a transfer named.
    public var store: String
    public var purchaseID: String
    /// When it came to this subscriber: its first transaction's `occurred_at`, or the transfer's.
    public var since: Timestamp
    /// The product of its latest transaction (or of the latest window a transfer brought).
    public var productID: String?
    /// The events whose windows belong to it: its transactions, the transfers that brought it.
    public var sourceEventIDs: Set<UUID>

    /// Whether one of its windows covers `t` in `ledger`.
    public func isActive(in ledger: SubscriberLedger, at t: Timestamp) -> Bool {
        ledger.windows.contains { sourceEventIDs.contains($0.sourceEventID) && $0.covers(t) }
    }
}

/// Who holds which purchase, read from streams: ownership is a matter of record (the order events were
/// recorded in), so an as-of read of a stream answers who held a purchase then.
public enum PurchaseOwnership {
    /// The purchases `events` (one subscriber's stream, any order) bring and do not give away again: each
    /// transaction's purchase (`original_transaction_id`, else its `transaction_id`) and each `transfer_in`'s,
    /// minus those a later `transfer_out` took. Sorted by `since`, then id.
    public static func owned(_ events: [RecordedEvent]) -> [OwnedPurchase] {
        var held: [String: OwnedPurchase] = [:]
        for event in events.sorted(by: { $0.position < $1.position }) where event.type != .storeNotice {
            switch EventPayload(type: event.type, data: event.data) {
            case .transaction(let t):
                guard let id = t.purchaseID else { continue }
                var p = held[id] ?? OwnedPurchase(store: event.source, purchaseID: id, since: event.occurredAt, productID: nil, sourceEventIDs: [])
                p.since = min(p.since, event.occurredAt)
                p.productID = t.productID ?? p.productID
                p.sourceEventIDs.insert(event.eventID)
                held[id] = p
            case .transferIn(let t):
                var p = OwnedPurchase(store: t.store, purchaseID: t.purchaseID, since: event.occurredAt, productID: nil, sourceEventIDs: [])
                if let existing = held[t.purchaseID] { p = existing }
                p.productID = t.windows.last?.productID ?? p.productID
                p.sourceEventIDs.insert(event.eventID)
                held[t.purchaseID] = p
            case .transferOut(let t):
                held[t.purchaseID] = nil
            default:
                continue
            }
        }
        return held.values.sorted { ($0.since, $0.purchaseID) < ($1.since, $1.purchaseID) }
    }

    /// The subscriber the stream was merged into, if it was.
    public static func mergedInto(_ events: [RecordedEvent]) -> String? {
        for event in events where event.type == .merged {
            if case .merged(let m) = EventPayload(type: event.type, data: event.data), !m.into.isEmpty { return m.into }
        }
        return nil
    }

    /// The windows a transfer at `t` takes with it: the purchase's windows (and the grace windows of its
    /// products) still running after `t`, each from `max(start, t)` to its end.
    public static func windowsToTransfer(
        _ purchase: OwnedPurchase, events: [RecordedEvent], ledger: SubscriberLedger, at t: Timestamp
    ) -> [TransferredWindow] {
        var renews: [UUID: Bool] = [:]
        var grace: Set<UUID> = []
        for event in events {
            switch EventPayload(type: event.type, data: event.data) {
            case .transaction(let tx) where purchase.sourceEventIDs.contains(event.eventID):
                renews[event.eventID] = tx.kind == .autoRenewable
            case .billingIssue(let b) where b.productID != nil:
                grace.insert(event.eventID)
            default:
                continue
            }
        }
        var products: Set<String> = []
        for w in ledger.windows where purchase.sourceEventIDs.contains(w.sourceEventID) { w.productID.map { _ = products.insert($0) } }
        // The transfers that brought it: their windows renew as they said.
        var carried: [UUID: [TransferredWindow]] = [:]
        for event in events where event.type == .transferIn && purchase.sourceEventIDs.contains(event.eventID) {
            if case .transferIn(let x) = EventPayload(type: event.type, data: event.data) { carried[event.eventID] = x.windows }
        }
        var result: [TransferredWindow] = []
        for w in ledger.windows where !w.isVoid {
            let own = purchase.sourceEventIDs.contains(w.sourceEventID)
            let itsGrace = grace.contains(w.sourceEventID) && w.kind == .grace && w.productID.map(products.contains) == true
            guard own || itsGrace, w.end.map({ $0 > t }) ?? true else { continue }
            let renewable =
                itsGrace || (renews[w.sourceEventID] ?? carried[w.sourceEventID]?.first { $0.entitlement == w.entitlement }?.autoRenewable ?? false)
            result.append(
                TransferredWindow(
                    entitlement: w.entitlement, kind: w.kind, productID: w.productID, transactionID: w.transactionID,
                    start: max(w.start, t), end: w.end, autoRenewable: renewable))
        }
        return result
    }

    /// The paid transactions of `purchase` with their terms, for the `transfer_in` that moves it: money
    /// follows the transaction (docs/identity.md). Every one, settled or not: a later refund of any of them
    /// is accounted where the purchase then is.
    public static func carriedTransactions(_ purchase: OwnedPurchase, events: [RecordedEvent], facts: SubscriberFacts) -> [CarriedTransaction] {
        var byID: [UUID: RevenueTransaction] = [:]
        for t in facts.transactions { byID[t.eventID] = t }
        var result: [CarriedTransaction] = []
        for event in events where purchase.sourceEventIDs.contains(event.eventID) {
            switch EventPayload(type: event.type, data: event.data) {
            case .transaction(let t):
                if let id = t.transactionID, let fact = byID[event.eventID] {
                    result.append(CarriedTransaction(fact, transactionID: id, period: t.period))
                }
            case .transferIn(let x):
                for c in x.transactions {
                    if let fact = byID[CarriedTransaction.id(event.eventID, c.transactionID)] {
                        result.append(CarriedTransaction(fact, transactionID: c.transactionID, period: c.period))
                    }
                }
            default:
                continue
            }
        }
        return result
    }

    /// The credits still running after `t` (a merge moves them too), each as a purchase of its own
    /// (`credit:<event_id>`, the fold's key for it).
    public static func runningCredits(_ events: [RecordedEvent], ledger: SubscriberLedger, at t: Timestamp) -> [OwnedPurchase] {
        var movedOut: Set<String> = []
        for event in events where event.type == .transferOut {
            if case .transferOut(let x) = EventPayload(type: event.type, data: event.data) { movedOut.insert(x.purchaseID) }
        }
        var result: [OwnedPurchase] = []
        for w in ledger.windows where w.kind == .credit && !w.isVoid && (w.end.map { $0 > t } ?? true) {
            let id = creditPurchaseID(w.sourceEventID)
            guard !movedOut.contains(id) else { continue }
            result.append(OwnedPurchase(store: "credit", purchaseID: id, since: w.start, productID: nil, sourceEventIDs: [w.sourceEventID]))
        }
        return result
    }

    /// A credit moves between subscribers as a purchase of its own.
    public static func creditPurchaseID(_ eventID: UUID) -> String { "credit:" + eventID.uuidString.lowercased() }
}
