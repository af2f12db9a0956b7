/// Makes events self-describing at append time: whatever a `purchase`/`renewal` (or an
/// `auto_renew_changed`, `billing_issue`, `expiration`) leaves out is filled in from the catalog.
///
/// Only missing fields are filled; what the client sent wins. The revision used is written as
/// `data.catalog_revision`, so an auditor can tell where the values came from.
public enum CatalogFill {
    /// The product ids whose catalog entries `events` need.
    public static func productsNeeded(by events: [NewEvent]) -> Set<String> {
        Set(events.compactMap { e in needsFill(e) ? e.data[EventDataKey.productID]?.stringValue : nil })
    }

    public static func needsFill(_ event: NewEvent) -> Bool {
        switch event.type {
        case .purchase, .renewal:
            return [EventDataKey.entitlements, EventDataKey.kind, EventDataKey.priceMinor, EventDataKey.currency].contains { event.data[$0] == nil }
                || (event.data[EventDataKey.kind] == nil && event.data[EventDataKey.period] == nil && event.data[EventDataKey.duration] == nil)
        case .autoRenewChanged, .billingIssue, .expiration:
            return event.data[EventDataKey.entitlements] == nil
        default:
            return false
        }
    }

    /// Fills `event` from `products`; an incomplete event naming an unknown product is refused.
    public static func apply(
        _ event: inout NewEvent, products: [String: Product], path: String
    ) throws(EventValidationError) {
        guard needsFill(event) else { return }
        let dataPath = path.isEmpty ? "data" : "\(path).data"
        guard let id = event.data[EventDataKey.productID]?.stringValue else { return }  // the validator names the missing field
        guard let product = products[id] else {
            throw EventValidationError(
                field: "\(dataPath).product_id",
                reason:
                    "\"\(id)\" is not in the catalog: PUT /v1/catalog/products/\(id) first, or send the event complete (entitlements, kind, period or duration, price_minor, currency)"
            )
        }
        var d = event.data
        func fill(_ key: String, _ value: JSONValue?) {
            if d[key] == nil, let value { d[key] = value }
        }
        fill(EventDataKey.entitlements, .array(product.entitlements.map(JSONValue.string)))
        if event.type == .purchase || event.type == .renewal {
            fill(EventDataKey.kind, .string(product.kind.rawValue))
            fill(EventDataKey.priceMinor, .number(JSONNumber(product.priceMinor)))
            fill(EventDataKey.currency, .string(product.currency))
            fill(EventDataKey.commissionRate, .string(product.commissionRate.canonical))
            let kind = d[EventDataKey.kind]?.stringValue
            if kind == EventDataValidator.Kind.autoRenewable.rawValue, let period = product.period {
                fill(EventDataKey.period, .string(period.text))
                let start = d[EventDataKey.periodStart]?.stringValue.flatMap { try? Timestamp(rfc3339: $0) } ?? event.occurredAt
                fill(EventDataKey.periodStart, .string(start.rfc3339))
                fill(EventDataKey.periodEnd, .string(period.added(to: start).rfc3339))
            } else if kind == EventDataValidator.Kind.nonRenewing.rawValue, d[EventDataKey.periodStart] == nil, let duration = product.duration {
                fill(EventDataKey.duration, .string(duration.text))
            }
        }
        d[EventDataKey.catalogRevision] = .number(JSONNumber(Int64(product.revision)))
        event.data = d
    }
}
