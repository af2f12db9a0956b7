import LedgerCore
import StoreAdapters

/// Turns App Store Server Notifications V2 into ledger event drafts (docs/semantics.md section 7).
///
/// Transaction facts get keys derived from Apple's transaction ids (`apple:txn:…`, `apple:refund:…`), the
/// same keys the receipt mapping uses, so a renewal learnt from both a notification and a receipt upload is
/// stored once. Facts that only a notification carries are keyed by its `notificationUUID`.
public enum AppleNotificationMapper {
    /// Notification types kept in the inbox only, with no ledger event: they concern no one subscriber
    /// (`RENEWAL_EXTENSION` summaries, `TEST`) or no subscription fact (`EXTERNAL_PURCHASE_TOKEN`, and types
    /// Apple adds later). docs/apple.md lists every type's outcome.
    public static func isNoticeOnly(_ n: AppleNotification) -> Bool {
        switch n.type {
        case "SUBSCRIBED", "DID_RENEW", "REFUND", "REFUND_REVERSED", "REVOKE", "DID_CHANGE_RENEWAL_STATUS",
            "EXPIRED", "GRACE_PERIOD_EXPIRED", "RENEWAL_EXTENDED", "DID_FAIL_TO_RENEW", "OFFER_REDEEMED", "PRICE_INCREASE",
            "DID_CHANGE_RENEWAL_PREF", "REFUND_DECLINED", "CONSUMPTION_REQUEST", "ONE_TIME_CHARGE":
            return false
        default:
            return true
        }
    }

    /// The `store_notice` kind of each notification type recorded as a fact of record without a window.
    static func noticeKind(_ n: AppleNotification) -> String? {
        switch (n.type, n.subtype) {
        case ("CONSUMPTION_REQUEST", _): "consumption_request"
        case ("REFUND_DECLINED", _): "refund_declined"
        case ("PRICE_INCREASE", _): "price_increase_consent"
        case ("OFFER_REDEEMED", _): "offer_redeemed"
        case ("DID_CHANGE_RENEWAL_PREF", _): "renewal_preference_changed"
        default: nil
        }
    }

    /// The idempotency key of the ledger fact whose paid period a notification needs: a `RENEWAL_EXTENDED`
    /// transaction's own `purchase`/`renewal` (`apple:txn:…`), whose `period_end` is the expiry before the
    /// extension (Apple's transaction only states the new one).
    public static func paidPeriodKey(_ n: AppleNotification) -> String? {
        guard n.type == "RENEWAL_EXTENDED", let txn = n.transaction?["transactionId"] else { return nil }
        return (txn.stringValue ?? txn.numberValue?.canonical).map { "apple:txn:\($0)" }
    }

    /// Drafts for a notification. `paidUntil` is the expiry the ledger recorded for the transaction of a
    /// `RENEWAL_EXTENDED` (the `period_end` of its `paidPeriodKey` fact), where the extension starts.
    public static func drafts(for n: AppleNotification, paidUntil: Timestamp? = nil) throws(StoreMappingError) -> [EventDraft] {
        if isNoticeOnly(n) { return [] }
        let meta: [String: JSONValue] = [
            "store": "apple", "origin": "notification", "notification_uuid": .string(n.notificationUUID),
            "notification_type": .string(n.type), "subtype": n.subtype.map(JSONValue.string) ?? .null,
            "raw": .object(n.payload),
        ]
        let at = n.signedDate
        func draft(_ type: EventType, _ occurred: Timestamp, key: String, product: String?, _ data: [String: JSONValue]) -> EventDraft {
            EventDraft(
                type: type, occurredAt: occurred, environment: n.environment, idempotencyKey: key, productID: product,
                originalTransactionID: n.originalTransactionID, data: data, metadata: meta)
        }
        switch n.type {
        case "SUBSCRIBED", "DID_RENEW":
            let t = try requireTransaction(n)
            return [try transactionDraft(t, n: n, meta: meta)]
        case "REFUND":
            let t = try requireTransaction(n)
            if t["revocationType"]?.stringValue == "FAMILY_REVOKE" {
                return [try revocationDraft(t, environment: n.environment, meta: meta)]
            }
            return [try refundDraft(t, environment: n.environment, meta: meta)]

        case "REFUND_REVERSED":
            let t = try requireTransaction(n)
            let txn = try string(t, "transactionId")
            let when: Timestamp
            if let at { when = at } else { when = try time(t, "signedDate") }
            return [
                draft(
                    .refundReversal, when, key: "apple:refund_reversal:\(txn):\(n.notificationUUID)", product: nil,
                    EventData.RefundReversal(transactionID: txn).object)
            ]
        case "REVOKE":
            let t = try requireTransaction(n)
            if t["revocationDate"] != nil { return [try revocationDraft(t, environment: n.environment, meta: meta)] }
            return [
                draft(
                    .cancellation, try signed(n), key: "apple:notification:\(n.notificationUUID)", product: t["productId"]?.stringValue,
                    EventData.Cancellation(reason: "family_revoked").object)
            ]
        case "DID_CHANGE_RENEWAL_STATUS":
            let product =
                n.renewal?["autoRenewProductId"]?.stringValue ?? n.renewal?["productId"]?.stringValue ?? n.transaction?["productId"]?.stringValue
            let enabled: Bool =
                switch n.subtype {
                case "AUTO_RENEW_ENABLED": true
                case "AUTO_RENEW_DISABLED": false
                default: n.renewal?["autoRenewStatus"]?.numberValue?.int64Value == 1
                }
            return [
                draft(
                    .autoRenewChanged, try signed(n), key: "apple:notification:\(n.notificationUUID)", product: product,
                    EventData.AutoRenewChanged(enabled: enabled, productID: product).object)
            ]
        case "DID_FAIL_TO_RENEW":
            let product = n.transaction?["productId"]?.stringValue ?? n.renewal?["productId"]?.stringValue
            let when = try signed(n)
            var data = EventData.BillingIssue(productID: product)
            if n.subtype == "GRACE_PERIOD", let until = appleTime(n.renewal?["gracePeriodExpiresDate"]) {
                if until > when { data.graceUntil = until }
            }
            return [draft(.billingIssue, when, key: "apple:notification:\(n.notificationUUID)", product: product, data.object)]
        case "EXPIRED", "GRACE_PERIOD_EXPIRED":
            let product = n.transaction?["productId"]?.stringValue ?? n.renewal?["productId"]?.stringValue
            let reason: String =
                switch (n.type, n.subtype) {
                case ("GRACE_PERIOD_EXPIRED", _), (_, "BILLING_RETRY"): "billing"
                case (_, "VOLUNTARY"): "voluntary"
                case (_, "PRICE_INCREASE"): "price_increase"
                case (_, "PRODUCT_NOT_FOR_SALE"): "product_unavailable"
                default: "other"
                }
            return [
                draft(
                    .expiration, try signed(n), key: "apple:notification:\(n.notificationUUID)", product: product,
                    EventData.Expiration(productID: product, reason: reason).object)
            ]
        case "ONE_TIME_CHARGE":
            return [try transactionDraft(try requireTransaction(n), n: n, meta: meta)]
        case "DID_CHANGE_RENEWAL_PREF" where n.subtype == "UPGRADE", "OFFER_REDEEMED" where n.subtype == "UPGRADE":
            // An immediate upgrade: the new product's transaction starts now (the old one's unused time comes
            // back as Apple's prorated refund, if any, in a REFUND notification).
            var drafts = [try transactionDraft(try requireTransaction(n), n: n, meta: meta)]
            if let notice = try storeNotice(n, meta: meta) { drafts.append(notice) }
            return drafts
        case "OFFER_REDEEMED" where n.subtype == "INITIAL_BUY" || n.subtype == "RESUBSCRIBE":
            // The transaction carries the offer (offerType, offerDiscountType): the same purchase SUBSCRIBED brings.
            var drafts = [try transactionDraft(try requireTransaction(n), n: n, meta: meta)]
            if let notice = try storeNotice(n, meta: meta) { drafts.append(notice) }
            return drafts
        case "OFFER_REDEEMED", "PRICE_INCREASE", "DID_CHANGE_RENEWAL_PREF", "REFUND_DECLINED", "CONSUMPTION_REQUEST":
            return try storeNotice(n, meta: meta).map { [$0] } ?? []
        case "RENEWAL_EXTENDED":
            // The extension is the time from the old expiry to the new one, never the time already paid for.
            // Apple's transaction states only the new expiry: the old one is the ledger's record of the
            // transaction. Without it, the extension cannot be told from the paid time: a notice.
            let t = try requireTransaction(n)
            let when = try signed(n)
            let until = try time(t, "expiresDate")
            guard let paidUntil else {
                var detail: [String: JSONValue] = [
                    "notification_type": .string(n.type), "expires_date": .string(until.rfc3339),
                    "why": "the transaction's paid period is not in the ledger, so the extended time cannot be told from the paid time",
                ]
                if let product = t["productId"] { detail[EventDataKey.productID] = product }
                let data = EventData.StoreNotice(
                    store: "apple", kind: "renewal_extended", transactionID: t["transactionId"]?.stringValue, detail: detail
                ).object
                return [
                    EventDraft(
                        type: .storeNotice, occurredAt: when, environment: n.environment, idempotencyKey: "apple:notice:\(n.notificationUUID)",
                        productID: nil, originalTransactionID: n.originalTransactionID, data: data, metadata: meta)
                ]
            }
            guard until > paidUntil else { return [] }
            return [
                draft(
                    .credit, when, key: "apple:notification:\(n.notificationUUID)", product: t["productId"]?.stringValue,
                    EventData.Credit(windowStart: paidUntil, windowEnd: until, reason: "apple_renewal_extended", grantedBy: "apple").object)
            ]
        default:
            return []
        }
    }

    /// A `store_notice` for a notification that changes no window but is a fact accountants keep (a refund
    /// request, a declined refund, a price-increase consent, an offer redemption, a renewal preference).
    static func storeNotice(_ n: AppleNotification, meta: [String: JSONValue]) throws(StoreMappingError) -> EventDraft? {
        guard let kind = noticeKind(n) else { return nil }
        let t = n.transaction
        let r = n.renewal
        var detail: [String: JSONValue] = ["notification_type": .string(n.type)]
        let facts: [(String, JSONValue?)] = [
            ("subtype", n.subtype.map(JSONValue.string)), (EventDataKey.productID, t?["productId"] ?? r?["productId"]),
            ("auto_renew_product_id", r?["autoRenewProductId"]), ("price_increase_status", r?["priceIncreaseStatus"]),
            ("offer_identifier", t?["offerIdentifier"] ?? r?["offerIdentifier"]), ("offer_type", t?["offerType"] ?? r?["offerType"]),
            ("consumption_request_reason", n.payload["data"]?.objectValue?["consumptionRequestReason"]),
        ]
        for case (let name, let value?) in facts where value != .null { detail[name] = value }
        let data = EventData.StoreNotice(store: "apple", kind: kind, transactionID: t?["transactionId"]?.stringValue, detail: detail).object
        let when: Timestamp
        if let at = n.signedDate { when = at } else { throw StoreMappingError(field: "signedDate", reason: "is required for \(n.type)") }
        return EventDraft(
            type: .storeNotice, occurredAt: when, environment: n.environment, idempotencyKey: "apple:notice:\(n.notificationUUID)",
            productID: nil, originalTransactionID: n.originalTransactionID, data: data, metadata: meta)
    }

    /// What a revoked transaction (`revocationDate` set) read from the App Store Server API means: its Family
    /// Sharing revocation, or its refund.
    public static func revokedDraft(
        _ t: [String: JSONValue], environment: LedgerEnvironment, meta: [String: JSONValue]
    ) throws(StoreMappingError) -> EventDraft {
        t["revocationType"]?.stringValue == "FAMILY_REVOKE"
            ? try revocationDraft(t, environment: environment, meta: meta) : try refundDraft(t, environment: environment, meta: meta)
    }

    /// The end of a family-shared transaction's access (`revocationType` `FAMILY_REVOKE`): a `cancellation`
    /// (`family_revoked`) at `revocationDate`, keyed by the transaction, so a `REVOKE` notification and a
    /// transaction read from the App Store Server API store it once.
    public static func revocationDraft(
        _ t: [String: JSONValue], environment: LedgerEnvironment, meta: [String: JSONValue]
    ) throws(StoreMappingError) -> EventDraft {
        let txn = try string(t, "transactionId")
        return EventDraft(
            type: .cancellation, occurredAt: try time(t, "revocationDate"),
            environment: t["environment"].map { appleEnvironment($0.stringValue) } ?? environment, idempotencyKey: "apple:revoke:\(txn)",
            productID: t["productId"]?.stringValue, originalTransactionID: t["originalTransactionId"]?.stringValue ?? txn,
            data: EventData.Cancellation(reason: "family_revoked").object, metadata: meta)
    }

    /// The refund of a revoked transaction (`revocationDate` set): keyed by the transaction, so a `REFUND`
    /// notification and a transaction read from the App Store Server API store it once.
    public static func refundDraft(
        _ t: [String: JSONValue], environment: LedgerEnvironment, meta: [String: JSONValue]
    ) throws(StoreMappingError) -> EventDraft {
        let txn = try string(t, "transactionId")
        let revoked = try time(t, "revocationDate")
        var data = EventData.Refund(
            transactionID: txn,
            reason: t["revocationReason"].map { "apple_revocation_reason_\($0.numberValue?.canonical ?? $0.stringValue ?? "")" } ?? "apple_refund")
        if let price = t["price"]?.numberValue?.int64Value, let currency = t["currency"]?.stringValue {
            var amount = try minorUnits(milli: price, currency: currency)
            if t["revocationType"]?.stringValue == "REFUND_PRORATED", let pct = t["revocationPercentage"]?.numberValue?.int64Value,
                (0...100_000).contains(pct)
            {
                // revocationPercentage is in thousandths of a percent (50000 = 50%); round half up.
                // 128-bit, so a hostile price cannot trap (the validator refuses amounts above the ceiling).
                amount = Int64((Int128(amount) * Int128(pct) + 50_000) / 100_000)
            }
            data.amountMinor = amount
            data.currency = currency
        }
        return EventDraft(
            type: .refund, occurredAt: revoked, environment: t["environment"].map { appleEnvironment($0.stringValue) } ?? environment,
            idempotencyKey: "apple:refund:\(txn)", productID: t["productId"]?.stringValue,
            originalTransactionID: t["originalTransactionId"]?.stringValue ?? txn, data: data.object, metadata: meta)
    }

    /// A purchase or renewal from a decoded `signedTransactionInfo`.
    static func transactionDraft(_ t: [String: JSONValue], n: AppleNotification, meta: [String: JSONValue]) throws(StoreMappingError) -> EventDraft {
        try transactionDraft(t, environment: n.environment, meta: meta)
    }

    /// A purchase or renewal from a decoded, verified transaction (a notification's `signedTransactionInfo`
    /// or one the App Store Server API returned), keyed by its transaction id.
    public static func transactionDraft(
        _ t: [String: JSONValue], environment fallback: LedgerEnvironment, meta: [String: JSONValue]
    ) throws(StoreMappingError) -> EventDraft {
        let txn = try string(t, "transactionId")
        let original = t["originalTransactionId"]?.stringValue ?? txn
        let product = try string(t, "productId")
        let purchased = try time(t, "purchaseDate")
        var data = EventData.Transaction(productID: product, transactionID: txn, originalTransactionID: original, offer: offer(t))
        // A transaction without a `type` is a subscription when it has an expiry date.
        let type = t["type"]?.stringValue ?? (t["expiresDate"] == nil ? nil : "Auto-Renewable Subscription")
        switch type {
        case "Auto-Renewable Subscription"?:
            data.kind = .autoRenewable
            data.periodStart = purchased
            data.periodEnd = try time(t, "expiresDate")
        case "Non-Renewing Subscription"?: data.kind = .nonRenewing
        case "Non-Consumable"?: data.kind = .lifetime
        default: break
        }
        if let price = t["price"]?.numberValue?.int64Value, let currency = t["currency"]?.stringValue {
            data.priceMinor = try minorUnits(milli: price, currency: currency)
            data.currency = currency
        }
        // The storefront is the buyer's App Store country, ISO 3166-1 alpha-3 ("USA"); events carry alpha-2.
        if let storefront = t["storefront"]?.stringValue, let country = Countries.alpha2(fromAlpha3: storefront) {
            data.country = country
        }
        let renewal = txn != original && data.kind == .autoRenewable
        return EventDraft(
            type: renewal ? .renewal : .purchase, occurredAt: purchased,
            environment: t["environment"].map { appleEnvironment($0.stringValue) } ?? fallback,
            idempotencyKey: "apple:txn:\(txn)", productID: product, originalTransactionID: original, data: data.object, metadata: meta)
    }

    /// `offerDiscountType` FREE_TRIAL → trial; `offerType` 1 (introductory) → intro; 2, 3, 4 (promotional,
    /// offer code, win-back) → promo.
    static func offer(_ t: [String: JSONValue]) -> EventDataValidator.Offer {
        if t["offerDiscountType"]?.stringValue == "FREE_TRIAL" { return .trial }
        switch t["offerType"]?.numberValue?.int64Value {
        case 1?: return .intro
        case 2?, 3?, 4?: return .promo
        default: return .none
        }
    }

    /// App Store prices are in milliunits of the currency (10990 = 10.99); the ledger keeps minor units.
    public static func minorUnits(milli: Int64, currency: String) throws(StoreMappingError) -> Int64 {
        let exponent = CurrencyExponent.of(currency)
        let divisor: Int64 = exponent >= 3 ? 1 : [1000, 100, 10][exponent]
        // 128-bit: a price near Int64.max must not trap; the quotient always fits back.
        return Int64((Int128(milli) + Int128(divisor / 2)) / Int128(divisor))
    }

    static func requireTransaction(_ n: AppleNotification) throws(StoreMappingError) -> [String: JSONValue] {
        guard let t = n.transaction else {
            throw StoreMappingError(field: "data.signedTransactionInfo", reason: "is required for \(n.type)")
        }
        return t
    }

    static func signed(_ n: AppleNotification) throws(StoreMappingError) -> Timestamp {
        guard let at = n.signedDate else { throw StoreMappingError(field: "signedDate", reason: "is required for \(n.type)") }
        return at
    }

    static func string(_ o: [String: JSONValue], _ key: String) throws(StoreMappingError) -> String {
        guard let s = o[key]?.stringValue ?? o[key]?.numberValue?.canonical, !s.isEmpty else {
            throw StoreMappingError(field: "signedTransactionInfo.\(key)", reason: "is required")
        }
        return s
    }

    static func time(_ o: [String: JSONValue], _ key: String) throws(StoreMappingError) -> Timestamp {
        guard o[key]?.numberValue?.int64Value != nil else {
            throw StoreMappingError(field: "signedTransactionInfo.\(key)", reason: "is required (milliseconds since 1970)")
        }
        guard let t = appleTime(o[key]) else {
            throw StoreMappingError(field: "signedTransactionInfo.\(key)", reason: "is out of range")
        }
        return t
    }
}

/// ISO 4217 minor-unit exponents that differ from 2.
public enum CurrencyExponent {
    static let zero: Set<String> = [
        "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF",
    ]
    static let three: Set<String> = ["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"]

    public static func of(_ currency: String) -> Int {
        zero.contains(currency) ? 0 : three.contains(currency) ? 3 : 2
    }
}

extension AppleNotificationMapper: StoreMapper {
    public static let store = "apple"
    public static func map(_ payload: AppleNotification) throws(StoreMappingError) -> [EventDraft] { try drafts(for: payload) }
}
