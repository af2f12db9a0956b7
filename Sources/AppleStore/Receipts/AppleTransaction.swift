import LedgerCore

/// One transaction of a verifyReceipt response (an `in_app` / `latest_receipt_info` entry, or the iOS 6
/// `receipt` itself), with the facts the ledger needs read and checked.
struct AppleTransaction {
    var raw: JSONValue
    var transactionID: String
    var originalTransactionID: String
    var productID: String
    var purchasedAt: Timestamp
    /// Present only for auto-renewable subscriptions.
    var expiresAt: Timestamp?
    var offer: EventDataValidator.Offer
    var cancelledAt: Timestamp?
    var cancellationReason: String?

    init(_ o: ReceiptObject, modern: Bool) throws(AppleReceiptError) {
        raw = .object(o.members)
        transactionID = try o.requiredID("transaction_id")
        originalTransactionID = try o.requiredID("original_transaction_id")
        productID = try o.requiredID("product_id")
        purchasedAt = try o.requiredDate("purchase_date", modern: modern)
        expiresAt = try o.date("expires_date", modern: modern)
        if let expiresAt, expiresAt <= purchasedAt {
            throw o.fail(modern ? "expires_date_ms" : "expires_date", "must be after the purchase date")
        }
        offer = expiresAt == nil ? .none : try Self.offer(o)
        cancelledAt = try o.date("cancellation_date", modern: modern)
        cancellationReason = try o.string("cancellation_reason")
    }

    /// A free trial outranks an introductory price, which outranks a promotional offer or offer code: an
    /// offer code can itself grant a trial, and the window's kind should say so.
    private static func offer(_ o: ReceiptObject) throws(AppleReceiptError) -> EventDataValidator.Offer {
        if try o.flag("is_trial_period") == true { return .trial }
        if try o.flag("is_in_intro_offer_period") == true { return .intro }
        let promotional = try o.string("promotional_offer_id") ?? ""
        let offerCode = try o.string("offer_code_ref_name") ?? ""
        return promotional.isEmpty && offerCode.isEmpty ? .none : .promo
    }

    /// Only the first transaction of a chain is a purchase; a later one that is not a subscription period
    /// (no expiry) cannot be a renewal, which must be auto-renewable, so it stays a purchase.
    var isRenewal: Bool { transactionID != originalTransactionID && expiresAt != nil }

    /// What the receipt says; the catalog adds entitlements, price, currency, commission, `period`, and
    /// `kind` for products without an expiry (consumable, non-consumable, non-renewing).
    func transactionDraft(_ environment: LedgerEnvironment) -> EventDraft {
        var data = EventData.Transaction(productID: productID, transactionID: transactionID, originalTransactionID: originalTransactionID)
        if let expiresAt {
            data.kind = .autoRenewable
            data.periodStart = purchasedAt
            data.periodEnd = expiresAt
            data.offer = offer
        }
        return EventDraft(
            type: isRenewal ? .renewal : .purchase, occurredAt: purchasedAt, environment: environment,
            idempotencyKey: "apple:txn:\(transactionID)", productID: productID,
            originalTransactionID: originalTransactionID, data: data.object, metadata: Self.metadata(raw: raw))
    }

    /// A cancellation date is Apple's record of a refund (or of an upgrade's replaced transaction); the
    /// catalog supplies the amount.
    func refundDraft(_ environment: LedgerEnvironment) -> EventDraft? {
        guard let cancelledAt else { return nil }
        return EventDraft(
            type: .refund, occurredAt: cancelledAt, environment: environment,
            idempotencyKey: "apple:refund:\(transactionID)", productID: productID,
            originalTransactionID: originalTransactionID,
            data: EventData.Refund(
                transactionID: transactionID, reason: cancellationReason.map { "cancellation_reason_\($0)" } ?? "apple_cancellation"
            ).object,
            metadata: Self.metadata(raw: raw))
    }

    static func metadata(raw: JSONValue) -> [String: JSONValue] {
        ["store": "apple", "raw": raw, "origin": "verifyReceipt"]
    }
}
