/// A subscriber as RevenueCat's REST API v1 `GET /subscribers/{app_user_id}` describes a customer, computed
/// from the ledger: the entitlements are exactly `SubscriberLedger.entitlements(at:)` (what
/// `GET /v1/subscribers/{id}/entitlements` answers), the subscriptions and one-time purchases come from the
/// subscriber's events. Pure: the request time is given. docs/switching.md lists each field and what differs.
public struct RevenueCatCustomerInfo: Sendable, Hashable {
    public struct Entitlement: Sendable, Hashable {
        public var name: String
        /// Nil: never expires (a lifetime or free window holds it).
        public var expiresDate: Timestamp?
        public var gracePeriodExpiresDate: Timestamp?
        /// The granting window's product; a support credit (no product) is named as RevenueCat names its
        /// promotional grants, `rc_promo_<entitlement>_custom`.
        public var productIdentifier: String
        public var purchaseDate: Timestamp
    }

    public struct Subscription: Sendable, Hashable {
        public var productIdentifier: String
        public var expiresDate: Timestamp?
        public var purchaseDate: Timestamp
        public var originalPurchaseDate: Timestamp
        /// `normal`, `trial`, `intro` or `promotional`.
        public var periodType: String
        public var store: String
        public var isSandbox: Bool
        public var unsubscribeDetectedAt: Timestamp?
        public var billingIssuesDetectedAt: Timestamp?
        public var gracePeriodExpiresDate: Timestamp?
        public var refundedAt: Timestamp?
        public var ownershipType: String
        public var storeTransactionID: String?
    }

    public struct NonSubscription: Sendable, Hashable {
        public var id: String
        public var purchaseDate: Timestamp
        public var originalPurchaseDate: Timestamp
        public var store: String
        public var isSandbox: Bool
        public var storeTransactionID: String?
    }

    public var requestDate: Timestamp
    public var originalAppUserID: String
    public var firstSeen: Timestamp
    public var lastSeen: Timestamp
    public var managementURL: String?
    public var entitlements: [Entitlement]
    /// Keyed by product id.
    public var subscriptions: [String: Subscription]
    /// Keyed by product id.
    public var nonSubscriptions: [String: [NonSubscription]]

    /// RevenueCat's store names for the ledger's sources.
    public static func store(forSource source: String) -> String {
        switch source {
        case "apple": "app_store"
        case "google": "play_store"
        case "stripe": "stripe"
        case "revenuecat", "support": "promotional"
        default: source
        }
    }

    public init(subscriberID: String, events: [RecordedEvent], ledger: SubscriberLedger, at now: Timestamp) {
        requestDate = now
        originalAppUserID = subscriberID
        let known = events.filter { $0.occurredAt <= now }
        firstSeen = known.map(\.occurredAt).min() ?? now
        lastSeen = events.map(\.recordedAt).max() ?? now

        // Entitlements: the ledger's own answer at `now`.
        entitlements = ledger.entitlements(at: now).map { state in
            let held = ledger.windows.filter { w in
                w.entitlement == state.entitlement && w.start <= now && (w.end.map { end in end > w.start } ?? true)
            }
            let granting = held.filter { $0.kind != .grace && $0.productID == state.productID }.max { $0.start < $1.start }
            var expires = state.expiresAt
            if !state.active, expires == nil {
                // Not held now and never ended before now (only void windows, or windows yet to come): expired
                // as of now, never a date RevenueCat's clients would read as active.
                expires = now
            }
            return Entitlement(
                name: state.entitlement, expiresDate: expires, gracePeriodExpiresDate: state.inGrace ? state.expiresAt : nil,
                productIdentifier: state.productID ?? "rc_promo_\(state.entitlement)_custom",
                purchaseDate: granting?.start ?? held.max { $0.start < $1.start }?.start
                    ?? ledger.windows.filter { $0.entitlement == state.entitlement }.map(\.start).max() ?? now)
        }

        // Subscriptions and one-time purchases, from the transactions.
        var byProduct: [String: [(RecordedEvent, TransactionData)]] = [:]
        var nonSubscriptions: [String: [NonSubscription]] = [:]
        for event in known where event.type == .purchase || event.type == .renewal {
            let t = TransactionData(event.data)
            guard let product = t.productID else { continue }
            switch t.kind {
            case .autoRenewable, .nonRenewing:
                byProduct[product, default: []].append((event, t))
            case .lifetime, .free:
                nonSubscriptions[product, default: []].append(
                    NonSubscription(
                        id: event.eventID.lowercasedString, purchaseDate: event.occurredAt, originalPurchaseDate: event.occurredAt,
                        store: Self.store(forSource: event.source), isSandbox: event.environment == .sandbox,
                        storeTransactionID: t.transactionID))
            }
        }
        self.nonSubscriptions = nonSubscriptions
        var subscriptions: [String: Subscription] = [:]
        let inFoldOrder = known.sorted { ($0.occurredAt, $0.position) < ($1.occurredAt, $1.position) }
        for (product, transactions) in byProduct {
            let ordered = transactions.sorted {
                ($0.1.periodStart ?? $0.0.occurredAt, $0.0.position) < ($1.1.periodStart ?? $1.0.occurredAt, $1.0.position)
            }
            let (event, latest) = ordered[ordered.count - 1]
            let start = latest.periodStart ?? event.occurredAt
            let entitlementsOfProduct = Set(transactions.flatMap(\.1.entitlements))
            let windows = ledger.windows.filter { $0.transactionID != nil && $0.transactionID == latest.transactionID && $0.kind != .grace }
            let expires = windows.isEmpty ? latest.periodEnd : windows.compactMap(\.end).max()
            // The chain's last `purchase` starts auto-renew afresh (docs/semantics.md section 3, will_renew).
            let chainStart = ordered.last { $0.0.type == .purchase }?.0.occurredAt ?? ordered[0].0.occurredAt
            var unsubscribe: Timestamp?
            var billing: (Timestamp, Timestamp?)?
            var refunded: Timestamp?
            for e in inFoldOrder {
                switch EventPayload(type: e.type, data: e.data) {
                case .autoRenewChanged(let a) where e.occurredAt >= chainStart && !entitlementsOfProduct.isDisjoint(with: a.entitlements):
                    unsubscribe = a.enabled == false ? e.occurredAt : nil
                case .billingIssue(let b) where b.productID == product && e.occurredAt >= start:
                    billing = (e.occurredAt, b.graceUntil)
                case .refund(let r) where r.transactionID != nil && r.transactionID == latest.transactionID && r.cut:
                    refunded = e.occurredAt
                case .refundReversal(let r) where r.transactionID != nil && r.transactionID == latest.transactionID:
                    refunded = nil
                default: break
                }
            }
            let periodType: String
            switch latest.offer {
            case .trial: periodType = "trial"
            case .intro: periodType = "intro"
            case .promo: periodType = "promotional"
            case .none: periodType = "normal"
            }
            subscriptions[product] = Subscription(
                productIdentifier: product, expiresDate: expires, purchaseDate: start,
                originalPurchaseDate: ordered[0].1.periodStart ?? ordered[0].0.occurredAt, periodType: periodType,
                store: Self.store(forSource: event.source), isSandbox: event.environment == .sandbox, unsubscribeDetectedAt: unsubscribe,
                billingIssuesDetectedAt: billing?.0, gracePeriodExpiresDate: billing?.1, refundedAt: refunded, ownershipType: "PURCHASED",
                storeTransactionID: latest.transactionID)
        }
        self.subscriptions = subscriptions
        // Where the subscriber manages the subscription that runs longest now.
        let running = subscriptions.values.filter { ($0.expiresDate ?? .maximum) > now }.max {
            ($0.expiresDate ?? .maximum) < ($1.expiresDate ?? .maximum)
        }
        switch running?.store {
        case "app_store": managementURL = "https://apps.apple.com/account/subscriptions"
        case "play_store": managementURL = "https://play.google.com/store/account/subscriptions"
        default: managementURL = nil
        }
    }
}
