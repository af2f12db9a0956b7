/// What one event did to one entitlement, seen at one instant: the difference between the subscriber's
/// entitlement state before the event (the fold of the events at lower positions) and after it.
public struct EntitlementChange: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable, Comparable {
        /// Not active before, active after.
        case granted
        /// Active before, not active after (a refund, a cancellation, an expiration, a reversal).
        case revoked
        /// Active (or ending exactly at the instant) before, and active after until later.
        case extended
        /// Active before and after, but ending sooner (a refund of a later period).
        case shortened
        case renewalEnabled = "renewal_enabled"
        case renewalDisabled = "renewal_disabled"
        case graceStarted = "grace_started"
        case graceEnded = "grace_ended"
        case trialStarted = "trial_started"
        /// Active through it, no longer in a trial (a paid period took over).
        case trialConverted = "trial_converted"
        case productChanged = "product_changed"
        /// The entitlement's windows changed with no effect at the instant (a future period, a past refund):
        /// a backend that keeps the whole schedule reads it again.
        case windowsChanged = "windows_changed"

        public static func < (a: Kind, b: Kind) -> Bool {
            allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
        }
    }

    public var entitlement: String
    public var kinds: [Kind]
    /// Nil when the subscriber never had a window of this entitlement before the event.
    public var before: EntitlementState?
    public var after: EntitlementState?

    /// The changes `event` made, entitlement by entitlement (sorted), each seen at `instant`. Entitlements
    /// the event left as they were are not listed.
    public static func between(_ before: SubscriberLedger, _ after: SubscriberLedger, at instant: Timestamp) -> [EntitlementChange] {
        between(before, after, at: instant, afterStates: after.entitlements(at: instant))
    }

    /// `between`, given `after.entitlements(at: instant)` already computed (a webhook message needs both).
    /// One pass per entitlement over the windows, no copies: a message costs O(windows), not more.
    public static func between(
        _ before: SubscriberLedger, _ after: SubscriberLedger, at instant: Timestamp, afterStates: [EntitlementState]
    ) -> [EntitlementChange] {
        let old = Dictionary(before.entitlements(at: instant).map { ($0.entitlement, $0) }, uniquingKeysWith: { a, _ in a })
        let new = Dictionary(afterStates.map { ($0.entitlement, $0) }, uniquingKeysWith: { a, _ in a })
        var out: [EntitlementChange] = []
        let justBefore = Timestamp(microseconds: instant.microseconds - 1)
        for e in Set(old.keys).union(new.keys).sorted() {
            var kinds = kinds(old[e], new[e], at: instant, renewingUntilNow: before.willRenew(e, at: justBefore))
            if kinds.isEmpty
                && !before.windows.lazy.filter({ $0.entitlement == e }).elementsEqual(after.windows.lazy.filter { $0.entitlement == e })
            {
                kinds = [.windowsChanged]
            }
            guard !kinds.isEmpty else { continue }
            out.append(EntitlementChange(entitlement: e, kinds: kinds, before: old[e], after: new[e]))
        }
        return out
    }

    /// `renewingUntilNow`: whether the entitlement would renew just before the instant (before the event).
    static func kinds(_ b: EntitlementState?, _ a: EntitlementState?, at instant: Timestamp, renewingUntilNow: Bool = false) -> [Kind] {
        let wasActive = b?.active ?? false
        // A window that ends exactly at the instant is not active then (windows are half-open), but a renewal
        // continuing it extends the entitlement rather than granting it anew.
        let endedNow = !wasActive && b?.expiresAt == instant
        let isActive = a?.active ?? false
        var kinds: Set<Kind> = []
        switch (wasActive || endedNow, isActive) {
        case (false, true): kinds.insert(.granted)
        case (true, false): if wasActive { kinds.insert(.revoked) }
        case (true, true):
            let (old, new) = (b?.expiresAt, a?.expiresAt)
            if endedNow || later(new, than: old) { kinds.insert(.extended) } else if later(old, than: new) { kinds.insert(.shortened) }
            if b?.productID != a?.productID { kinds.insert(.productChanged) }
        case (false, false): break
        }
        // Likewise, a subscription that was renewing up to a window ending at the instant and renews after it
        // (a renewal at the period boundary) did not have renewal enabled anew.
        let renewedBefore = (b?.willRenew ?? false) || (endedNow && isActive && renewingUntilNow)
        let renews = a?.willRenew ?? false
        if renews && !renewedBefore { kinds.insert(.renewalEnabled) }
        if renewedBefore && !renews { kinds.insert(.renewalDisabled) }
        let (graceBefore, grace) = (wasActive && (b?.inGrace ?? false), isActive && (a?.inGrace ?? false))
        if grace && !graceBefore { kinds.insert(.graceStarted) }
        if graceBefore && !grace && isActive { kinds.insert(.graceEnded) }
        let (trialBefore, trial) = (wasActive && (b?.inTrial ?? false), isActive && (a?.inTrial ?? false))
        if trial && !trialBefore { kinds.insert(.trialStarted) }
        if trialBefore && !trial && isActive { kinds.insert(.trialConverted) }
        return kinds.sorted()
    }

    /// Whether `a` ends after `b`, where nil means never.
    private static func later(_ a: Timestamp?, than b: Timestamp?) -> Bool {
        switch (a, b) {
        case (nil, nil): false
        case (nil, .some): true
        case (.some, nil): false
        case (.some(let x), .some(let y)): x > y
        }
    }

    public var json: JSONValue {
        .object([
            "entitlement": .string(entitlement),
            "changes": .array(kinds.map { .string($0.rawValue) }),
            "before": before?.json ?? .null,
            "after": after?.json ?? .null,
        ])
    }
}
