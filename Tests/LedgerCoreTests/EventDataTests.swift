import Foundation
import LedgerCore
import Testing

/// The write model: what a store mapper builds is what the validator accepts and the read model reads back,
/// and a member left nil is no key at all (the catalog completes it), while one set to a default is written.
@Suite("Typed event data: the write side")
struct EventDataTests {
    static let t0 = try! Timestamp(rfc3339: "2026-03-01T10:00:00Z")
    static let t1 = try! Timestamp(rfc3339: "2026-04-01T10:00:00.250Z")

    @Test("nil writes no key; a default value (offer none, price 0, cut true) is written; times and money as before")
    func encoding() throws {
        #expect(EventData.Transaction().object.isEmpty)
        #expect(EventData.Refund().object.isEmpty)
        #expect(EventData.Cancellation().object.isEmpty)
        let t = EventData.Transaction(
            productID: "pro.monthly", transactionID: "t1", kind: .autoRenewable, offer: EventDataValidator.Offer.none, periodStart: Self.t0,
            periodEnd: Self.t1, period: "P1W", priceMinor: 0, currency: "USD", commissionRate: "0.059167", taxMinor: 0)
        #expect(
            JSONValue.object(t.object).canonicalString()
                == #"{"commission_rate":"0.059167","currency":"USD","kind":"auto_renewable","offer":"none","period":"P1W","#
                + #""period_end":"2026-04-01T10:00:00.250Z","period_start":"2026-03-01T10:00:00Z","price_minor":0,"product_id":"pro.monthly","#
                + #""tax_minor":0,"transaction_id":"t1"}"#)
        let r = EventData.Refund(transactionID: "t1", amountMinor: -5, reason: "stripe_proration", cut: true)
        #expect(JSONValue.object(r.object).canonicalString() == #"{"amount_minor":-5,"cut":true,"reason":"stripe_proration","transaction_id":"t1"}"#)
        let notice = EventData.StoreNotice(store: "apple", kind: "refund_declined", detail: ["notification_type": "REFUND_DECLINED"])
        #expect(notice.object.keys.sorted() == ["detail", "kind", "store"])
    }

    @Test("each value, once completed, is valid data of its type and reads back through the read model")
    func readsBack() throws {
        func payload(_ type: EventType, _ data: [String: JSONValue]) throws -> EventPayload {
            try EventDataValidator.payload(type: type, data: data, occurredAt: Self.t0, path: "data")
        }
        let purchase = EventData.Transaction(
            productID: "pro.monthly", entitlements: ["pro"], transactionID: "t1", originalTransactionID: "t0", kind: .autoRenewable,
            offer: .intro, periodStart: Self.t0, periodEnd: Self.t1, period: "P1M", priceMinor: 499, currency: "EUR", commissionRate: "0.15",
            country: "DE", taxMinor: 80)
        guard case .transaction(let t) = try payload(.renewal, purchase.object) else {
            Issue.record("not a transaction")
            return
        }
        #expect(t.kind == .autoRenewable && t.offer == .intro && t.periodStart == Self.t0 && t.periodEnd == Self.t1)
        #expect(t.priceMinor == 499 && t.currency == "EUR" && t.commissionRate == "0.15" && t.taxMinor == 80 && t.country == "DE")
        #expect(t.purchaseID == "t0" && t.period == "P1M" && t.entitlements == ["pro"])

        let refund = EventData.Refund(transactionID: "t1", amountMinor: 499, currency: "EUR", reason: "stripe_refund", cut: false)
        guard case .refund(let r) = try payload(.refund, refund.object) else {
            Issue.record("not a refund")
            return
        }
        #expect(r.transactionID == "t1" && r.amountMinor == 499 && r.currency == "EUR" && r.reason == "stripe_refund" && !r.cut)
        let credit = EventData.Credit(entitlement: "pro", windowStart: Self.t0, windowEnd: Self.t1, reason: "google_deferral", grantedBy: "google")
        guard case .credit(let c) = try payload(.credit, credit.object) else {
            Issue.record("not a credit")
            return
        }
        #expect(c.entitlement == "pro" && c.windowStart == Self.t0 && c.windowEnd == Self.t1)
        let grace = EventData.BillingIssue(productID: "pro.monthly", entitlements: ["pro"], graceUntil: Self.t1)
        guard case .billingIssue(let b) = try payload(.billingIssue, grace.object) else {
            Issue.record("not a billing issue")
            return
        }
        #expect(b.graceUntil == Self.t1 && b.productID == "pro.monthly")
        let off = EventData.AutoRenewChanged(enabled: false, productID: "pro.monthly", entitlements: ["pro"])
        guard case .autoRenewChanged(let o) = try payload(.autoRenewChanged, off.object) else {
            Issue.record("not an auto-renew change")
            return
        }
        #expect(o.enabled == false && o.entitlements == ["pro"])
        let lapse = EventData.Expiration(productID: "pro.monthly", entitlements: ["pro"], reason: "billing")
        guard case .expiration(let x) = try payload(.expiration, lapse.object) else {
            Issue.record("not an expiration")
            return
        }
        #expect(x.reason == "billing" && x.entitlements == ["pro"])
        guard case .refundReversal(let v) = try payload(.refundReversal, EventData.RefundReversal(transactionID: "t1").object) else {
            Issue.record("not a refund reversal")
            return
        }
        #expect(v.transactionID == "t1")
    }
}
