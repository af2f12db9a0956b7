/// Completes store drafts from the catalog into self-describing ledger events for one subscriber.
public enum DraftCompletion {
    /// The products the drafts name.
    public static func productsNeeded(_ drafts: [EventDraft]) -> Set<String> {
        Set(drafts.compactMap(\.productID))
    }

    /// Drafts → validated events of source `apple`. A draft that needs the catalog and names a product the
    /// catalog lacks is refused (nothing is stored from a refused payload).
    public static func complete(
        _ drafts: [EventDraft], subscriberID: String, source: String = "apple", products: [String: Product]
    ) throws(EventValidationError) -> [NewEvent] {
        var events: [NewEvent] = []
        for (i, d) in drafts.enumerated() {
            let path = "events[\(i)]"
            var data = d.data
            let product = d.productID.flatMap { products[$0] }
            func requireProduct() throws(EventValidationError) -> Product {
                guard let product else {
                    throw EventValidationError(
                        field: "\(path).data.product_id",
                        reason: "\"\(d.productID ?? "")\" is not in the catalog: PUT /v1/catalog/products/\(d.productID ?? "…") first")
                }
                return product
            }
            var types: [(EventType, [String: JSONValue], String)] = [(d.type, data, d.idempotencyKey)]
            switch d.type {
            case .refund where data[EventDataKey.amountMinor] == nil:
                // Receipts do not say what was paid: a cancelled transaction is refunded in full at the catalog price.
                let p = try requireProduct()
                data[EventDataKey.amountMinor] = .number(JSONNumber(p.priceMinor))
                data[EventDataKey.currency] = .string(p.currency)
                types = [(d.type, data, d.idempotencyKey)]
            case .cancellation where data[EventDataKey.entitlements] == nil && d.productID != nil:
                data[EventDataKey.entitlements] = .array(try requireProduct().entitlements.map(JSONValue.string))
                types = [(d.type, data, d.idempotencyKey)]
            case .credit where data[EventDataKey.entitlement] == nil:
                // A credit grants one entitlement: one event per entitlement of the product.
                types = try requireProduct().entitlements.map { e in
                    var c = data
                    c[EventDataKey.entitlement] = .string(e)
                    return (.credit, c, "\(d.idempotencyKey):\(e)")
                }
            default:
                break
            }
            for (type, data, key) in types {
                var event = NewEvent(
                    subscriberID: subscriberID, type: type, occurredAt: d.occurredAt, source: source,
                    environment: d.environment, idempotencyKey: key, data: data, metadata: d.metadata)
                try CatalogFill.apply(&event, products: products, path: path)
                try EventDataValidator.validate(type: type, data: event.data, occurredAt: event.occurredAt, path: "\(path).data")
                events.append(event)
            }
        }
        return events
    }
}
