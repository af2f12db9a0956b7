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

    public init(windows: [Window], renewing: [String: [Timestamp]], unmatchedRefunds: [UUID]) {
        self.windows = windows
        self.renewing = renewing
        self.unmatchedRefunds = unmatchedRefunds
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
    // Indexes, so that every event touches only the windows it names: a subscriber with n windows folds in
    // O(n log n), not O(n²) (a refund, a cancellation or a reversal no longer scans every window).
    /// Windows of each transaction id (refunds, reversals).
    var byTransaction: [String: [Int]] = [:]
    /// Windows of each entitlement (coverage for stacked grants).
    var byEntitlement: [String: [Int]] = [:]
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
        var renewing: [String: [Timestamp]] = [:]
        for (e, indexes) in byEntitlement {
            let covered = indexes.filter { renewable[$0] && !windows[$0].isVoid }.map { (windows[$0].start, windows[$0].end) }
            guard !covered.isEmpty else { continue }
            let toggles = RenewalTimeline.toggles(
                steps: RenewalTimeline.merged(renewalSteps[e] ?? [], cancellationsOfAll), covered: covered)
            if !toggles.isEmpty { renewing[e] = toggles }
        }
        return SubscriberLedger(
            windows: windows.sorted { ($0.entitlement, $0.start, $0.sourcePosition) < ($1.entitlement, $1.start, $1.sourcePosition) },
            renewing: renewing,
            unmatchedRefunds: refunds.filter { !$0.reversed && !seen.contains($0.transactionID) }.map(\.eventID))
    }

    mutating func add(_ window: Window, renewable: Bool = false) {
        let i = windows.count
        windows.append(window)
        self.renewable.append(renewable)
        if let txn = window.transactionID { byTransaction[txn, default: []].append(i) }
        byEntitlement[window.entitlement, default: []].append(i)
        uncancelled[window.entitlement, default: []].append(i)
        if window.kind == .grace { unexpiredGrace[window.entitlement, default: []].append(i) }
        if window.kind == .credit { creditWindow[window.sourceEventID] = i }
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
            for r in txn.flatMap({ refundsByTransaction[$0] }) ?? [] where !refunds[r].reversed && refunds[r].cuts {
                window.cuts.append(.init(at: refunds[r].at, eventID: refunds[r].eventID, cause: .refund))
            }
            add(window, renewable: renews)
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
        let intervals = (byEntitlement[entitlement] ?? []).lazy.map { windows[$0] }
            .filter { !$0.isVoid && (includingCredits || $0.kind != .credit) }
            .map { ($0.start, $0.end) }
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
        let sorted = intervals.sorted { $0.0 < $1.0 }
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
