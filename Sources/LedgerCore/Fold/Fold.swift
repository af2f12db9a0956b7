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
        var state = FoldState()
        for event in events.sorted(by: { ($0.occurredAt, $0.position) < ($1.occurredAt, $1.position) }) {
            state.apply(event)
        }
        return state.result
    }
}

private struct Refund {
    var eventID: UUID
    var at: Timestamp
    var transactionID: String
    var reversed = false
}

private struct FoldState {
    var windows: [Window] = []
    var autoRenew: [String: Bool] = [:]
    var lapsed: Set<String> = []
    var refunds: [Refund] = []
    var pendingCreditReversals: [UUID: (UUID, Timestamp)] = [:]

    var result: SubscriberLedger {
        let seen = Set(windows.compactMap(\.transactionID))
        return SubscriberLedger(
            windows: windows.sorted { ($0.entitlement, $0.start, $0.sourcePosition) < ($1.entitlement, $1.start, $1.sourcePosition) },
            autoRenew: autoRenew, lapsed: lapsed,
            unmatchedRefunds: refunds.filter { !$0.reversed && !seen.contains($0.transactionID) }.map(\.eventID))
    }

    mutating func apply(_ event: RecordedEvent) {
        let d = EventData(event.data)
        switch event.type {
        case .purchase, .renewal: transaction(event, d)
        case .refund:
            guard let txn = d.string("transaction_id") else { return }
            refunds.append(Refund(eventID: event.eventID, at: event.occurredAt, transactionID: txn))
            for i in windows.indices where windows[i].transactionID == txn {
                windows[i].cuts.append(.init(at: event.occurredAt, eventID: event.eventID, cause: .refund))
            }
        case .refundReversal:
            guard let txn = d.string("transaction_id"),
                let r = refunds.lastIndex(where: { $0.transactionID == txn && !$0.reversed })
            else { return }
            refunds[r].reversed = true
            let refundID = refunds[r].eventID
            for i in windows.indices { windows[i].cuts.removeAll { $0.eventID == refundID } }
        case .cancellation:
            let only = Set(d.strings("entitlements"))
            for i in windows.indices where only.isEmpty || only.contains(windows[i].entitlement) {
                windows[i].cuts.append(.init(at: event.occurredAt, eventID: event.eventID, cause: .cancellation))
            }
            for e in Set(windows.map(\.entitlement)) where only.isEmpty || only.contains(e) { lapsed.insert(e) }
        case .credit: credit(event, d)
        case .creditReversal:
            guard let id = d.string("credit_event_id").flatMap(UUID.init(uuidString:)) else { return }
            if let i = windows.firstIndex(where: { $0.sourceEventID == id && $0.kind == .credit }) {
                windows[i].cuts.append(.init(at: windows[i].start, eventID: event.eventID, cause: .creditReversal))
            } else {
                pendingCreditReversals[id] = (event.eventID, event.occurredAt)
            }
        case .autoRenewChanged:
            guard let enabled = d.bool("enabled") else { return }
            for e in d.strings("entitlements") { autoRenew[e] = enabled }
        case .billingIssue:
            guard let until = d.timestamp("grace_until"), until > event.occurredAt else { return }
            for e in d.strings("entitlements") {
                windows.append(
                    Window(
                        entitlement: e, start: event.occurredAt, grantedEnd: until, kind: .grace,
                        productID: d.string("product_id"), transactionID: nil, sourceEventID: event.eventID,
                        sourcePosition: event.position, environment: event.environment))
            }
        case .expiration:
            for e in d.strings("entitlements") {
                for i in windows.indices where windows[i].entitlement == e && windows[i].kind == .grace {
                    windows[i].cuts.append(.init(at: event.occurredAt, eventID: event.eventID, cause: .expiration))
                }
                lapsed.insert(e)
            }
        }
    }

    mutating func transaction(_ event: RecordedEvent, _ d: EventData) {
        let kind = d.string("kind") ?? "auto_renewable"
        let txn = d.string("transaction_id")
        let windowKind: Window.Kind =
            switch d.string("offer") {
            case "trial": .trial
            case "intro": .intro
            case "promo": .promo
            default: kind == "free" ? .free : kind == "lifetime" ? .lifetime : .paid
            }
        for e in d.strings("entitlements") {
            let start: Timestamp
            let end: Timestamp?
            if let ps = d.timestamp("period_start"), let pe = d.timestamp("period_end") {
                (start, end) = (ps, pe)
            } else if kind == "free" || kind == "lifetime" {
                (start, end) = (event.occurredAt, nil)
            } else if let duration = d.duration("duration") {
                // Time stacks: a pack bought while covered starts where the coverage ends (credits excluded).
                let s = coverageEnd(e, at: event.occurredAt, includingCredits: false) ?? event.occurredAt
                (start, end) = (s, duration.added(to: s))
            } else {
                continue
            }
            var window = Window(
                entitlement: e, start: start, grantedEnd: end, kind: windowKind, productID: d.string("product_id"),
                transactionID: txn, sourceEventID: event.eventID, sourcePosition: event.position,
                environment: event.environment)
            for refund in refunds where refund.transactionID == txn && !refund.reversed {
                window.cuts.append(.init(at: refund.at, eventID: refund.eventID, cause: .refund))
            }
            windows.append(window)
            lapsed.remove(e)
            if kind == "auto_renewable" && (event.type == .purchase || autoRenew[e] == nil) { autoRenew[e] = true }
        }
    }

    mutating func credit(_ event: RecordedEvent, _ d: EventData) {
        guard let e = d.string("entitlement") else { return }
        let start: Timestamp
        let end: Timestamp
        if let ws = d.timestamp("window_start"), let we = d.timestamp("window_end") {
            (start, end) = (ws, we)
        } else if let duration = d.duration("duration") {
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
        windows.append(window)
    }

    /// The end of the entitlement's contiguous coverage containing `t`: `t` itself when nothing covers it,
    /// nil when the coverage never ends (then a stacked grant starts at `t`, beside it).
    func coverageEnd(_ entitlement: String, at t: Timestamp, includingCredits: Bool) -> Timestamp? {
        let intervals = windows.filter { $0.entitlement == entitlement && !$0.isVoid && (includingCredits || $0.kind != .credit) }
            .map { ($0.start, $0.end) }
        guard let end = Coverage.runEnd(intervals, containing: t) else { return t }
        return end
    }
}

/// Runs of overlapping or touching intervals.
public enum Coverage {
    /// The end of the maximal run of overlapping/touching intervals that contains `t`:
    /// `nil` if no interval contains `t`, `.some(nil)` if the run never ends.
    public static func runEnd(_ intervals: [(Timestamp, Timestamp?)], containing t: Timestamp) -> Timestamp?? {
        guard intervals.contains(where: { $0.0 <= t && ($0.1.map { t < $0 } ?? true) }) else { return nil }
        var end: Timestamp = t
        var changed = true
        while changed {
            changed = false
            for (s, e) in intervals where s <= end {
                guard let e else { return .some(nil) }
                if e > end {
                    end = e
                    changed = true
                }
            }
        }
        return .some(end)
    }
}

/// Typed reads of an event's `data` (already validated when the event was appended).
struct EventData {
    let members: [String: JSONValue]
    init(_ members: [String: JSONValue]) { self.members = members }

    func string(_ k: String) -> String? { members[k]?.stringValue }
    func bool(_ k: String) -> Bool? { members[k]?.boolValue }
    func strings(_ k: String) -> [String] { members[k]?.arrayValue?.compactMap(\.stringValue) ?? [] }
    func timestamp(_ k: String) -> Timestamp? { string(k).flatMap { try? Timestamp(rfc3339: $0) } }
    func duration(_ k: String) -> ISODuration? { string(k).flatMap(ISODuration.init) }
}
