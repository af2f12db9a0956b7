import LedgerCore

/// What a subscription's state at Google (`purchases.subscriptionsv2.get`) says, after a notification.
public struct GoogleResolution: Sendable {
    public var drafts: [EventDraft]
    /// `externalAccountIdentifiers.obfuscatedExternalAccountId`: the subscriber, when the app set it.
    public var subscriberHint: String?
    public var environment: LedgerEnvironment
    /// The token this one replaced (an upgrade or downgrade): its subscriber is this one's.
    public var linkedPurchaseToken: String?
    /// The product to acknowledge (`…:acknowledge`) once the purchase is recorded; nil when Google has it.
    public var acknowledgeProductID: String?
}

/// Maps Google's subscription state to ledger drafts (docs/google.md). Every fact is keyed by Google's own
/// ids — order ids (`GPA.…`, renewals `GPA.…..N`), Pub/Sub message ids — so resolving twice appends nothing.
public enum GoogleSubscriptionMapper {
    public static let store = "google"

    /// Drafts for a subscription notification, from the purchase's current state.
    public static func resolve(
        _ n: GoogleNotification, purchase p: [String: JSONValue]
    ) throws(StoreMappingError) -> GoogleResolution {
        let env: LedgerEnvironment = p["testPurchase"] != nil ? .sandbox : .production
        let state = p["subscriptionState"]?.stringValue ?? "SUBSCRIPTION_STATE_UNSPECIFIED"
        let items = p["lineItems"]?.arrayValue?.compactMap(\.objectValue) ?? []
        guard !items.isEmpty else { throw StoreMappingError(field: "lineItems", reason: "is required (at least one line item)") }
        let hint = p["externalAccountIdentifiers"]?.objectValue?["obfuscatedExternalAccountId"]?.stringValue
        let start = GoogleTime.parse(p["startTime"]?.stringValue) ?? n.eventTime
        let meta: [String: JSONValue] = [
            "store": "google", "origin": "notification", "message_id": .string(n.messageID),
            "notification_type": n.subtype.map(JSONValue.string) ?? .null, "package_name": .string(n.packageName),
            "purchase_token": n.purchaseToken.map(JSONValue.string) ?? .null, "subscription_state": .string(state),
        ]
        var drafts: [EventDraft] = []
        var acknowledge: String?
        for (i, item) in items.enumerated() {
            let field = "lineItems[\(i)]"
            guard let product = item["productId"]?.stringValue, Identifiers.problem(product) == nil else {
                throw StoreMappingError(field: "\(field).productId", reason: "is required (a product id)")
            }
            let expiry = GoogleTime.parse(item["expiryTime"]?.stringValue)
            let order = item["latestSuccessfulOrderId"]?.stringValue
            if let order, Identifiers.problem(order) != nil {
                throw StoreMappingError(field: "\(field).latestSuccessfulOrderId", reason: "is not a valid order id")
            }
            func draft(_ type: EventType, _ at: Timestamp, key: String, _ data: [String: JSONValue]) -> EventDraft {
                EventDraft(
                    type: type, occurredAt: at, environment: env, idempotencyKey: key, productID: product,
                    originalTransactionID: order.map(baseOrder), data: data, metadata: meta)
            }
            switch state {
            case "SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_CANCELED", "SUBSCRIPTION_STATE_EXPIRED":
                if let order, let expiry,
                    let d = orderDraft(order: order, product: product, item: item, start: start, expiry: expiry, n: n, env: env, meta: meta)
                {
                    drafts.append(d)
                    if state != "SUBSCRIPTION_STATE_EXPIRED", p["acknowledgementState"]?.stringValue == "ACKNOWLEDGEMENT_STATE_PENDING" {
                        acknowledge = product
                    }
                }
            case "SUBSCRIPTION_STATE_IN_GRACE_PERIOD":
                var data: [String: JSONValue] = ["product_id": .string(product)]
                if let expiry, expiry > n.eventTime { data["grace_until"] = .string(expiry.rfc3339) }
                drafts.append(draft(.billingIssue, n.eventTime, key: "google:grace:\(order ?? n.messageID)", data))
            case "SUBSCRIPTION_STATE_ON_HOLD":
                drafts.append(
                    draft(
                        .expiration, n.eventTime, key: "google:hold:\(order ?? n.messageID)", ["product_id": .string(product), "reason": "billing"]))
            case "SUBSCRIPTION_STATE_PAUSED":
                drafts.append(
                    draft(
                        .expiration, n.eventTime, key: "google:pause:\(order ?? n.messageID)", ["product_id": .string(product), "reason": "paused"]))
            default:
                // Pending (not paid yet: no access), a cancelled pending purchase, an unknown state: no window.
                break
            }
            switch n.subtype {
            case "3"?, "7"?:
                // CANCELED / RESTARTED: auto-renew off or on; access runs to the end of the paid period.
                let replaced = p["canceledStateContext"]?.objectValue?["replacementCancellation"] != nil
                if !replaced, let plan = item["autoRenewingPlan"]?.objectValue {
                    let enabled = plan["autoRenewEnabled"]?.boolValue ?? (n.subtype == "7")
                    drafts.append(
                        draft(
                            .autoRenewChanged, n.eventTime, key: "google:msg:\(n.messageID):\(i)",
                            ["enabled": .bool(enabled), "product_id": .string(product)]))
                }
            case "13"? where state == "SUBSCRIPTION_STATE_EXPIRED":
                let reason: String
                let ctx = p["canceledStateContext"]?.objectValue
                if ctx?["userInitiatedCancellation"] != nil {
                    reason = "voluntary"
                } else if ctx?["systemInitiatedCancellation"] != nil {
                    reason = "billing"
                } else {
                    reason = "other"
                }
                let at = expiry.map { min($0, n.eventTime) } ?? n.eventTime
                drafts.append(
                    draft(
                        .expiration, at, key: "google:expired:\(order ?? n.messageID)", ["product_id": .string(product), "reason": .string(reason)]))
            case "12"?:
                // REVOKED: refunded and access ended at once.
                if let order {
                    drafts.append(
                        draft(.refund, n.eventTime, key: "google:refund:\(order)", ["transaction_id": .string(order), "reason": "google_revoked"]))
                }
            case "9"?:
                // DEFERRED: the developer moved the next charge; the extra time is a credit.
                if let order, let expiry, expiry > n.eventTime {
                    drafts.append(
                        draft(
                            .credit, n.eventTime, key: "google:deferred:\(order):\(expiry.rfc3339)",
                            [
                                "window_start": .string(n.eventTime.rfc3339), "window_end": .string(expiry.rfc3339),
                                "reason": "google_deferral", "granted_by": "google",
                            ]))
                }
            default:
                break
            }
        }
        let linked = p["linkedPurchaseToken"]?.stringValue
        return GoogleResolution(
            drafts: drafts, subscriberHint: hint, environment: env,
            linkedPurchaseToken: linked.flatMap { $0.isEmpty || $0.utf8.count > GoogleNotification.maxTokenBytes ? nil : $0 },
            acknowledgeProductID: acknowledge)
    }

    /// The refund that ends an old token's time when a new token replaces it (an upgrade or downgrade): of its
    /// latest order, for nothing (Google's proration is not known here), at the new token's start.
    public static func replacement(
        old p: [String: JSONValue], at: Timestamp, currency: String?, n: GoogleNotification
    ) -> [EventDraft] {
        let env: LedgerEnvironment = p["testPurchase"] != nil ? .sandbox : .production
        var out: [EventDraft] = []
        for item in p["lineItems"]?.arrayValue?.compactMap(\.objectValue) ?? [] {
            guard let product = item["productId"]?.stringValue, let order = item["latestSuccessfulOrderId"]?.stringValue,
                Identifiers.problem(order) == nil
            else { continue }
            var data: [String: JSONValue] = ["transaction_id": .string(order), "reason": "google_replaced"]
            if let currency {
                data["amount_minor"] = 0
                data["currency"] = .string(currency)
            }
            out.append(
                EventDraft(
                    type: .refund, occurredAt: at, environment: env, idempotencyKey: "google:refund:\(order)", productID: product,
                    originalTransactionID: baseOrder(order), data: data,
                    metadata: ["store": "google", "origin": "replacement", "message_id": .string(n.messageID)]))
        }
        return out
    }

    /// The refund of a voided purchase's order (a refund or chargeback): full, at the catalog price.
    public static func voided(_ n: GoogleNotification, product: String?, environment: LedgerEnvironment) -> [EventDraft] {
        guard let order = n.orderID, Identifiers.problem(order) == nil else { return [] }
        let refundType = n.payload["voidedPurchaseNotification"]?.objectValue?["refundType"]?.numberValue?.int64Value
        return [
            EventDraft(
                type: .refund, occurredAt: n.eventTime, environment: environment, idempotencyKey: "google:refund:\(order)",
                productID: product, originalTransactionID: baseOrder(order),
                data: ["transaction_id": .string(order), "reason": .string(refundType == 2 ? "google_voided_partial" : "google_voided")],
                metadata: ["store": "google", "origin": "voided_purchase", "message_id": .string(n.messageID)])
        ]
    }

    /// A renewal's period start: its `expiryTime` less the product's billing period (Google's state gives
    /// only the end). Nil when that is not a sane earlier time (a hostile catalog period, a time near year 1).
    public static func periodStart(expiry: Timestamp, period: ISODuration) -> Timestamp? {
        guard period.months >= 0, period.days >= 0, period.seconds >= 0, period.months <= 1200, period.days <= 36_600,
            period.seconds <= 3_162_240_000, expiry.civil.year >= 200
        else { return nil }
        var back = period
        back.months = -period.months
        back.days = -period.days
        back.seconds = -period.seconds
        let start = back.added(to: expiry)
        return start < expiry ? start : nil
    }

    /// A renewal draft whose period starts `period` before its end (see `periodStart`); others unchanged.
    public static func withCatalogPeriod(_ draft: EventDraft, period: ISODuration?) -> EventDraft {
        guard draft.type == .renewal, let period, let end = draft.data["period_end"]?.stringValue.flatMap({ try? Timestamp(rfc3339: $0) }),
            let start = periodStart(expiry: end, period: period)
        else { return draft }
        var d = draft
        d.data["period_start"] = .string(start.rfc3339)
        d.occurredAt = start
        return d
    }

    /// `GPA.1234-5678-9012-34567..2` → `GPA.1234-5678-9012-34567` (the subscription's first order).
    public static func baseOrder(_ order: String) -> String {
        guard let r = order.range(of: "..") else { return order }
        return String(order[..<r.lowerBound])
    }

    /// The purchase (first order) or renewal (`..N`) of the latest paid order.
    static func orderDraft(
        order: String, product: String, item: [String: JSONValue], start: Timestamp, expiry: Timestamp,
        n: GoogleNotification, env: LedgerEnvironment, meta: [String: JSONValue]
    ) -> EventDraft? {
        let renewal = order.contains("..")
        let periodStart: Timestamp = renewal ? min(n.eventTime, expiry) : start
        guard expiry > periodStart else { return nil }
        var data: [String: JSONValue] = [
            "product_id": .string(product), "transaction_id": .string(order), "original_transaction_id": .string(baseOrder(order)),
            "period_start": .string(periodStart.rfc3339), "period_end": .string(expiry.rfc3339),
        ]
        if item["prepaidPlan"] != nil {
            data["kind"] = "non_renewing"
        } else {
            data["kind"] = "auto_renewable"
        }
        let phase = item["offerPhase"]?.objectValue
        if phase?["freeTrial"] != nil {
            data["offer"] = "trial"
        } else if phase?["introductoryPrice"] != nil {
            data["offer"] = "intro"
        } else if !renewal, item["offerDetails"]?.objectValue?["offerId"]?.stringValue != nil {
            data["offer"] = "promo"
        } else {
            data["offer"] = "none"
        }
        return EventDraft(
            type: renewal && data["kind"] == "auto_renewable" ? .renewal : .purchase, occurredAt: periodStart, environment: env,
            idempotencyKey: "google:order:\(order)", productID: product, originalTransactionID: baseOrder(order), data: data,
            metadata: meta)
    }
}

/// A verified notification with the subscription's state Google's API returned for it.
public struct GoogleSubscriptionState: Sendable {
    public var notification: GoogleNotification
    public var purchase: [String: JSONValue]

    public init(notification: GoogleNotification, purchase: [String: JSONValue]) {
        self.notification = notification
        self.purchase = purchase
    }
}

extension GoogleSubscriptionMapper: StoreAdapter {
    public static func map(_ payload: GoogleSubscriptionState) throws(StoreMappingError) -> [EventDraft] {
        try resolve(payload.notification, purchase: payload.purchase).drafts
    }
}
