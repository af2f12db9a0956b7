import LedgerCore
import StoreAdapters

/// Maps a one-time product's state at Google (`purchases.products.get`, a `ProductPurchase`) to drafts: a
/// `purchase` keyed by its order id once paid (also when it has been refunded since: the refund is its own
/// fact); nothing while pending or for a cancelled purchase that was never paid (docs/google.md).
public enum GoogleProductMapper {
    /// Order states of an order that was paid (whatever happened to it since).
    public static let paidOrderStates: Set<String> = ["PROCESSED", "PENDING_REFUND", "PARTIALLY_REFUNDED", "REFUNDED"]

    public static func resolve(
        _ n: GoogleNotification, product: String, purchase p: [String: JSONValue], order placed: [String: JSONValue]? = nil
    ) throws(StoreMappingError) -> GoogleResolution {
        let env: LedgerEnvironment = p["purchaseType"]?.numberValue?.int64Value == 0 ? .sandbox : .production
        let hint = p["obfuscatedExternalAccountId"]?.stringValue
        let state = p["purchaseState"]?.numberValue?.int64Value
        let refunded = state == 1 && placed?["state"]?.stringValue.map { paidOrderStates.contains($0) } == true
        guard state == 0 || refunded else {
            // 2 pending: no access until paid; 1 cancelled before it was paid (the order says so, or is unknown).
            return GoogleResolution(drafts: [], subscriberHint: hint, environment: env, linkedPurchaseToken: nil, acknowledgeProductID: nil)
        }
        guard let order = p["orderId"]?.stringValue, Identifiers.problem(order) == nil else {
            throw StoreMappingError(field: "orderId", reason: "is required (a valid order id) for a purchased product")
        }
        guard Identifiers.problem(product) == nil else { throw StoreMappingError(field: "productId", reason: "is not a valid product id") }
        let millis = p["purchaseTimeMillis"]?.stringValue.flatMap { Int64($0) } ?? p["purchaseTimeMillis"]?.numberValue?.int64Value
        let at = millis.flatMap(GoogleTime.millis) ?? n.eventTime
        var data = EventData.Transaction(productID: product, transactionID: order, offer: EventDataValidator.Offer.none)
        var metadata: [String: JSONValue] = [
            "store": "google", "origin": "one_time_product", "message_id": .string(n.messageID),
            "package_name": .string(n.packageName), "purchase_token": n.purchaseToken.map(JSONValue.string) ?? .null,
        ]
        if let placed { GoogleOrderPricing.apply(order: placed, product: product, to: &data, metadata: &metadata) }
        // `ProductPurchase.regionCode`: the buyer's billing country, ISO 3166-1 alpha-2.
        if let region = p["regionCode"]?.stringValue, Countries.isValidAlpha2(region) { data.country = region }
        let draft = EventDraft(
            type: .purchase, occurredAt: at, environment: env, idempotencyKey: "google:order:\(order)", productID: product,
            originalTransactionID: order, data: data.object, metadata: metadata)
        let acknowledged = refunded || p["acknowledgementState"]?.numberValue?.int64Value == 1
        return GoogleResolution(
            drafts: [draft], subscriberHint: hint, environment: env, linkedPurchaseToken: nil, acknowledgeProductID: acknowledged ? nil : product)
    }
}
