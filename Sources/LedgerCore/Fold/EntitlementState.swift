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
}

extension SubscriberLedger {
    /// The state of every entitlement this subscriber ever had a window for, at `t`.
    public func entitlements(at t: Timestamp) -> [EntitlementState] {
        let byEntitlement = Dictionary(grouping: windows.filter { !$0.isVoid }, by: \.entitlement)
        let all = Set(windows.map(\.entitlement))
        return all.sorted().map { e in
            let ws = byEntitlement[e] ?? []
            let covering = ws.filter { $0.covers(t) }
            let active = !covering.isEmpty
            let expiresAt: Timestamp?
            let product: String?
            if active {
                expiresAt = Coverage.runEnd(ws.map { ($0.start, $0.end) }, containing: t) ?? nil
                product = covering.max(by: { Self.rank($0) < Self.rank($1) })?.productID
            } else {
                let ended = ws.filter { $0.end.map { $0 <= t } ?? false }
                expiresAt = ended.compactMap(\.end).max()
                product = ended.filter { $0.productID != nil }.max(by: { Self.endedRank($0) < Self.endedRank($1) })?.productID
            }
            let inGrace = active && covering.allSatisfy { $0.kind == .grace }
            let inTrial = covering.contains { $0.kind == .trial } && !covering.contains { $0.kind == .paid }
            let willRenew = (autoRenew[e] ?? false) && !lapsed.contains(e)
            return EntitlementState(
                entitlement: e, active: active, expiresAt: expiresAt, inGrace: inGrace, inTrial: inTrial,
                willRenew: willRenew, productID: product)
        }
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
