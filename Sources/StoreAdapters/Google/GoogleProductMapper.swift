import LedgerCore

/// Maps a one-time product's state at Google (`purchases.products.get`, a `ProductPurchase`) to drafts: a
/// `purchase` keyed by its order id once paid; nothing while pending or cancelled (docs/google.md).
public enum GoogleProductMapper {
    public static func resolve(_ n: GoogleNotification, product: String, purchase p: [String: JSONValue]) throws(StoreMappingError)
        -> GoogleResolution
    {
        let env: LedgerEnvironment = p["purchaseType"]?.numberValue?.int64Value == 0 ? .sandbox : .production
        let hint = p["obfuscatedExternalAccountId"]?.stringValue
        guard p["purchaseState"]?.numberValue?.int64Value == 0 else {
            // 1 cancelled (a refund arrives as a voided purchase), 2 pending: no access until paid.
            return GoogleResolution(drafts: [], subscriberHint: hint, environment: env, linkedPurchaseToken: nil, acknowledgeProductID: nil)
        }
        guard let order = p["orderId"]?.stringValue, Identifiers.problem(order) == nil else {
            throw StoreMappingError(field: "orderId", reason: "is required (a valid order id) for a purchased product")
        }
        guard Identifiers.problem(product) == nil else { throw StoreMappingError(field: "productId", reason: "is not a valid product id") }
        let millis = p["purchaseTimeMillis"]?.stringValue.flatMap { Int64($0) } ?? p["purchaseTimeMillis"]?.numberValue?.int64Value
        let at = millis.flatMap(GoogleTime.millis) ?? n.eventTime
        let draft = EventDraft(
            type: .purchase, occurredAt: at, environment: env, idempotencyKey: "google:order:\(order)", productID: product,
            originalTransactionID: order,
            data: ["product_id": .string(product), "transaction_id": .string(order), "offer": "none"],
            metadata: [
                "store": "google", "origin": "one_time_product", "message_id": .string(n.messageID),
                "package_name": .string(n.packageName), "purchase_token": n.purchaseToken.map(JSONValue.string) ?? .null,
            ])
        let acknowledged = p["acknowledgementState"]?.numberValue?.int64Value == 1
        return GoogleResolution(
            drafts: [draft], subscriberHint: hint, environment: env, linkedPurchaseToken: nil, acknowledgeProductID: acknowledged ? nil : product)
    }
}
