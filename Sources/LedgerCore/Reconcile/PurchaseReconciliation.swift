/// What one side (the ledger, or a store's API) says of one purchase, in the terms a reconciliation compares
/// (docs/switching.md, "Reconcile"). A nil member is one that side does not say: it is not compared.
public struct PurchaseState: Sendable, Hashable {
    /// Access now (a paid, trial or grace window of the purchase covers the time of the comparison).
    public var active: Bool?
    /// The end of the purchase's latest paid period.
    public var expiresAt: Timestamp?
    /// Whether it renews at that end.
    public var autoRenew: Bool?
    /// Its latest transaction was refunded or revoked (and not reversed).
    public var refunded: Bool?
    /// It lapsed (an `expiration` after its latest transaction began).
    public var lapsed: Bool?

    public init(active: Bool? = nil, expiresAt: Timestamp? = nil, autoRenew: Bool? = nil, refunded: Bool? = nil, lapsed: Bool? = nil) {
        self.active = active
        self.expiresAt = expiresAt
        self.autoRenew = autoRenew
        self.refunded = refunded
        self.lapsed = lapsed
    }
}

/// A member on which the ledger and the store disagree.
public struct PurchaseDifference: Sendable, Hashable {
    public enum Field: String, Sendable, Hashable, CaseIterable {
        case active
        case expiresAt = "expires_at"
        case autoRenew = "auto_renew"
        case refunded
        case lapsed
        /// Not a member: the purchase could not be compared at all (the store does not know it).
        case purchase
    }

    public var field: Field
    public var ledger: String?
    public var store: String?

    public init(field: Field, ledger: String?, store: String?) {
        self.field = field
        self.ledger = ledger
        self.store = store
    }
}

/// The ledger's side of one store purchase, read from its subscriber's events.
public struct LedgerPurchase: Sendable, Hashable {
    public var state: PurchaseState
    /// Transaction ids of its purchases and renewals.
    public var transactionIDs: Set<String>
    /// The products and entitlements they name.
    public var products: Set<String>
    public var entitlements: Set<String>
    /// Its latest transaction (by period start), if any.
    public var latestTransactionID: String?
    public var latestStart: Timestamp?
    public var environment: LedgerEnvironment
}

/// Reading a purchase's state out of the ledger and comparing it with a store's (pure: no clock, `now` given).
public enum PurchaseReconciliation {
    /// The purchase `purchaseID` of `store` (its `original_transaction_id`, else the transaction id of its first
    /// transaction) among a subscriber's events, as of `now`. Nil when none of its transactions is there.
    public static func ledger(_ events: [RecordedEvent], store: String, purchaseID: String, now: Timestamp) -> LedgerPurchase? {
        var txns: [(id: String, data: TransactionData, event: RecordedEvent)] = []
        for e in events where e.source == store && (e.type == .purchase || e.type == .renewal) {
            let t = TransactionData(e.data)
            guard t.purchaseID == purchaseID, let id = t.transactionID else { continue }
            txns.append((id, t, e))
        }
        guard !txns.isEmpty else { return nil }
        let ids = Set(txns.map(\.id))
        let products = Set(txns.compactMap(\.data.productID))
        let entitlements = Set(txns.flatMap(\.data.entitlements))
        let latest = txns.max {
            ($0.data.periodStart ?? $0.event.occurredAt, $0.event.position) < ($1.data.periodStart ?? $1.event.occurredAt, $1.event.position)
        }!
        let latestStart = latest.data.periodStart ?? latest.event.occurredAt
        let expiresAt = txns.compactMap(\.data.periodEnd).max()

        // The latest transaction's refund, unless a later reversal undid it; a revocation since it began (a
        // cancellation for Family Sharing or a chargeback: an immediate cancel ends access but refunds nothing).
        var refunded = false
        for e in events.sorted(by: { ($0.occurredAt, $0.position) < ($1.occurredAt, $1.position) }) {
            switch e.type {
            case .refund where e.data[EventDataKey.transactionID]?.stringValue == latest.id && e.data[EventDataKey.cut]?.boolValue != false:
                refunded = true
            case .refundReversal where e.data[EventDataKey.transactionID]?.stringValue == latest.id:
                refunded = false
            case .cancellation
            where e.occurredAt >= latestStart && ["family_revoked", "chargeback"].contains(e.data[EventDataKey.reason]?.stringValue ?? "")
                && touches(e, products: products, entitlements: entitlements):
                refunded = true
            default: break
            }
        }
        // The last auto-renew change since the latest transaction began; none: it renews (an auto-renewable one).
        let changes = events.filter {
            $0.type == .autoRenewChanged && $0.occurredAt >= latestStart && touches($0, products: products, entitlements: entitlements)
        }
        let lastChange = changes.max { ($0.occurredAt, $0.position) < ($1.occurredAt, $1.position) }
        let autoRenew: Bool? =
            latest.data.kind == .autoRenewable ? (lastChange?.data[EventDataKey.enabled]?.boolValue ?? true) : nil
        let lapsed = events.contains {
            $0.type == .expiration && $0.occurredAt >= latestStart && touches($0, products: products, entitlements: entitlements)
        }
        let windows = Fold.fold(events).windows
        let active = windows.contains { w in
            w.covers(now)
                && ((w.transactionID.map(ids.contains) ?? false)
                    || (w.kind == .grace && (w.productID.map(products.contains) ?? entitlements.contains(w.entitlement))))
        }
        return LedgerPurchase(
            state: PurchaseState(active: active, expiresAt: expiresAt, autoRenew: autoRenew, refunded: refunded, lapsed: lapsed),
            transactionIDs: ids, products: products, entitlements: entitlements, latestTransactionID: latest.id, latestStart: latestStart,
            environment: latest.event.environment)
    }

    /// An event about the purchase's products: it names one of them, else one of their entitlements (none named: all).
    static func touches(_ e: RecordedEvent, products: Set<String>, entitlements: Set<String>) -> Bool {
        if let p = e.data[EventDataKey.productID]?.stringValue { return products.contains(p) }
        let named = (e.data[EventDataKey.entitlements]?.arrayValue ?? []).compactMap(\.stringValue)
        return named.isEmpty || named.contains(where: entitlements.contains)
    }

    /// The members both sides state and on which they differ, in a fixed order. Times are compared to the
    /// second (stores state milliseconds at most; a period's end is the store's as recorded).
    public static func differences(ledger: PurchaseState, store: PurchaseState) -> [PurchaseDifference] {
        var out: [PurchaseDifference] = []
        func bool(_ b: Bool?) -> String? { b.map { $0 ? "true" : "false" } }
        if let s = store.active, let l = ledger.active, s != l { out.append(.init(field: .active, ledger: bool(l), store: bool(s))) }
        if let s = store.expiresAt, ledger.expiresAt.map({ $0.microseconds / 1_000_000 }) != s.microseconds / 1_000_000 {
            out.append(.init(field: .expiresAt, ledger: ledger.expiresAt?.rfc3339, store: s.rfc3339))
        }
        if let s = store.autoRenew, let l = ledger.autoRenew, s != l { out.append(.init(field: .autoRenew, ledger: bool(l), store: bool(s))) }
        if let s = store.refunded, s != (ledger.refunded ?? false) {
            out.append(.init(field: .refunded, ledger: bool(ledger.refunded ?? false), store: bool(s)))
        }
        if let s = store.lapsed, s, ledger.lapsed != true { out.append(.init(field: .lapsed, ledger: bool(ledger.lapsed ?? false), store: bool(s))) }
        return out
    }
}
