import Foundation

/// What one subscriber's events say: every window (cut and void ones included) and the renewal state.
public struct SubscriberLedger: Sendable, Hashable {
    public var windows: [Window]
    /// Per entitlement: the last `auto_renew_changed.enabled`, or true after an auto-renewable purchase.
    public var autoRenew: [String: Bool]
    /// Entitlements whose subscription lapsed (an `expiration` or `cancellation`) with no purchase since.
    public var lapsed: Set<String>
    /// Refunds whose transaction never appeared in the fold (flagged for the audit trail).
    public var unmatchedRefunds: [UUID]

    public init(windows: [Window], autoRenew: [String: Bool], lapsed: Set<String>, unmatchedRefunds: [UUID]) {
        self.windows = windows
        self.autoRenew = autoRenew
        self.lapsed = lapsed
        self.unmatchedRefunds = unmatchedRefunds
    }

    public static let empty = SubscriberLedger(windows: [], autoRenew: [:], lapsed: [], unmatchedRefunds: [])
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
    var autoRenew: [String: Bool] = [:]
    var lapsed: Set<String> = []
    var refunds: [Refund] = []
    /// Indexes into `refunds` per transaction id.
    var refundsByTransaction: [String: [Int]] = [:]
    var pendingCreditReversals: [UUID: (UUID, Timestamp)] = [:]
    // Indexes, so that every event touches only the windows it names: a subscriber with n windows folds in
    // O(n log n), not O(n²) (a refund, a cancellation or a reversal no longer scans every window).
    /// Windows of each transaction id (refunds, reversals).
    var byTransaction: [String: [Int]] = [:]
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

    var result: SubscriberLedger {
        let seen = Set(byTransaction.keys)
        return SubscriberLedger(
            windows: windows.sorted { ($0.entitlement, $0.start, $0.sourcePosition) < ($1.entitlement, $1.start, $1.sourcePosition) },
            autoRenew: autoRenew, lapsed: lapsed,
            unmatchedRefunds: refunds.filter { !$0.reversed && !seen.contains($0.transactionID) }.map(\.eventID))
    }

    mutating func add(_ window: Window) {
        let i = windows.count
        windows.append(window)
        if let txn = window.transactionID { byTransaction[txn, default: []].append(i) }
        byEntitlement[window.entitlement, default: []].append(i)
        insertByStart(i)
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
        if isCancellation { lastCancellation[e] = (at, cut) } else { lastExpiration[e] = (at, cut) }
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
            }
        case .refundReversal(let r):
            guard let txn = r.transactionID,
                let i = refundsByTransaction[txn]?.last(where: { !refunds[$0].reversed })
            else { return }
            refunds[i].reversed = true
            let refundID = refunds[i].eventID
            for w in byTransaction[txn] ?? [] { windows[w].cuts.removeAll { $0.eventID == refundID } }
        case .cancellation(let c):
            let entitlements = c.entitlements.isEmpty ? Array(byEntitlement.keys) : c.entitlements.filter { byEntitlement[$0] != nil }
            for e in entitlements {
                cutForGood(e, at: event.occurredAt, eventID: event.eventID, cause: .cancellation)
                lapsed.insert(e)
            }
        case .credit(let c): credit(event, c)
        case .creditReversal(let r):
            guard let id = r.creditEventID else { return }
            if let i = creditWindow[id] {
                windows[i].cuts.append(.init(at: windows[i].start, eventID: event.eventID, cause: .creditReversal))
            } else {
                pendingCreditReversals[id] = (event.eventID, event.occurredAt)
            }
        case .autoRenewChanged(let a):
            guard let enabled = a.enabled else { return }
            for e in a.entitlements { autoRenew[e] = enabled }
        case .billingIssue(let b):
            guard let until = b.graceUntil, until > event.occurredAt else { return }
            for e in b.entitlements {
                add(
                    Window(
                        entitlement: e, start: event.occurredAt, grantedEnd: until, kind: .grace,
                        productID: b.productID, transactionID: nil, sourceEventID: event.eventID,
                        sourcePosition: event.position, environment: event.environment))
            }
        case .storeNotice:
            return
        case .expiration(let x):
            for e in x.entitlements {
                cutForGood(e, at: event.occurredAt, eventID: event.eventID, cause: .expiration)
                lapsed.insert(e)
            }
        }
    }

    mutating func transaction(_ event: FoldEvent, _ t: TransactionData) {
        let txn = t.transactionID
        let windowKind = t.windowKind
        for e in t.entitlements {
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
            for r in txn.flatMap({ refundsByTransaction[$0] }) ?? [] where !refunds[r].reversed && refunds[r].cuts {
                window.cuts.append(.init(at: refunds[r].at, eventID: refunds[r].eventID, cause: .refund))
            }
            add(window)
            lapsed.remove(e)
            if t.kind == .autoRenewable && (event.type == .purchase || autoRenew[e] == nil) { autoRenew[e] = true }
        }
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
    }

    /// The end of the entitlement's contiguous coverage containing `t`: `t` itself when nothing covers it,
    /// nil when the coverage never ends (then a stacked grant starts at `t`, beside it).
    func coverageEnd(_ entitlement: String, at t: Timestamp, includingCredits: Bool) -> Timestamp? {
        // Read in place, without copying each window: this runs for every stacked grant (a pack, a credit),
        // once per such event over all of the entitlement's windows.
        guard let indexes = byEntitlementByStart[entitlement] else { return t }
        var intervals: [(Timestamp, Timestamp?)] = []
        intervals.reserveCapacity(indexes.count)
        for i in indexes {
            if !includingCredits && windows[i].kind == .credit { continue }
            let start = windows[i].start
            let end = windows[i].end
            if end == start { continue }
            intervals.append((start, end))
        }
        guard let end = Coverage.runEnd(intervals, containing: t) else { return t }
        return end
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
