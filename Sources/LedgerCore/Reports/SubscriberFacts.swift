import Foundation

/// Why a paid run ended (docs/semantics.md section 5, first match wins).
public enum LapseReason: String, Sendable, Hashable, CaseIterable {
    case refund, involuntary, voluntary, other
    /// The run ended because its purchase moved to another subscriber (`transfer_out`): counted as
    /// `transferred_out`, never as churn (docs/identity.md).
    case transferred

    /// The reasons that are churn.
    public static let churn: [LapseReason] = [.refund, .involuntary, .voluntary, .other]
}

/// A maximal interval of paid service: paid/intro/promo windows and the grace windows touching them.
public struct PaidRun: Sendable, Hashable {
    /// The entitlement the run is about; `""` for runs over all entitlements together.
    public var entitlement: String
    public var start: Timestamp
    /// nil when the run never ends.
    public var end: Timestamp?
    /// Why the run ended; nil while it runs.
    public var lapse: LapseReason?
    /// The run began with a purchase moving in (`transfer_in`): counted as `transferred_in`, not new nor
    /// reactivated (docs/identity.md).
    public var transferredIn: Bool

    public init(entitlement: String, start: Timestamp, end: Timestamp?, lapse: LapseReason?, transferredIn: Bool = false) {
        self.entitlement = entitlement
        self.start = start
        self.end = end
        self.lapse = lapse
        self.transferredIn = transferredIn
    }

    /// "Paid-active just before t": `start < t <= end`.
    public func isActive(justBefore t: Timestamp) -> Bool {
        start < t && (end.map { t <= $0 } ?? true)
    }
}

/// A paid transaction as revenue sees it (docs/semantics.md section 6).
public struct RevenueTransaction: Sendable, Hashable {
    public struct Refund: Sendable, Hashable {
        public var at: Timestamp
        public var amount: Int64
        /// False for a price adjustment (`cut: false`): access continues and what is left is recognised
        /// ratably over the rest of the window (ledger-semantics section 6).
        public var cut: Bool
        public init(at: Timestamp, amount: Int64, cut: Bool = true) {
            self.at = at
            self.amount = amount
            self.cut = cut
        }
    }

    public var eventID: UUID
    public var entitlements: [String]
    /// `paid`, `intro`, `promo` or `lifetime`.
    public var kind: Window.Kind
    public var currency: String
    public var gross: Int64
    /// Tax included in `gross` (0 when the store did not say): commission is taken on `gross − tax`.
    public var tax: Int64
    public var commission: Int64
    public var occurredAt: Timestamp
    /// The report dimensions (docs/reports.md, "Dimensions"): the buyer's country (nil: not known), the event's
    /// `source` and the product.
    public var country: String?
    public var store: String
    public var productID: String
    /// The window as granted, before any cut; recognition is ratable over it. `end` is nil for lifetime.
    public var start: Timestamp
    public var end: Timestamp?
    /// Where a refund or cancellation cut the service short (recognition stops, the rest is settled there).
    public var stop: Timestamp?
    /// Where the purchase moved to another subscriber (`transfer_out`): this subscriber's share of its
    /// recognition and MRR ends there (docs/identity.md).
    public var handedOver: Timestamp?
    /// For a transaction that arrived with a transferred purchase: when it arrived. Its terms are the
    /// original's (billed by the subscriber it came from); this subscriber's share starts there.
    public var heldFrom: Timestamp?
    public var refunds: [Refund]
    /// The price per month, for MRR; nil for lifetime purchases.
    public var monthly: MonthlyAmount?

    public init(
        eventID: UUID, entitlements: [String], kind: Window.Kind, currency: String, gross: Int64, commission: Int64,
        occurredAt: Timestamp, start: Timestamp, end: Timestamp?, stop: Timestamp?, refunds: [Refund],
        monthly: MonthlyAmount?, handedOver: Timestamp? = nil, heldFrom: Timestamp? = nil, tax: Int64 = 0, country: String? = nil,
        store: String = "", productID: String = ""
    ) {
        self.tax = tax
        self.country = country
        self.store = store
        self.productID = productID
        self.eventID = eventID
        self.entitlements = entitlements
        self.kind = kind
        self.currency = currency
        self.gross = gross
        self.commission = commission
        self.occurredAt = occurredAt
        self.start = start
        self.end = end
        self.stop = stop
        self.refunds = refunds
        self.monthly = monthly
        self.handedOver = handedOver
        self.heldFrom = heldFrom
    }

    /// When this subscriber's service ends: the cut or the transfer, else the granted end (nil = never).
    public var serviceEnd: Timestamp? {
        guard let handedOver else { return stop ?? end }
        return min(stop ?? end ?? handedOver, handedOver)
    }

    /// After this instant nothing about the transaction changes any more (for this subscriber).
    public var settledAt: Timestamp {
        var t = max(occurredAt, kind == .lifetime ? occurredAt : (stop ?? end ?? occurredAt))
        for r in refunds { t = max(t, r.at) }
        if let heldFrom { t = max(t, heldFrom) }
        if let handedOver { t = min(t, handedOver) }
        return t
    }

    /// When this subscriber's paid service (MRR) starts: the window's start, or when the purchase arrived.
    public var serviceStart: Timestamp { heldFrom.map { max($0, start) } ?? start }
}

/// A trial window and whether it converted (docs/semantics.md section 5).
public struct TrialFact: Sendable, Hashable {
    public var eventID: UUID
    public var entitlement: String
    public var start: Timestamp
    public var end: Timestamp
    public var converted: Bool
    /// The report dimensions of the trial's transaction (docs/reports.md, "Dimensions"): its event's `source`,
    /// its country (nil: not known), its product.
    public var store: String
    public var country: String?
    public var productID: String

    public init(
        eventID: UUID, entitlement: String, start: Timestamp, end: Timestamp, converted: Bool, store: String = "", country: String? = nil,
        productID: String = ""
    ) {
        self.store = store
        self.country = country
        self.productID = productID
        self.eventID = eventID
        self.entitlement = entitlement
        self.start = start
        self.end = end
        self.converted = converted
    }
}

/// What the reports need from one subscriber, derived from the stream's production events only.
///
/// Kept in projection tables beside the windows so that reports aggregate facts instead of re-folding the log.
public struct SubscriberFacts: Sendable, Hashable {
    /// Sorted by (entitlement, start); `""` rows are the runs over all entitlements.
    public var runs: [PaidRun]
    public var transactions: [RevenueTransaction]
    public var trials: [TrialFact]
    /// When the subscriber was first seen: the earliest `occurred_at` of their production events (conversion
    /// to paying); nil when they have none.
    public var firstSeen: Timestamp? = nil

    public init(runs: [PaidRun], transactions: [RevenueTransaction], trials: [TrialFact], firstSeen: Timestamp? = nil) {
        self.runs = runs
        self.transactions = transactions
        self.trials = trials
        self.firstSeen = firstSeen
    }

    /// For each run, in `runs` order: the start of the subscriber's first run of the same entitlement key
    /// (what tells a new subscriber from a reactivation in churn).
    public var runFirstStarts: [Timestamp] {
        var first: [String: Timestamp] = [:]
        for run in runs where first[run.entitlement] == nil { first[run.entitlement] = run.start }
        return runs.map { first[$0.entitlement]! }
    }

    /// A paid window starting this long after a trial's end still converts it.
    public static let conversionGrace: Int64 = 24 * 3600 * 1_000_000
    /// An `expiration` this long after a paid run's end still explains the lapse.
    public static let expirationSlack: Int64 = 24 * 3600 * 1_000_000

    /// Derives the facts; sandbox events are left out (they never count in revenue or churn).
    public static func derive(events: [RecordedEvent], ledger: SubscriberLedger) -> SubscriberFacts {
        derive(events: events.map(FoldEvent.init), ledger: ledger)
    }

    /// Derives the facts; sandbox events are left out (they never count in revenue or churn).
    public static func derive(events: [FoldEvent], ledger: SubscriberLedger) -> SubscriberFacts {
        let production = events.allSatisfy { $0.environment == .production } ? events : events.filter { $0.environment == .production }
        let ledger = production.count == events.count ? ledger : Fold.fold(production)
        let ordered = Fold.inFoldOrder(production)
        let windows = ledger.windows.filter { !$0.isVoid }
        // A trial that moved with its purchase started where it was bought: counted there only.
        let arrived = Set(ordered.lazy.filter { $0.type == .transferIn }.map(\.eventID))
        return SubscriberFacts(
            runs: paidRuns(windows: windows, events: ordered),
            transactions: transactions(events: ordered, windows: ledger.windows),
            trials: trials(windows: arrived.isEmpty ? windows : windows.filter { !arrived.contains($0.sourceEventID) }, events: ordered),
            firstSeen: production.lazy.map(\.occurredAt).min())
    }

    static func paidRuns(windows: [Window], events: [FoldEvent]) -> [PaidRun] {
        let relevant = windows.filter { $0.kind.isPaid || $0.kind == .grace }.sorted { $0.start < $1.start }
        guard let first = relevant.first?.entitlement else { return [] }
        let index = LapseIndex(events: events)
        // Most subscribers have one entitlement: its runs are the runs over all entitlements, under its name.
        if relevant.allSatisfy({ $0.entitlement == first }) {
            let all = runs(of: relevant, key: "", index: index)
            return all + all.map { PaidRun(entitlement: first, start: $0.start, end: $0.end, lapse: $0.lapse, transferredIn: $0.transferredIn) }
        }
        var result = runs(of: relevant, key: "", index: index)
        let byEntitlement = Dictionary(grouping: relevant, by: \.entitlement)
        for key in byEntitlement.keys.sorted() { result += runs(of: byEntitlement[key]!, key: key, index: index) }
        return result
    }

    /// The paid runs of windows sorted by start: the connected components of their spans that hold a paid window.
    private static func runs(of sorted: [Window], key: String, index: LapseIndex) -> [PaidRun] {
        var runs: [PaidRun] = []
        var component: [Window] = []
        var end: Timestamp?  // the open component's end; nil = it never ends
        func close() {
            defer { component.removeAll(keepingCapacity: true) }
            guard component.contains(where: \.kind.isPaid), let first = component.first else { return }
            // Begun by a transfer: every window at its start came with one.
            let opening = component.prefix { $0.start == first.start }
            let transferred = opening.allSatisfy { index.transfersIn.contains($0.sourceEventID) }
            runs.append(
                PaidRun(
                    entitlement: key, start: first.start, end: end, lapse: end.map { lapse(of: component, at: $0, index: index) },
                    transferredIn: transferred))
        }
        for w in sorted {
            if !component.isEmpty, let e = end, w.start > e { close() }
            if component.isEmpty {
                end = w.end
            } else if let e = end {
                end = w.end.map { max($0, e) }
            }
            component.append(w)
        }
        close()
        return runs
    }

    /// The reason a run that ends at `e` lapsed, first match wins: refund, involuntary, voluntary, other.
    static func lapse(of run: [Window], at e: Timestamp, index: LapseIndex) -> LapseReason {
        let closing = run.filter { $0.end == e }
        // Ended by the purchase moving away: not churn.
        if closing.contains(where: { w in w.effectiveCut.map { $0.at == e && $0.cause == .transfer } ?? false }) { return .transferred }
        if closing.contains(where: { w in
            guard let cut = w.effectiveCut, cut.at == e else { return false }
            return cut.cause == .refund || cut.cause == .cancellation
        }) {
            return .refund
        }
        let entitlements = Set(closing.map(\.entitlement))
        let lastPaid = run.filter(\.kind.isPaid).max { ($0.end ?? .maximum, $0.start) < ($1.end ?? .maximum, $1.start) }!
        let billingIssue = index.last(.billingIssue, of: entitlements, from: lastPaid.start, through: e) != nil
        let slack = Timestamp(microseconds: e.microseconds + expirationSlack)
        let expiration = index.last(.expiration, of: entitlements, from: lastPaid.start, through: slack)
            .flatMap { if case .expiration(let x) = $0.payload { x.reason } else { nil } }
        if billingIssue || expiration == "billing" { return .involuntary }
        let autoRenewOff =
            index.last(.autoRenewChanged, of: entitlements, from: nil, through: e)
            .map { if case .autoRenewChanged(let a) = $0.payload { a.enabled == false } else { false } } ?? false
        if autoRenewOff || expiration == "voluntary" || expiration == "price_increase" || expiration == "paused" { return .voluntary }
        return .other
    }

    /// The events that explain lapses, per type and entitlement in fold order, so that each run's reason is
    /// found by binary search instead of a scan of the whole stream (O(n log n) for a subscriber, not O(n²)).
    struct LapseIndex {
        let events: [FoldEvent]
        /// `[type: [entitlement: indexes into events]]`, ascending.
        var lists: [EventType: [String: [Int]]] = [:]
        /// The `transfer_in` events: windows they brought start transferred runs.
        var transfersIn: Set<UUID> = []

        init(events: [FoldEvent]) {
            self.events = events
            for event in events where event.type == .transferIn { transfersIn.insert(event.eventID) }
            for (i, event) in events.enumerated() where [.billingIssue, .expiration, .autoRenewChanged].contains(event.type) {
                for e in Set(event.payload.entitlements) { lists[event.type, default: [:]][e, default: []].append(i) }
            }
        }

        /// The last event (in fold order) of `type` naming any of `entitlements` with `from <= occurred_at <= through`.
        func last(_ type: EventType, of entitlements: Set<String>, from: Timestamp?, through: Timestamp) -> FoldEvent? {
            var best: Int?
            for e in entitlements {
                guard let list = lists[type]?[e] else { continue }
                // First index whose event occurs after `through`; the one before it is the candidate.
                var (lo, hi) = (0, list.count)
                while lo < hi {
                    let mid = (lo + hi) / 2
                    if events[list[mid]].occurredAt <= through { lo = mid + 1 } else { hi = mid }
                }
                guard lo > 0 else { continue }
                let candidate = list[lo - 1]
                if let from, events[candidate].occurredAt < from { continue }
                if best.map({ candidate > $0 }) ?? true { best = candidate }
            }
            return best.map { events[$0] }
        }
    }

    static func transactions(events: [FoldEvent], windows: [Window]) -> [RevenueTransaction] {
        var refunds: [(transactionID: String, refund: RevenueTransaction.Refund, reversed: Bool, position: Int64)] = []
        var refundsByTransaction: [String: [Int]] = [:]
        for event in events {
            switch event.payload {
            case .refund(let r):
                guard let txn = r.transactionID else { continue }
                refundsByTransaction[txn, default: []].append(refunds.count)
                refunds.append((txn, .init(at: event.occurredAt, amount: r.amountMinor, cut: r.cut), false, event.position))
            case .refundReversal(let r):
                guard let txn = r.transactionID, let i = refundsByTransaction[txn]?.last(where: { !refunds[$0].reversed }) else { continue }
                refunds[i].reversed = true
            default:
                continue
            }
        }
        // Each event's window of the first entitlement by name (of equals, the first in the ledger's order).
        var windowByEvent: [UUID: Int] = [:]
        windowByEvent.reserveCapacity(windows.count)
        for (i, w) in windows.enumerated() {
            if let j = windowByEvent[w.sourceEventID], windows[j].entitlement <= w.entitlement { continue }
            windowByEvent[w.sourceEventID] = i
        }
        // A transaction is this subscriber's from where it was recorded (its event, or the transfer that brought
        // it) until the next transfer of its purchase away: a refund recorded in between is this copy's
        // (docs/identity.md). Without transfers every refund is the transaction's one copy's.
        var transfersOut: [String: [(position: Int64, at: Timestamp)]] = [:]
        var transfers: [String: [Int64]] = [:]
        for event in events {
            if case .transferOut(let x) = event.payload {
                transfersOut[x.purchaseID, default: []].append((event.position, event.occurredAt))
                transfers[x.purchaseID, default: []].append(event.position)
            }
            if case .transferIn(let x) = event.payload { transfers[x.purchaseID, default: []].append(event.position) }
        }
        struct Copy {
            var event: FoldEvent
            var transactionID: String?
            var held: Range<Int64>
            /// When the purchase left (the transfer that ends `held`).
            var handedOver: Timestamp?
            var carried: CarriedTransaction?
            var refunds: [RevenueTransaction.Refund] = []

            init(event: FoldEvent, transactionID: String?, held: (Range<Int64>, Timestamp?), carried: CarriedTransaction? = nil) {
                (self.event, self.transactionID, self.held, self.handedOver, self.carried) = (event, transactionID, held.0, held.1, carried)
            }
        }
        /// From the purchase's last transfer before `p` (0: none), or from `p` itself for a transfer in, to its
        /// next transfer out.
        func held(_ purchase: String?, from p: Int64, arrived: Bool = false) -> (Range<Int64>, Timestamp?) {
            let next = purchase.flatMap { transfersOut[$0]?.filter { $0.position > p }.min { $0.position < $1.position } }
            let since = arrived ? p : purchase.flatMap { transfers[$0]?.filter { $0 < p }.max() } ?? 0
            return (since..<(next?.position ?? .max), next?.at)
        }
        var copies: [Copy] = []
        for event in events {
            switch event.payload {
            case .transaction(let t):
                guard t.isPaid, t.priceMinor != nil, t.currency != nil else { continue }
                copies.append(Copy(event: event, transactionID: t.transactionID, held: held(t.purchaseID, from: event.position)))
            case .transferIn(let x):
                for c in x.transactions {
                    copies.append(
                        Copy(event: event, transactionID: c.transactionID, held: held(x.purchaseID, from: event.position, arrived: true), carried: c))
                }
            default:
                continue
            }
        }
        if !refunds.isEmpty {
            var copiesByTransaction: [String: [Int]] = [:]
            for (i, c) in copies.enumerated() { if let id = c.transactionID { copiesByTransaction[id, default: []].append(i) } }
            for r in refunds where !r.reversed {
                guard let mine = copiesByTransaction[r.transactionID], let first = mine.first else { continue }
                // The copies held when the refund was recorded (several events may name one transaction id);
                // else the last one before it; else the first.
                let held = mine.filter { copies[$0].held.contains(r.position) }
                for i in held.isEmpty ? [mine.last { copies[$0].held.lowerBound < r.position } ?? first] : held {
                    copies[i].refunds.append(r.refund)
                }
            }
        }
        // The windows transfers brought, per transfer and transaction: the first entitlement's by name.
        var carriedWindow: [UUID: [String: Window]] = [:]
        if copies.contains(where: { $0.carried != nil }) {
            let transfers = Set(copies.lazy.filter { $0.carried != nil }.map(\.event.eventID))
            for w in windows where transfers.contains(w.sourceEventID) {
                guard let txn = w.transactionID else { continue }
                if let seen = carriedWindow[w.sourceEventID]?[txn], seen.entitlement <= w.entitlement { continue }
                carriedWindow[w.sourceEventID, default: [:]][txn] = w
            }
        }
        var result: [RevenueTransaction] = []
        for copy in copies {
            let event = copy.event
            if let c = copy.carried {
                // Arrived with a transferred purchase: this subscriber's share from then on.
                let window = carriedWindow[event.eventID]?[c.transactionID]
                result.append(
                    c.revenue(
                        transferEvent: event.eventID, heldFrom: event.occurredAt, refunds: copy.refunds,
                        stop: c.kind == .lifetime ? nil : window?.earliestCut { $0 != .transfer }?.at, handedOver: copy.handedOver))
                continue
            }
            guard case .transaction(let t) = event.payload, let price = t.priceMinor, let currency = t.currency else { continue }
            let lifetime = t.kind == .lifetime
            let window = windowByEvent[event.eventID].map { windows[$0] }
            // Revenue books a lifetime purchase at once whatever its offer; otherwise the window's own kind.
            let windowKind: Window.Kind = lifetime ? .lifetime : window?.kind ?? t.windowKind
            result.append(
                RevenueTransaction(
                    eventID: event.eventID, entitlements: t.entitlements.sorted(), kind: windowKind,
                    currency: currency, gross: price, commission: Money.commission(price - min(t.taxMinor, price), rate: t.commissionRate),
                    occurredAt: event.occurredAt, start: window?.start ?? event.occurredAt,
                    end: lifetime ? nil : (window?.grantedEnd ?? event.occurredAt),
                    // A transfer is not a stop: money follows the transaction; this subscriber's share ends there.
                    stop: lifetime ? nil : window?.earliestCut { $0 != .transfer }?.at,
                    refunds: copy.refunds.sorted { $0.at < $1.at },
                    monthly: lifetime ? nil : t.period.flatMap { MonthlyAmount(price: price, period: $0) },
                    handedOver: copy.handedOver, tax: min(t.taxMinor, price), country: t.country, store: event.source,
                    productID: t.productID ?? ""))
        }
        return result
    }

    static func trials(windows: [Window], events: [FoldEvent] = []) -> [TrialFact] {
        guard windows.contains(where: { $0.kind == .trial }) else { return [] }
        // The trial transactions' store and country, by event.
        var dimensions: [UUID: (store: String, country: String?)] = [:]
        let trialEvents = Set(windows.lazy.filter { $0.kind == .trial }.map(\.sourceEventID))
        for e in events where trialEvents.contains(e.eventID) {
            if case .transaction(let t) = e.payload { dimensions[e.eventID] = (e.source, t.country) }
        }
        // Paid windows per entitlement by start, so each trial looks only at those starting in its span.
        let paid = Dictionary(grouping: windows.filter(\.kind.isPaid), by: \.entitlement).mapValues { $0.sorted { $0.start < $1.start } }
        return windows.filter { $0.kind == .trial }.map { trial in
            let end = trial.grantedEnd ?? trial.start
            let latest = Timestamp(microseconds: end.microseconds + conversionGrace)
            let candidates = paid[trial.entitlement] ?? []
            var (lo, hi) = (0, candidates.count)
            while lo < hi {
                let mid = (lo + hi) / 2
                if candidates[mid].start < trial.start { lo = mid + 1 } else { hi = mid }
            }
            let converted = candidates[lo...].prefix { $0.start <= latest }.contains { $0.effectiveCut?.cause != .refund }
            let d = dimensions[trial.sourceEventID]
            return TrialFact(
                eventID: trial.sourceEventID, entitlement: trial.entitlement, start: trial.start, end: end, converted: converted,
                store: d?.store ?? "", country: d?.country, productID: trial.productID ?? "")
        }
    }
}
