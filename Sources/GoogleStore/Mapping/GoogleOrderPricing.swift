import LedgerCore

/// What an order (`orders.get`) says was paid: the draft's `price_minor` becomes the order's total (what the
/// buyer paid, tax included) and `tax_minor` its tax (ledger-semantics section 2), its `commission_rate` what
/// Google kept of the price net of tax (1 − developer revenue / net), so reports count what the buyer paid
/// rather than the catalog's list price (intro offers, regional prices), and commission and proceeds come out
/// as Google's.
public enum GoogleOrderPricing {
    /// A `Money` (`units` + `nanos`) in minor units of its currency, or nil if absent or out of range.
    public static func minorUnits(_ money: JSONValue?) -> (amount: Int64, currency: String)? {
        guard let m = money?.objectValue, let currency = m["currencyCode"]?.stringValue, Identifiers.isValidCurrency(currency) else { return nil }
        // Absent is zero (proto3 JSON omits zero values); present but unreadable is not a price at all.
        let units: Int64
        switch m["units"] {
        case nil, .null?: units = 0
        case .string(let text)?:
            guard let u = Int64(text) else { return nil }
            units = u
        case let value?:
            guard let u = value.numberValue?.int64Value else { return nil }
            units = u
        }
        let nanos: Int64
        switch m["nanos"] {
        case nil, .null?: nanos = 0
        case let value?:
            guard let n = value.numberValue?.int64Value else { return nil }
            nanos = n
        }
        guard abs(nanos) < 1_000_000_000, units >= 0, nanos >= 0 else { return nil }
        let exponent = CurrencyExponent.of(currency)
        var scale: Int64 = 1
        for _ in 0..<exponent { scale *= 10 }
        let (whole, overflow) = units.multipliedReportingOverflow(by: scale)
        guard !overflow else { return nil }
        let nanosPerMinor = 1_000_000_000 / scale
        let (total, overflow2) = whole.addingReportingOverflow((nanos + nanosPerMinor / 2) / nanosPerMinor)
        guard !overflow2, total <= Limits.maxMoneyMinor else { return nil }
        return (total, currency)
    }

    /// The order's total less its tax, in minor units of its currency.
    public static func net(_ order: [String: JSONValue]) -> (amount: Int64, currency: String)? {
        guard let total = minorUnits(order["total"]) else { return nil }
        let tax = minorUnits(order["tax"])
        let net = total.amount - (tax?.currency == total.currency ? tax!.amount : 0)
        return net >= 0 ? (net, total.currency) : nil
    }

    /// A refund draft for the order's total (what its purchase was priced at, tax included: the buyer gets it
    /// all back).
    public static func applyRefund(order: [String: JSONValue], to draft: inout EventDraft) {
        guard draft.type == .refund else { return }
        var refund = EventData.Refund()
        applyRefund(order: order, to: &refund)
        draft.data.merge(refund.object) { $1 }
    }

    /// The same, on the refund a mapper is building.
    public static func applyRefund(order: [String: JSONValue], to refund: inout EventData.Refund) {
        guard let total = minorUnits(order["total"]), net(order) != nil else { return }
        refund.amountMinor = total.amount
        refund.currency = total.currency
    }

    /// Applies an order to a purchase or renewal draft: the line item's amounts when the order has several
    /// (a subscription with an add-on), Google's share from the order's. Leaves the draft as it is (the
    /// catalog's price, noted in `metadata.order_price`) when the order does not say a readable price.
    public static func apply(order: [String: JSONValue], product: String? = nil, to draft: inout EventDraft) {
        var priced = EventData.Transaction()
        apply(order: order, product: product, to: &priced, metadata: &draft.metadata)
        draft.data.merge(priced.object) { $1 }
    }

    /// The same, on the transaction a mapper is building (and its draft's metadata).
    public static func apply(
        order: [String: JSONValue], product: String? = nil, to data: inout EventData.Transaction, metadata: inout [String: JSONValue]
    ) {
        let items = order["lineItems"]?.arrayValue?.compactMap(\.objectValue) ?? []
        let item = items.count > 1 ? items.first { $0["productId"]?.stringValue == product } : nil
        let priced = item ?? order
        guard let total = minorUnits(priced["total"]) else {
            metadata["order_price"] = "unreadable: the catalog's price stands"
            return
        }
        let tax = minorUnits(priced["tax"])
        let net = total.amount - (tax?.currency == total.currency ? tax!.amount : 0)
        guard net >= 0 else {
            metadata["order_price"] = "unreadable: the catalog's price stands"
            return
        }
        data.priceMinor = total.amount
        data.currency = total.currency
        if let tax, tax.currency == total.currency { data.taxMinor = tax.amount }
        metadata["order_total_minor"] = .number(JSONNumber(total.amount))
        if let tax { metadata["order_tax_minor"] = .number(JSONNumber(tax.amount)) }
        // Google's share is the order's: (order net − developer revenue) / order net, for each line item.
        let orderNet = item == nil ? net : self.net(order)?.amount ?? 0
        if let revenue = minorUnits(order["developerRevenueInBuyerCurrency"]), revenue.currency == total.currency {
            if item == nil { metadata["developer_revenue_minor"] = .number(JSONNumber(revenue.amount)) }
            if orderNet > 0, revenue.amount <= orderNet {
                // Parts per million, half up: (net − revenue) / net.
                let (scaled, overflow) = (orderNet - revenue.amount).multipliedReportingOverflow(by: 1_000_000)
                if !overflow {
                    let ppm = (scaled + orderNet / 2) / orderNet
                    let digits = String(ppm)
                    let padded = String(repeating: "0", count: max(0, 6 - digits.count)) + digits
                    data.commissionRate = ppm >= 1_000_000 ? "1" : "0." + padded
                }
            }
        }
    }
}
