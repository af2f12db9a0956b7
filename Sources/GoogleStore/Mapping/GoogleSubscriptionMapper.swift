import LedgerCore
import StoreAdapters

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

    /// Drafts for a subscription notification, from the purchase's current state and the orders Google gave
    /// for it (`orders.get`, by order id: each order's paid period and price). `periods` are the catalog's
    /// billing periods, the last resort for a renewal whose order and previous order are both unknown.
    public static func resolve(
        _ n: GoogleNotification, purchase p: [String: JSONValue], orders: [String: [String: JSONValue]] = [:],
        periods: [String: ISODuration] = [:]
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
        // Line items of one order share its id: their facts are keyed per product then.
        let shared = Dictionary(grouping: items.compactMap { $0["latestSuccessfulOrderId"]?.stringValue }, by: { $0 }).filter { $0.value.count > 1 }
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
            // `google:<fact>:<orderId>`, with the product when the order has several line items.
            let keyed = order.map { shared[$0] == nil ? $0 : "\($0):\(product)" }
            let stated = order.flatMap { servicePeriod(orders[$0], product: product) }
            // Every paid order Google states is recorded, whatever the subscription's state has become since
            // (a renewal learned after its period, an order refunded before it was resolved).
            // In grace, on hold or paused, `expiryTime` is not the paid period's end: only the order's own period counts.
            let paidState = ["SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_CANCELED", "SUBSCRIPTION_STATE_EXPIRED"].contains(state)
            if let order, let expiry, paidState || stated != nil,
                let d = orderDraft(
                    order: order, key: keyed ?? order, product: product, item: item,
                    period: periodOf(
                        order: order, product: product, start: start, expiry: expiry, orders: orders, catalog: periods[product],
                        notified: n.eventTime),
                    placed: orders[order], region: p["regionCode"]?.stringValue, env: env, meta: meta)
            {
                drafts.append(d)
                if state == "SUBSCRIPTION_STATE_ACTIVE" || state == "SUBSCRIPTION_STATE_CANCELED" || state == "SUBSCRIPTION_STATE_IN_GRACE_PERIOD",
                    p["acknowledgementState"]?.stringValue == "ACKNOWLEDGEMENT_STATE_PENDING"
                {
                    acknowledge = product
                }
            }
            switch state {
            case "SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_CANCELED", "SUBSCRIPTION_STATE_EXPIRED":
                break
            case "SUBSCRIPTION_STATE_IN_GRACE_PERIOD":
                var data = EventData.BillingIssue(productID: product)
                if let expiry, expiry > n.eventTime { data.graceUntil = expiry }
                drafts.append(draft(.billingIssue, n.eventTime, key: "google:grace:\(keyed ?? n.messageID)", data.object))
            case "SUBSCRIPTION_STATE_ON_HOLD":
                drafts.append(
                    draft(
                        .expiration, n.eventTime, key: "google:hold:\(keyed ?? n.messageID)",
                        EventData.Expiration(productID: product, reason: "billing").object))
            case "SUBSCRIPTION_STATE_PAUSED":
                drafts.append(
                    draft(
                        .expiration, n.eventTime, key: "google:pause:\(keyed ?? n.messageID)",
                        EventData.Expiration(productID: product, reason: "paused").object))
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
                            EventData.AutoRenewChanged(enabled: enabled, productID: product).object))
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
                        .expiration, at, key: "google:expired:\(keyed ?? n.messageID)",
                        EventData.Expiration(productID: product, reason: reason).object))
            case "12"?:
                // REVOKED: refunded and access ended at once (at Google's time of the refund when the order says it).
                if let order, shared[order] == nil || i == items.firstIndex(where: { $0["latestSuccessfulOrderId"]?.stringValue == order }) {
                    var refund = EventData.Refund(transactionID: order, reason: "google_revoked")
                    if let o = orders[order] { GoogleOrderPricing.applyRefund(order: o, to: &refund) }
                    drafts.append(draft(.refund, refundTime(orders[order]) ?? n.eventTime, key: "google:refund:\(order)", refund.object))
                }
            case "9"?:
                // DEFERRED: the developer moved the next charge; the extra time, from the paid period's end (the
                // order's) to the new expiry, is a credit. Without the order the old expiry is not known: a notice.
                if let order, let expiry, let paidUntil = stated?.end {
                    if expiry > paidUntil {
                        drafts.append(
                            draft(
                                .credit, paidUntil, key: "google:deferred:\(keyed ?? order):\(expiry.rfc3339)",
                                EventData.Credit(windowStart: paidUntil, windowEnd: expiry, reason: "google_deferral", grantedBy: "google").object))
                    }
                } else if let order {
                    drafts.append(
                        notice(
                            n, env: env, kind: "deferral", order: order, key: "google:notice:\(n.messageID):\(i)", meta: meta,
                            detail: [
                                EventDataKey.productID: .string(product), "expiry_time": expiry.map { .string($0.rfc3339) } ?? .null,
                                "why": "the order's paid period is not known (orders.get), so the deferred time cannot be told from the paid time",
                            ]))
                }
            case "8"?, "19"?, "22"?:
                // A price change (or step-up) the subscriber confirmed or that was updated: an event of record.
                let change =
                    item["autoRenewingPlan"]?.objectValue?["priceChangeDetails"]
                    ?? item["autoRenewingPlan"]?.objectValue?["priceStepUpConsentDetails"]
                drafts.append(
                    notice(
                        n, env: env, kind: "price_increase_consent", order: order, key: "google:notice:\(n.messageID):\(i)", meta: meta,
                        detail: [
                            EventDataKey.productID: .string(product), "notification_type": .string(n.subtype ?? ""), "price_change": change ?? .null,
                        ]))
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

    /// A `store_notice` of a Google fact that changes no window.
    public static func notice(
        _ n: GoogleNotification, env: LedgerEnvironment, kind: String, order: String?, key: String, meta: [String: JSONValue],
        detail: [String: JSONValue]
    ) -> EventDraft {
        EventDraft(
            type: .storeNotice, occurredAt: n.eventTime, environment: env, idempotencyKey: key, productID: nil,
            originalTransactionID: order.map(baseOrder),
            data: EventData.StoreNotice(store: "google", kind: kind, transactionID: order, detail: detail).object, metadata: meta)
    }

    /// Why a token names another (`linkedPurchaseToken`), read from the two purchases Google states.
    public enum LinkCause: String, Sendable {
        /// An upgrade or downgrade mid-period: the old order's remaining time is refunded (prorated).
        case replacement
        /// A prepaid plan topped up: more time on the same chain.
        case topUp = "top_up"
        /// Signed up again after cancelling (or after expiry): a new chain, the old one ran its course.
        case resubscription
        /// Prepaid ↔ auto-renewing: the old plan's paid time is kept, not refunded.
        case conversion
    }

    /// Only a replacement (Google cancelled the old purchase for it, or the new line items name the item
    /// they replace, not deferred) is a refund; prepaid top-ups and conversions are told by the plans.
    public static func linkCause(new p: [String: JSONValue], old: [String: JSONValue]) -> LinkCause {
        func prepaid(_ x: [String: JSONValue]) -> Bool {
            let items = x["lineItems"]?.arrayValue?.compactMap(\.objectValue) ?? []
            return !items.isEmpty && items.allSatisfy { $0["prepaidPlan"] != nil }
        }
        switch (prepaid(old), prepaid(p)) {
        case (true, true): return .topUp
        case (true, false), (false, true): return .conversion
        case (false, false): break
        }
        let replaced = old["canceledStateContext"]?.objectValue?["replacementCancellation"] != nil
        let modes = (p["lineItems"]?.arrayValue ?? []).compactMap { $0.objectValue?["itemReplacement"]?.objectValue?["replacementMode"]?.stringValue }
        if modes.contains("DEFERRED") { return .resubscription }
        return replaced || !modes.isEmpty ? .replacement : .resubscription
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
            var data = EventData.Refund(transactionID: order, reason: "google_replaced")
            if let currency {
                data.amountMinor = 0
                data.currency = currency
            }
            out.append(
                EventDraft(
                    type: .refund, occurredAt: at, environment: env, idempotencyKey: "google:refund:\(order)", productID: product,
                    originalTransactionID: baseOrder(order), data: data.object,
                    metadata: ["store": "google", "origin": "replacement", "message_id": .string(n.messageID)]))
        }
        return out
    }

    /// The refund of a voided purchase's order (a refund or chargeback): full, at the catalog price, at
    /// Google's time for it (`voidedTimeMillis`, the order's refund event) when known.
    public static func voided(_ n: GoogleNotification, product: String?, environment: LedgerEnvironment, at: Timestamp? = nil) -> [EventDraft] {
        guard let order = n.orderID, Identifiers.problem(order) == nil else { return [] }
        let refundType = n.payload["voidedPurchaseNotification"]?.objectValue?["refundType"]?.numberValue?.int64Value
        return [
            EventDraft(
                type: .refund, occurredAt: at ?? n.eventTime, environment: environment, idempotencyKey: "google:refund:\(order)",
                productID: product, originalTransactionID: baseOrder(order),
                data: EventData.Refund(transactionID: order, reason: refundType == 2 ? "google_voided_partial" : "google_voided").object,
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

    /// `GPA.1234-5678-9012-34567..2` → `GPA.1234-5678-9012-34567` (the subscription's first order).
    public static func baseOrder(_ order: String) -> String {
        guard let r = order.range(of: "..") else { return order }
        return String(order[..<r.lowerBound])
    }

    /// The paid period an order states for a product (`lineItems[].subscriptionDetails.servicePeriod…`).
    public static func servicePeriod(_ order: [String: JSONValue]?, product: String) -> (start: Timestamp, end: Timestamp)? {
        let items = order?["lineItems"]?.arrayValue?.compactMap(\.objectValue) ?? []
        guard let item = items.first(where: { $0["productId"]?.stringValue == product }) ?? (items.count == 1 ? items[0] : nil),
            let details = item["subscriptionDetails"]?.objectValue,
            let start = GoogleTime.parse(details["servicePeriodStartTime"]?.stringValue),
            let end = GoogleTime.parse(details["servicePeriodEndTime"]?.stringValue), end > start
        else { return nil }
        return (start, end)
    }

    /// Google's time of an order's refund (`orderHistory.refundEvent.eventTime`), if it says one.
    public static func refundTime(_ order: [String: JSONValue]?) -> Timestamp? {
        GoogleTime.parse(order?["orderHistory"]?.objectValue?["refundEvent"]?.objectValue?["eventTime"]?.stringValue)
    }

    /// The order before a renewal order: `GPA.x..0` → `GPA.x`, `GPA.x..N` → `GPA.x..N-1`; nil for a first order.
    public static func previousOrder(_ order: String) -> String? {
        guard let r = order.range(of: ".."), let n = Int(order[r.upperBound...]) else { return nil }
        return n == 0 ? String(order[..<r.lowerBound]) : "\(order[..<r.lowerBound])..\(n - 1)"
    }

    /// An order's paid period, first match wins: the order's service period; for a first order the
    /// subscription's start to its expiry; for a renewal the previous order's end (the previous expiry) to
    /// its expiry; the catalog period back from the expiry (wrong at clamped month ends); the notification's
    /// time when it is before the expiry.
    static func periodOf(
        order: String, product: String, start: Timestamp, expiry: Timestamp, orders: [String: [String: JSONValue]], catalog: ISODuration?,
        notified: Timestamp
    ) -> (start: Timestamp, end: Timestamp)? {
        if let stated = servicePeriod(orders[order], product: product) { return stated }
        guard order.contains("..") else { return expiry > start ? (start, expiry) : nil }
        if let previous = previousOrder(order), let end = servicePeriod(orders[previous], product: product)?.end, expiry > end {
            return (end, expiry)
        }
        if let catalog, let s = periodStart(expiry: expiry, period: catalog) { return (s, expiry) }
        return notified < expiry ? (notified, expiry) : nil
    }

    /// The purchase (first order) or renewal (`..N`) of an order, over its paid period, priced by the order
    /// (`orders.get`) when Google gave it, in the buyer's country (`regionCode`) when valid.
    static func orderDraft(
        order id: String, key: String, product: String, item: [String: JSONValue], period: (start: Timestamp, end: Timestamp)?,
        placed: [String: JSONValue]?, region: String?, env: LedgerEnvironment, meta: [String: JSONValue]
    ) -> EventDraft? {
        let renewal = id.contains("..")
        guard let period else { return nil }
        var data = EventData.Transaction(
            productID: product, transactionID: id, originalTransactionID: baseOrder(id), periodStart: period.start, periodEnd: period.end)
        data.kind = item["prepaidPlan"] != nil ? .nonRenewing : .autoRenewable
        let phase = item["offerPhase"]?.objectValue
        if phase?["freeTrial"] != nil {
            data.offer = .trial
        } else if phase?["introductoryPrice"] != nil {
            data.offer = .intro
        } else if !renewal, item["offerDetails"]?.objectValue?["offerId"]?.stringValue != nil {
            data.offer = .promo
        } else {
            data.offer = EventDataValidator.Offer.none
        }
        var metadata = meta
        if let placed { GoogleOrderPricing.apply(order: placed, product: product, to: &data, metadata: &metadata) }
        // subscriptionsv2's `regionCode`: the buyer's billing country, ISO 3166-1 alpha-2.
        if let region, Countries.isValidAlpha2(region) { data.country = region }
        return EventDraft(
            type: renewal && data.kind == .autoRenewable ? .renewal : .purchase, occurredAt: period.start, environment: env,
            idempotencyKey: "google:order:\(key)", productID: product, originalTransactionID: baseOrder(id), data: data.object,
            metadata: metadata)
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

extension GoogleSubscriptionMapper: StoreMapper {
    public static func map(_ payload: GoogleSubscriptionState) throws(StoreMappingError) -> [EventDraft] {
        try resolve(payload.notification, purchase: payload.purchase).drafts
    }
}
