import AppleStore
import Foundation
import GoogleStore
import LedgerCore
import StoreAdapters
import StripeStore
import Testing

/// `country` and `tax_minor` where each store says them (ledger-semantics section 2): Apple's storefront
/// (alpha-3), Google's `regionCode` and order tax, Stripe's invoice address and line taxes.
@Suite("Store adapters: country and tax")
struct CountryAndTaxMappingTests {
    @Test("Apple: the storefront of Apple's own example transaction (USA) becomes US; another becomes its alpha-2; an unknown one is left out")
    func appleStorefront() throws {
        let url = try #require(Bundle.module.url(forResource: "Resources/models/signedTransaction", withExtension: "json"))
        let example = try #require(try JSONParser.parse(Array(Data(contentsOf: url)), maxDepth: 100).objectValue)
        let draft = try AppleNotificationMapper.recordedTransactionDraft(example, environment: .production, meta: [:])
        #expect(draft.data["country"] == "US")
        #expect(draft.data["tax_minor"] == nil, "Apple does not say the tax")
        var other = example
        other["storefront"] = "DEU"
        #expect(try AppleNotificationMapper.recordedTransactionDraft(other, environment: .production, meta: [:]).data["country"] == "DE")
        other["storefront"] = "XYZ"
        #expect(try AppleNotificationMapper.recordedTransactionDraft(other, environment: .production, meta: [:]).data["country"] == nil)
        other["storefront"] = nil
        #expect(try AppleNotificationMapper.recordedTransactionDraft(other, environment: .production, meta: [:]).data["country"] == nil)
    }

    static func googleOrder(total: (String, Int64), tax: (String, Int64)?) -> [String: JSONValue] {
        func money(_ units: String, _ nanos: Int64) -> JSONValue {
            ["currencyCode": "EUR", "units": .string(units), "nanos": .number(JSONNumber(nanos))]
        }
        var order = GoogleAdapterTests.order("GPA.1..0", "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z")
        var item = order["lineItems"]!.arrayValue![0].objectValue!
        item["total"] = money(total.0, total.1)
        order["total"] = money(total.0, total.1)
        if let tax {
            item["tax"] = money(tax.0, tax.1)
            order["tax"] = money(tax.0, tax.1)
        }
        order["developerRevenueInBuyerCurrency"] = money("8", 500_000_000)
        order["lineItems"] = [.object(item)]
        return order
    }

    @Test("Google: regionCode is the country; the order's total is the price and its tax the tax; commission stays Google's share of the net")
    func googleRegionAndTax() throws {
        let purchase = GoogleAdapterTests.state("SUBSCRIPTION_STATE_ACTIVE", extra: ["regionCode": "DE"])
        let r = try GoogleSubscriptionMapper.recordedResolve(
            try GoogleAdapterTests.notification(type: 2), purchase: purchase,
            orders: ["GPA.1..0": Self.googleOrder(total: ("11", 900_000_000), tax: ("1", 900_000_000))])
        let d = try #require(r.drafts.first)
        #expect(d.data["country"] == "DE")
        #expect(d.data["price_minor"] == 1190 && d.data["tax_minor"] == 190 && d.data["currency"] == "EUR")
        // Google kept 10.00 − 8.50 = 1.50 of the 10.00 net of tax: 0.15, so commission = round(1000 × 0.15) = 150.
        #expect(d.data["commission_rate"] == "0.150000")
        let noTax = try GoogleSubscriptionMapper.recordedResolve(
            try GoogleAdapterTests.notification(type: 2),
            purchase: GoogleAdapterTests.state("SUBSCRIPTION_STATE_ACTIVE", extra: ["regionCode": "not a country"]),
            orders: ["GPA.1..0": Self.googleOrder(total: ("10", 0), tax: nil)])
        #expect(noTax.drafts.first?.data["country"] == nil && noTax.drafts.first?.data["tax_minor"] == nil)
        #expect(noTax.drafts.first?.data["price_minor"] == 1000)
        // A one-time product's regionCode too.
        let product = try GoogleProductMapper.recordedResolve(
            try GoogleAdapterTests.notification(type: 1), product: "coins",
            purchase: ["purchaseState": 0, "orderId": "GPA.9", "purchaseTimeMillis": "1775037600000", "regionCode": "JP"])
        #expect(product.drafts.first?.data["country"] == "JP")
    }

    static func invoice(line extra: [String: JSONValue], address: JSONValue?) -> StripeEvent {
        var line = StripeFixtures.all["invoice"]!.objectValue!["lines"]!.objectValue!["data"]!.arrayValue![0].objectValue!
        line["id"] = "il_1"
        line["amount"] = 1000
        line["currency"] = "eur"
        line["period"] = ["start": .number(JSONNumber(StripeBasilMapperTests.mar1)), "end": .number(JSONNumber(StripeBasilMapperTests.apr1))]
        line["pricing"] = ["type": "price_details", "price_details": ["price": "price_1", "product": "prod_1"]]
        line["parent"] = ["type": "subscription_item_details", "subscription_item_details": ["proration": false, "subscription": "sub_1"]]
        for (k, v) in extra { line[k] = v }
        var inv = StripeFixtures.object(
            "invoice",
            [
                "id": "in_1", "billing_reason": "subscription_create", "customer": "cus_1", "lines": ["object": "list", "data": [.object(line)]],
                "status_transitions": ["paid_at": .number(JSONNumber(StripeBasilMapperTests.mar1))],
                "parent": ["type": "subscription_details", "subscription_details": ["subscription": "sub_1"]],
            ])
        inv["customer_address"] = address
        var payload = try! StripeFixtures.event("invoice.paid", object: inv).payload
        payload["api_version"] = "2025-03-31.basil"
        return try! StripeEvent(payload: payload)
    }

    @Test("Stripe: the invoice's customer address is the country; basil line taxes (inclusive and exclusive) and older tax_amounts are the tax")
    func stripeInvoiceTax() throws {
        let inclusive = try StripeEventMapper.recordedMap(
            Self.invoice(
                line: ["taxes": [["amount": 160, "tax_behavior": "inclusive", "type": "tax_rate_details", "taxable_amount": 840]]],
                address: ["country": "DE", "city": .null, "line1": .null, "line2": .null, "postal_code": .null, "state": .null]))
        #expect(inclusive.first?.data["country"] == "DE")
        #expect(inclusive.first?.data["price_minor"] == 1000 && inclusive.first?.data["tax_minor"] == 160)
        // Exclusive tax is charged on top of the line's amount: the buyer paid 1,190.
        let exclusive = try StripeEventMapper.recordedMap(
            Self.invoice(line: ["taxes": [["amount": 190, "tax_behavior": "exclusive", "type": "tax_rate_details"]]], address: ["country": "FR"]))
        #expect(exclusive.first?.data["price_minor"] == 1190 && exclusive.first?.data["tax_minor"] == 190 && exclusive.first?.data["country"] == "FR")
        let older = try StripeEventMapper.recordedMap(Self.invoice(line: ["tax_amounts": [["amount": 100, "inclusive": true]]], address: nil))
        #expect(older.first?.data["price_minor"] == 1000 && older.first?.data["tax_minor"] == 100 && older.first?.data["country"] == nil)
        // Stripe's own example: no tax, no country.
        let plain = try StripeEventMapper.recordedMap(Self.invoice(line: [:], address: ["country": .null]))
        #expect(plain.first?.data["tax_minor"] == nil && plain.first?.data["country"] == nil)
        // Whatever the mapper writes, the validator accepts.
        for d in inclusive + exclusive + older {
            var data = d.data
            data["entitlements"] = ["pro"]
            data["period"] = "P1M"
            #expect(throws: Never.self) { try EventDataValidator.validate(type: d.type, data: data, occurredAt: d.occurredAt, path: "data") }
        }
    }
}
