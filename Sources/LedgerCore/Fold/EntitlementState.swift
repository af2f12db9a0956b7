/// Whether a subscriber has an entitlement at an instant (docs/semantics.md section 3, "Entitlement state").
public struct EntitlementState: Sendable, Hashable {
    public var entitlement: String
    public var active: Bool
    /// Active: end of the run of overlapping/touching windows containing the instant (nil: never ends).
    /// Inactive: when the entitlement last ended before the instant (nil if it never had a window that did).
    public var expiresAt: Timestamp?
    public var inGrace: Bool
    public var inTrial: Bool
    public var willRenew: Bool
    public var productID: String?
}

extension EntitlementState {
    /// As the API shows it (entitlement reads, webhook payloads).
    public var json: JSONValue {
        .object([
            "entitlement": .string(entitlement),
            "active": .bool(active),
            "expires_at": expiresAt.map { .string($0.rfc3339) } ?? .null,
            "in_grace": .bool(inGrace),
            "in_trial": .bool(inTrial),
            "will_renew": .bool(willRenew),
            "product_id": productID.map(JSONValue.string) ?? .null,
        ])
    }

    /// `json`'s members, written straight into a canonical object (entitlement reads are the hot path).
    public func write(to object: inout CanonicalObject) {
        object.member("active", bool: active)
        object.member("entitlement", string: entitlement)
        object.member("expires_at", string: expiresAt?.rfc3339)
        object.member("in_grace", bool: inGrace)
        object.member("in_trial", bool: inTrial)
        object.member("product_id", string: productID)
        object.member("will_renew", bool: willRenew)
    }
}

extension SubscriberLedger {
    /// The state of every entitlement this subscriber ever had a window for, at `t`.
    public func entitlements(at t: Timestamp) -> [EntitlementState] {
        guard let first = windows.first?.entitlement else { return [] }
        // Most subscribers have one entitlement: no grouping (this runs on every entitlement read).
        if windows.allSatisfy({ $0.entitlement == first }) { return [state(of: first, at: t)] }
        return Set(windows.map(\.entitlement)).sorted().map { state(of: $0, at: t) }
    }

    /// One entitlement's state at `t`, from its windows that are not void, in one pass without copies.
    private func state(of e: String, at t: Timestamp) -> EntitlementState {
        var covering: Int?  // the covering window that names the product (highest `rank`, first of equals)
        var (allGrace, anyTrial, anyPaid) = (true, false, false)
        var ended: Int?  // among ended windows with a product, the highest `endedRank`
        var lastEnd: Timestamp?
        for i in windows.indices where windows[i].entitlement == e && !windows[i].isVoid {
            let w = windows[i]
            if w.covers(t) {
                if let c = covering { if Self.rank(windows[c]) < Self.rank(w) { covering = i } } else { covering = i }
                if w.kind != .grace { allGrace = false }
                if w.kind == .trial { anyTrial = true }
                if w.kind == .paid { anyPaid = true }
            } else if let end = w.end, end <= t {
                if lastEnd.map({ $0 < end }) ?? true { lastEnd = end }
                if w.productID != nil {
                    if let c = ended { if Self.endedRank(windows[c]) < Self.endedRank(w) { ended = i } } else { ended = i }
                }
            }
        }
        let active = covering != nil
        let expiresAt: Timestamp?
        let product: String?
        if let covering {
            let intervals = windows.lazy.filter { $0.entitlement == e && !$0.isVoid }.map { ($0.start, $0.end) }
            expiresAt = Coverage.runEnd(intervals, containing: t) ?? nil
            product = windows[covering].productID
        } else {
            expiresAt = lastEnd
            product = ended.flatMap { windows[$0].productID }
        }
        // Through an auto-renewable or grace window covering t, as the fold's timeline says (it is a function of t).
        let willRenew = active && self.willRenew(e, at: t)
        return EntitlementState(
            entitlement: e, active: active, expiresAt: expiresAt, inGrace: active && allGrace, inTrial: anyTrial && !anyPaid,
            willRenew: willRenew, productID: product)
    }

    /// Which covering window names the product: store purchases first, then grace, then credits; latest
    /// start. Ties are broken by effective attributes only, never by recorded order.
    private static func rank(_ w: Window) -> (Int, Timestamp, String) {
        (tier(w), w.start, w.productID ?? "")
    }

    /// Which ended window names the product of a lapsed entitlement: the last to end, then as `rank`.
    private static func endedRank(_ w: Window) -> (Timestamp, Int, Timestamp, String) {
        (w.end ?? w.start, tier(w), w.start, w.productID ?? "")
    }

    private static func tier(_ w: Window) -> Int {
        switch w.kind {
        case .credit: 0
        case .grace: 1
        default: 2
        }
    }
}
