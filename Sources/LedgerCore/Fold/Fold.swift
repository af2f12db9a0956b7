import Foundation

/// What one subscriber's events say: every window (cut and void ones included) and the renewal state.
public struct SubscriberLedger: Sendable, Hashable {
    public var windows: [Window]
    /// Per entitlement: the instants at which `will_renew` turns on and off, alternately (on first), in
    /// ascending order; it is false before the first and for an entitlement not listed. A function of the
    /// instant asked about (docs/semantics.md section 3, "Entitlement state at a time T"): `willRenew(_:at:)`.
    public var renewing: [String: [Timestamp]]
    /// Refunds whose transaction never appeared in the fold (flagged for the audit trail).
    public var unmatchedRefunds: [UUID]
    /// The subscriber this one was merged into (`merged`), if it was: its reads say so (docs/identity.md).
    public var mergedInto: String?

    public init(windows: [Window], renewing: [String: [Timestamp]], unmatchedRefunds: [UUID], mergedInto: String? = nil) {
        self.windows = windows
        self.renewing = renewing
        self.unmatchedRefunds = unmatchedRefunds
        self.mergedInto = mergedInto
    }

    public static let empty = SubscriberLedger(windows: [], renewing: [:], unmatchedRefunds: [])

    /// Whether the entitlement will renew at `t`: an odd number of `renewing` instants at or before it
    /// (a binary search).
    public func willRenew(_ entitlement: String, at t: Timestamp) -> Bool {
        guard let toggles = renewing[entitlement] else { return false }
        var (low, high) = (0, toggles.count)
        while low < high {
            let mid = (low + high) / 2
            if toggles[mid] <= t { low = mid + 1 } else { high = mid }
        }
        return low % 2 == 1
    }
}

/// The window fold (docs/semantics.md section 3): a pure function of one subscriber's events.
public enum Fold {
    /// Folds events in `(occurred_at, position)` order, whatever order they are given in.
    public static func fold(_ events: [RecordedEvent]) -> SubscriberLedger {
        fold(events.map(FoldEvent.init))
    }

    /// Folds events in `(occurred_at, position)` order, whatever order they are given in.
    public static func fold(_ events: [FoldEvent]) -> SubscriberLedger {
        var state = FoldState()
        for event in inFoldOrder(events) { state.apply(event) }
        return state.result
    }

    /// The events in `(occurred_at, position)` order: the same array when it is in that order already (a
    /// stream read by version usually is), so that no copy is made.
    public static func inFoldOrder(_ events: [FoldEvent]) -> [FoldEvent] {
        let precedes = { (a: FoldEvent, b: FoldEvent) in (a.occurredAt, a.position) < (b.occurredAt, b.position) }
        var ordered = true
        for i in events.indices.dropFirst() where !precedes(events[i - 1], events[i]) {
            ordered = false
            break
        }
        return ordered ? events : events.sorted(by: precedes)
    }
}

/// A fold that takes events one at a time, for readers that walk a stream in order (webhook delivery): each
/// event costs its own step, not a fold of everything before it again.
///
/// It equals `Fold.fold` of the events applied as long as each comes after every earlier one in
/// `(occurred_at, position)` order; `apply` refuses one that does not (a late fact), and the caller folds
/// the whole stream again.
public struct IncrementalFold: Sendable {
    private var state = FoldState()
    /// The fold order key of the last event applied.
    public private(set) var last: (occurredAt: Timestamp, position: Int64)?
    /// The stream version of the last event applied (0 before any).
    public private(set) var version: Int64 = 0

    public init() {}

    /// The fold of `events` (any order), ready to take later ones.
    public init(_ events: [FoldEvent]) {
        for event in Fold.inFoldOrder(events) {
            state.apply(event)
            last = (event.occurredAt, event.position)
        }
        version = events.map(\.version).max() ?? 0
    }

    /// Applies `event` if it comes after every event applied so far; false (and nothing applied) if not.
    public mutating func apply(_ event: FoldEvent) -> Bool {
        if let last, (event.occurredAt, event.position) < (last.occurredAt, last.position) { return false }
        state.apply(event)
        last = (event.occurredAt, event.position)
        version = max(version, event.version)
        return true
    }

    public var ledger: SubscriberLedger { state.result }
}

private struct Refund {
    var eventID: UUID
    var at: Timestamp
    var transactionID: String
    /// False for a refund that moves money back and leaves access as it is (`cut: false`).
    var cuts: Bool
    var reversed = false
}

private struct FoldState {
    var windows: [Window] = []
    /// Per window (same index): granted by an auto-renewable transaction or a grace period, so that
    /// `will_renew` can be true through it.
    var renewable: [Bool] = []
    /// Per entitlement, in fold order: the events that decide whether it will renew.
    var renewalSteps: [String: [RenewalTimeline.Step]] = [:]
    /// Cancellations that name no entitlement (every entitlement's subscription ends), in fold order.
    var cancellationsOfAll: [RenewalTimeline.Step] = []
    var refunds: [Refund] = []
    /// Indexes into `refunds` per transaction id.
    var refundsByTransaction: [String: [Int]] = [:]
    var pendingCreditReversals: [UUID: (UUID, Timestamp)] = [:]
    var mergedInto: String?
    // Indexes, so that every event touches only the windows it names: a subscriber with n windows folds in
    // O(n log n), not O(n²) (a refund, a cancellation or a reversal no longer scans every window).
    /// Windows of each transaction id (refunds, reversals).
    var byTransaction: [String: [Int]] = [:]
    /// Windows of each purchase (`TransactionData.purchaseID`, a transfer's `purchase_id`, a credit's event
    /// id): what a `transfer_out` cuts.
    var byPurchase: [String: [Int]] = [:]
    /// The transfers out of each purchase: they also cut its windows recorded before them that the fold
    /// meets after them (a transaction dated after the transfer).
    var transfersOut: [String: [(at: Timestamp, eventID: UUID, position: Int64)]] = [:]
    /// Windows of each entitlement (coverage for stacked grants), in insertion order.
    var byEntitlement: [String: [Int]] = [:]
    /// The same, in start order (a window's start never changes): a stacked grant's coverage is one sweep,
    /// not a sort of every window per grant.
    var byEntitlementByStart: [String: [Int]] = [:]
    /// Per entitlement: windows no cancellation has cut yet. A cancellation's cut is never removed, so a later
    /// one can change such a window only at the same instant (the earliest cut, ties by event id, wins).
    var uncancelled: [String: [Int]] = [:]
    var lastCancellation: [String: (at: Timestamp, windows: [Int])] = [:]
    /// Per entitlement: grace windows no expiration has cut yet (same reasoning).
    var unexpiredGrace: [String: [Int]] = [:]
    var lastExpiration: [String: (at: Timestamp, windows: [Int])] = [:]
    /// Credit windows by their event id (credit reversals).
    var creditWindow: [UUID: Int] = [:]

    /// Per entitlement, the merged runs of its non-void windows (with credits, and without), kept as windows
    /// are added; a cut drops them and the next stacked grant rebuilds them. A stacked grant (a pack, a credit)
    /// then finds its coverage by binary search instead of sweeping every window.
    var runsWithCredits: [String: CoverageRuns] = [:]
    var runsWithoutCredits: [String: CoverageRuns] = [:]

    /// Window indexes in `(entitlement, start, source position)` order, kept as windows are added (none of
    /// the three ever changes): the result is read in that order without sorting every window each time, which
    /// an incremental fold asks for after every event.
    var resultOrder: [Int] = []

    var result: SubscriberLedger {
        var renewing: [String: [Timestamp]] = [:]
        for (e, indexes) in byEntitlement {
            let covered = indexes.filter { renewable[$0] && !windows[$0].isVoid }.map { (windows[$0].start, windows[$0].end) }
            guard !covered.isEmpty else { continue }
            let toggles = RenewalTimeline.toggles(
                steps: RenewalTimeline.merged(renewalSteps[e] ?? [], cancellationsOfAll), covered: covered)
            if !toggles.isEmpty { renewing[e] = toggles }
        }
        return SubscriberLedger(
            windows: resultOrder.map { windows[$0] }, renewing: renewing,
            unmatchedRefunds: refunds.isEmpty
                ? [] : refunds.filter { !$0.reversed && byTransaction[$0.transactionID] == nil }.map(\.eventID),
            mergedInto: mergedInto)
    }

    /// Inserts window `i` into `resultOrder` after the windows with an equal key (as a stable sort would).
    mutating func insertInResultOrder(_ i: Int) {
        let key = (windows[i].entitlement, windows[i].start, windows[i].sourcePosition)
        var (low, high) = (0, resultOrder.count)
        while low < high {
            let mid = (low + high) / 2
            let w = resultOrder[mid]
            if (windows[w].entitlement, windows[w].start, windows[w].sourcePosition) <= key { low = mid + 1 } else { high = mid }
        }
        resultOrder.insert(i, at: low)
    }

    mutating func add(_ window: Window, renewable: Bool = false) {
        let i = windows.count
        windows.append(window)
        self.renewable.append(renewable)
        if let txn = window.transactionID { byTransaction[txn, default: []].append(i) }
        byEntitlement[window.entitlement, default: []].append(i)
        insertByStart(i)
        insertInResultOrder(i)
        let end = window.end
        if end != window.start {
            runsWithCredits[window.entitlement]?.insert(window.start, end)
            if window.kind != .credit { runsWithoutCredits[window.entitlement]?.insert(window.start, end) }
        }
        uncancelled[window.entitlement, default: []].append(i)
        if window.kind == .grace { unexpiredGrace[window.entitlement, default: []].append(i) }
        if window.kind == .credit { creditWindow[window.sourceEventID] = i }
    }

    /// Inserts window `i` into its entitlement's start-ordered list, after the windows with the same start.
    mutating func insertByStart(_ i: Int) {
        let start = windows[i].start
        var list = byEntitlementByStart.removeValue(forKey: windows[i].entitlement) ?? []
        var (low, high) = (0, list.count)
        while low < high {
            let mid = (low + high) / 2
            if windows[list[mid]].start <= start { low = mid + 1 } else { high = mid }
        }
        list.insert(i, at: low)
        byEntitlementByStart[windows[i].entitlement] = list
    }

    /// Cuts the entitlement's windows that no cut of this kind has ended yet (every window for a
    /// cancellation, grace windows for an expiration) at `at`. Such a cut is never removed, so those windows
    /// leave the pending list for good; a later cut at the same instant still reaches them (ties go by event id).
    mutating func cutForGood(_ e: String, at: Timestamp, eventID: UUID, cause: Window.Cut.Cause) {
        let isCancellation = cause == .cancellation
        var cut = (isCancellation ? uncancelled.removeValue(forKey: e) : unexpiredGrace.removeValue(forKey: e)) ?? []
        if let previous = isCancellation ? lastCancellation[e] : lastExpiration[e], previous.at == at { cut += previous.windows }
        for i in cut { windows[i].cuts.append(.init(at: at, eventID: eventID, cause: cause)) }
        if !cut.isEmpty { runsChanged(e) }
        if isCancellation { lastCancellation[e] = (at, cut) } else { lastExpiration[e] = (at, cut) }
    }

    /// Records what `event` did to the entitlement's renewal (docs/semantics.md section 3).
    mutating func step(_ e: String, _ event: FoldEvent, _ change: RenewalTimeline.Change) {
        renewalSteps[e, default: []].append(.init(at: event.occurredAt, position: event.position, change: change))
    }

    mutating func apply(_ event: FoldEvent) {
        switch event.payload {
        case .transaction(let t): transaction(event, t)
        case .refund(let r):
            guard let txn = r.transactionID else { return }
            refundsByTransaction[txn, default: []].append(refunds.count)
            refunds.append(Refund(eventID: event.eventID, at: event.occurredAt, transactionID: txn, cuts: r.cut))
            guard r.cut else { return }
            for i in byTransaction[txn] ?? [] {
                windows[i].cuts.append(.init(at: event.occurredAt, eventID: event.eventID, cause: .refund))
                runsChanged(windows[i].entitlement)
            }
        case .refundReversal(let r):
            guard let txn = r.transactionID,
                let i = refundsByTransaction[txn]?.last(where: { !refunds[$0].reversed })
            else { return }
            refunds[i].reversed = true
            let refundID = refunds[i].eventID
            for w in byTransaction[txn] ?? [] {
                windows[w].cuts.removeAll { $0.eventID == refundID }
                runsChanged(windows[w].entitlement)
            }
        case .cancellation(let c):
            let entitlements = c.entitlements.isEmpty ? Array(byEntitlement.keys) : c.entitlements.filter { byEntitlement[$0] != nil }
            for e in entitlements { cutForGood(e, at: event.occurredAt, eventID: event.eventID, cause: .cancellation) }
            // The subscription ends for every entitlement named (all of them when none is), windows or not.
            if c.entitlements.isEmpty {
                cancellationsOfAll.append(.init(at: event.occurredAt, position: event.position, change: .end))
            } else {
                for e in c.entitlements { step(e, event, .end) }
            }
        case .credit(let c): credit(event, c)
        case .creditReversal(let r):
            guard let id = r.creditEventID else { return }
            if let i = creditWindow[id] {
                windows[i].cuts.append(.init(at: windows[i].start, eventID: event.eventID, cause: .creditReversal))
                runsChanged(windows[i].entitlement)
            } else {
                pendingCreditReversals[id] = (event.eventID, event.occurredAt)
            }
        case .autoRenewChanged(let a):
            guard let enabled = a.enabled else { return }
            for e in a.entitlements { step(e, event, .autoRenew(enabled)) }
        case .billingIssue(let b):
            guard let until = b.graceUntil, until > event.occurredAt else { return }
            for e in b.entitlements {
                add(
                    Window(
                        entitlement: e, start: event.occurredAt, grantedEnd: until, kind: .grace,
                        productID: b.productID, transactionID: nil, sourceEventID: event.eventID,
                        sourcePosition: event.position, environment: event.environment),
                    renewable: true)
            }
        case .storeNotice:
            return
        case .merged(let m):
            if mergedInto == nil, !m.into.isEmpty { mergedInto = m.into }
        case .transferOut(let t): transferOut(event, t)
        case .transferIn(let t): transferIn(event, t)
        case .expiration(let x):
            for e in x.entitlements {
                cutForGood(e, at: event.occurredAt, eventID: event.eventID, cause: .expiration)
                step(e, event, .end)
            }
        }
    }

    mutating func transaction(_ event: FoldEvent, _ t: TransactionData) {
        let txn = t.transactionID
        let windowKind = t.windowKind
        let renews = t.kind == .autoRenewable
        for e in t.entitlements {
            // A purchase starts a subscription with auto-renew on; a renewal continues one.
            if renews { step(e, event, event.type == .purchase ? .purchase : .renewal) }
            let start: Timestamp
            let end: Timestamp?
            if let ps = t.periodStart, let pe = t.periodEnd {
                (start, end) = (ps, pe)
            } else if t.kind == .free || t.kind == .lifetime {
                (start, end) = (event.occurredAt, nil)
            } else if let duration = t.duration {
                // Time stacks: a pack bought while covered starts where the coverage ends (credits excluded).
                let s = coverageEnd(e, at: event.occurredAt, includingCredits: false) ?? event.occurredAt
                (start, end) = (s, duration.added(to: s))
            } else {
                continue
            }
            var window = Window(
                entitlement: e, start: start, grantedEnd: end, kind: windowKind, productID: t.productID,
                transactionID: txn, sourceEventID: event.eventID, sourcePosition: event.position,
                environment: event.environment)
            cutByEarlierRefunds(&window)
            if let purchase = t.purchaseID { cutByLaterTransfers(&window, purchase: purchase) }
            add(window, renewable: renews)
            if let purchase = t.purchaseID { byPurchase[purchase, default: []].append(windows.count - 1) }
        }
    }

    /// A refund folded before its transaction's window cuts it at once (rule 3.6).
    func cutByEarlierRefunds(_ window: inout Window) {
        for r in window.transactionID.flatMap({ refundsByTransaction[$0] }) ?? [] where !refunds[r].reversed && refunds[r].cuts {
            window.cuts.append(.init(at: refunds[r].at, eventID: refunds[r].eventID, cause: .refund))
        }
    }

    /// A window of a purchase that a transfer recorded after it took away: cut at the transfer.
    func cutByLaterTransfers(_ window: inout Window, purchase: String) {
        for x in transfersOut[purchase] ?? [] where x.position > window.sourcePosition {
            window.cuts.append(.init(at: x.at, eventID: x.eventID, cause: .transfer))
        }
    }

    /// The purchase leaves: its windows recorded before the transfer are cut at it (and the grace windows of
    /// its products, which belong to no transaction). A later transfer back brings new windows.
    mutating func transferOut(_ event: FoldEvent, _ t: TransferOutData) {
        transfersOut[t.purchaseID, default: []].append((event.occurredAt, event.eventID, event.position))
        let own = (byPurchase[t.purchaseID] ?? []).filter { windows[$0].sourcePosition < event.position }
        let products = Set(own.compactMap { windows[$0].productID })
        var cut = own
        for (e, list) in unexpiredGrace {
            for i in list
            where windows[i].productID.map(products.contains) ?? false && windows[i].entitlement == e
                && windows[i].sourcePosition < event.position
            {
                cut.append(i)
            }
        }
        for i in cut where windows[i].end.map({ $0 > event.occurredAt }) ?? true {
            windows[i].cuts.append(.init(at: event.occurredAt, eventID: event.eventID, cause: .transfer))
            runsChanged(windows[i].entitlement)
        }
    }

    /// The purchase arrives with the windows it still had: added as given (a paid window stays paid, a trial a
    /// trial), carrying no money. A purchase that arrives auto-renewing renews here from now on.
    mutating func transferIn(_ event: FoldEvent, _ t: TransferInData) {
        var renewing: Set<String> = []
        for w in t.windows {
            var window = Window(
                entitlement: w.entitlement, start: w.start, grantedEnd: w.end, kind: w.kind, productID: w.productID,
                transactionID: w.transactionID, sourceEventID: event.eventID, sourcePosition: event.position,
                environment: event.environment)
            cutByEarlierRefunds(&window)
            cutByLaterTransfers(&window, purchase: t.purchaseID)
            add(window, renewable: w.autoRenewable)
            byPurchase[t.purchaseID, default: []].append(windows.count - 1)
            if w.autoRenewable { renewing.insert(w.entitlement) }
        }
        for e in renewing.sorted() { step(e, event, .purchase) }
    }

    mutating func credit(_ event: FoldEvent, _ c: CreditData) {
        guard let e = c.entitlement else { return }
        let start: Timestamp
        let end: Timestamp
        if let ws = c.windowStart, let we = c.windowEnd {
            (start, end) = (ws, we)
        } else if let duration = c.duration {
            let s = coverageEnd(e, at: event.occurredAt, includingCredits: true) ?? event.occurredAt
            (start, end) = (s, duration.added(to: s))
        } else {
            return
        }
        var window = Window(
            entitlement: e, start: start, grantedEnd: end, kind: .credit, productID: nil, transactionID: nil,
            sourceEventID: event.eventID, sourcePosition: event.position, environment: event.environment)
        if let (reversal, _) = pendingCreditReversals.removeValue(forKey: event.eventID) {
            window.cuts.append(.init(at: start, eventID: reversal, cause: .creditReversal))
        }
        add(window)
        byPurchase[PurchaseOwnership.creditPurchaseID(event.eventID), default: []].append(windows.count - 1)
    }

    /// The end of the entitlement's contiguous coverage containing `t`: `t` itself when nothing covers it,
    /// nil when the coverage never ends (then a stacked grant starts at `t`, beside it).
    mutating func coverageEnd(_ entitlement: String, at t: Timestamp, includingCredits: Bool) -> Timestamp? {
        let cached = includingCredits ? runsWithCredits[entitlement] : runsWithoutCredits[entitlement]
        let runs = cached ?? buildRuns(entitlement, includingCredits: includingCredits)
        guard let end = runs.runEnd(containing: t) else { return t }
        return end
    }

    /// The entitlement's runs from its windows in start order (after a cut, or at the first stacked grant).
    mutating func buildRuns(_ entitlement: String, includingCredits: Bool) -> CoverageRuns {
        var runs = CoverageRuns()
        for i in byEntitlementByStart[entitlement] ?? [] {
            if !includingCredits && windows[i].kind == .credit { continue }
            let start = windows[i].start
            let end = windows[i].end
            if end == start { continue }
            runs.insert(start, end)
        }
        if includingCredits { runsWithCredits[entitlement] = runs } else { runsWithoutCredits[entitlement] = runs }
        return runs
    }

    /// A window of the entitlement changed its end: its runs are built again when next needed.
    mutating func runsChanged(_ entitlement: String) {
        runsWithCredits[entitlement] = nil
        runsWithoutCredits[entitlement] = nil
    }
}

/// Disjoint runs of overlapping or touching half-open intervals, in start order: `Coverage.runEnd` by binary
/// search. An interval is merged in by finding the runs it overlaps or touches.
struct CoverageRuns: Sendable {
    /// Sorted by start, pairwise neither overlapping nor touching; a nil end never ends.
    private(set) var runs: [(start: Timestamp, end: Timestamp?)] = []

    /// The index of the first run whose end is at or after `t` (touching counts), i.e. that could merge with
    /// an interval starting at `t`.
    private func firstReaching(_ t: Timestamp) -> Int {
        var (low, high) = (0, runs.count)
        while low < high {
            let mid = (low + high) / 2
            if let end = runs[mid].end, end < t { low = mid + 1 } else { high = mid }
        }
        return low
    }

    mutating func insert(_ start: Timestamp, _ end: Timestamp?) {
        let i = firstReaching(start)
        var (s, e) = (start, end)
        var j = i
        // Merge every run that starts at or before the interval's end (touching included).
        while j < runs.count, e.map({ runs[j].start <= $0 }) ?? true {
            s = min(s, runs[j].start)
            e = (e == nil || runs[j].end == nil) ? nil : max(e!, runs[j].end!)
            j += 1
        }
        runs.replaceSubrange(i..<j, with: [(s, e)])
    }

    /// As `Coverage.runEnd`: nil if no interval contains `t`, `.some(nil)` if its run never ends.
    func runEnd(containing t: Timestamp) -> Timestamp?? {
        // The last run starting at or before t.
        var (low, high) = (0, runs.count)
        while low < high {
            let mid = (low + high) / 2
            if runs[mid].start <= t { low = mid + 1 } else { high = mid }
        }
        guard low > 0 else { return nil }
        let run = runs[low - 1]
        guard run.end.map({ t < $0 }) ?? true else { return nil }
        return .some(run.end)
    }
}

/// Runs of overlapping or touching intervals.
public enum Coverage {
    /// The end of the maximal run of overlapping/touching intervals that contains `t`:
    /// `nil` if no interval contains `t`, `.some(nil)` if the run never ends.
    /// Sorted by start and swept once: O(n log n) (a fixpoint loop over every interval was O(n²)).
    public static func runEnd<S: Sequence>(_ intervals: S, containing t: Timestamp) -> Timestamp??
    where S.Element == (Timestamp, Timestamp?) {
        var sorted = Array(intervals)
        // Windows are mostly gathered in start order already: sort only when they are not.
        if zip(sorted, sorted.dropFirst()).contains(where: { $0.0 > $1.0 }) { sorted.sort { $0.0 < $1.0 } }
        guard sorted.contains(where: { $0.0 <= t && ($0.1.map { t < $0 } ?? true) }) else { return nil }
        var end: Timestamp = t
        for (s, e) in sorted {
            guard s <= end else { break }
            guard let e else { return .some(nil) }
            if e > end { end = e }
        }
        return .some(end)
    }
}
