import Foundation
import LedgerCore
import StoreAdapters
import StripeStore
import Testing

/// Stripe's own example objects (openapi fixtures3.json, MIT), edited field by field per scenario.
enum StripeFixtures {
    static let all: [String: JSONValue] = {
        let url = Bundle.module.url(forResource: "Resources/stripe/fixtures", withExtension: "json")!
        return try! JSONParser.parse(Array(Data(contentsOf: url)), maxDepth: 1000).objectValue!
    }()

    static func object(_ name: String, _ overrides: [String: JSONValue] = [:]) -> [String: JSONValue] {
        var o = all[name]!.objectValue!
        for (k, v) in overrides { o[k] = v }
        return o
    }

    static func event(
        _ type: String, id: String = "evt_1", created: Int64 = 1_772_359_200, livemode: Bool = true, object: [String: JSONValue],
        previous: [String: JSONValue]? = nil
    ) throws -> StripeEvent {
        var e = all["event"]!.objectValue!
        e["id"] = .string(id)
        e["type"] = .string(type)
        e["created"] = .number(JSONNumber(created))
        e["livemode"] = .bool(livemode)
        var data: [String: JSONValue] = ["object": .object(object)]
        if let previous { data["previous_attributes"] = .object(previous) }
        e["data"] = .object(data)
        return try StripeEvent(payload: e)
    }

    static func price(_ lookup: String?, id: String = "price_1PgafmB7WZ01zgkW6dKueIc5") -> JSONValue {
        var p = all["subscription"]!.objectValue!["items"]!.objectValue!["data"]!.arrayValue![0].objectValue!["price"]!.objectValue!
        p["id"] = .string(id)
        p["lookup_key"] = lookup.map(JSONValue.string) ?? .null
        return .object(p)
    }

    static func line(
        id: String, amount: Int64, start: Int64, end: Int64, price: JSONValue, proration: Bool = false, credited: String? = nil
    ) -> JSONValue {
        var l = all["invoice"]!.objectValue!["lines"]!.objectValue!["data"]!.arrayValue![0].objectValue!
        l["id"] = .string(id)
        l["amount"] = .number(JSONNumber(amount))
        l["period"] = ["start": .number(JSONNumber(start)), "end": .number(JSONNumber(end))]
        l["price"] = price
        l["proration"] = .bool(proration)
        if let credited { l["proration_details"] = ["credited_items": ["invoice": .string(credited), "invoice_line_items": []]] }
        return .object(l)
    }
}

@Suite("Stripe event mapping (pure)")
struct StripeMapperTests {
    static let mar1: Int64 = 1_772_359_200  // 2026-03-01T10:00:00Z
    static let apr1: Int64 = 1_775_037_600

    func invoice(_ reason: String, lines: [JSONValue], pi: String? = "pi_1", paidAt: Int64 = mar1) -> [String: JSONValue] {
        StripeFixtures.object(
            "invoice",
            [
                "id": "in_1", "billing_reason": .string(reason), "customer": "cus_1", "subscription": "sub_1",
                "payment_intent": pi.map(JSONValue.string) ?? .null, "lines": ["object": "list", "data": .array(lines)],
                "status_transitions": ["paid_at": .number(JSONNumber(paidAt)), "finalized_at": .null],
                "subscription_details": ["metadata": ["subscriber_id": "web-1"]],
            ])
    }

    @Test("invoice.paid subscription_create: a purchase at paid_at of the line's period, price and lookup key")
    func purchase() throws {
        let line = StripeFixtures.line(id: "il_1", amount: 1000, start: Self.mar1, end: Self.apr1, price: StripeFixtures.price("pro.monthly"))
        let m = try StripeEventMapper.recordedInterpret(
            try StripeFixtures.event("invoice.paid", object: invoice("subscription_create", lines: [line])))
        #expect(m.accountID == "cus_1" && m.subscriberHint == "web-1" && m.linkedIDs == ["in_1", "pi_1"])
        let d = try #require(m.drafts.first)
        #expect(m.drafts.count == 1 && d.type == .purchase && d.productID == "pro.monthly")
        #expect(d.idempotencyKey == "stripe:invoice:in_1:il_1" && d.occurredAt == Timestamp(microseconds: Self.mar1 * 1_000_000))
        #expect(d.data["transaction_id"] == "pi_1" && d.data["price_minor"] == 1000 && d.data["currency"] == "USD")
        #expect(d.data["period"] == "P1M" && d.data["period_start"] == "2026-03-01T10:00:00Z" && d.data["period_end"] == "2026-04-01T10:00:00Z")
        #expect(d.environment == .production)
        // invoice.payment_succeeded says the same fact: the same key.
        let again = try StripeEventMapper.recordedMap(
            try StripeFixtures.event("invoice.payment_succeeded", id: "evt_2", object: invoice("subscription_create", lines: [line])))
        #expect(again.map(\.idempotencyKey) == [d.idempotencyKey])
        // Without a lookup key the price id is the product id; a cycle is a renewal; livemode false is sandbox.
        let cycle = try StripeEventMapper.recordedMap(
            try StripeFixtures.event(
                "invoice.paid", livemode: false,
                object: invoice(
                    "subscription_cycle",
                    lines: [
                        StripeFixtures.line(id: "il_2", amount: 1000, start: Self.mar1, end: Self.apr1, price: StripeFixtures.price(nil))
                    ])))
        #expect(cycle.first?.type == .renewal && cycle.first?.productID == "price_1PgafmB7WZ01zgkW6dKueIc5" && cycle.first?.environment == .sandbox)
    }

    @Test("Stripe's fee is the commission when the balance transaction is expanded; zero-decimal currencies are taken as they are")
    func feeAndCurrency() throws {
        var line = StripeFixtures.line(id: "il_1", amount: 1200, start: Self.mar1, end: Self.apr1, price: StripeFixtures.price("pro.monthly"))
            .objectValue!
        line["currency"] = "jpy"
        var inv = invoice("subscription_create", lines: [.object(line)])
        inv["charge"] = .object(
            StripeFixtures.object(
                "charge",
                [
                    "id": "ch_1",
                    "balance_transaction": .object(StripeFixtures.object("balance_transaction", ["amount": 1200, "fee": 71, "currency": "jpy"])),
                ]))
        let d = try #require(try StripeEventMapper.recordedMap(try StripeFixtures.event("invoice.paid", object: inv)).first)
        #expect(d.data["price_minor"] == 1200 && d.data["currency"] == "JPY")
        #expect(d.data["commission_rate"] == "0.059167")
        inv["charge"] = "ch_1"
        let catalogRate = try #require(try StripeEventMapper.recordedMap(try StripeFixtures.event("invoice.paid", object: inv)).first)
        #expect(catalogRate.data["commission_rate"] == nil)
    }

    @Test(
        "a failed renewal is a billing issue with grace until a day after Stripe's next attempt, at most the maximum; a failed first payment grants nothing"
    )
    func paymentFailed() throws {
        let line = StripeFixtures.line(
            id: "il_1", amount: 1000, start: Self.apr1, end: Self.apr1 + 30 * 86_400, price: StripeFixtures.price("pro.monthly"))
        var failed = invoice("subscription_cycle", lines: [line])
        failed["attempt_count"] = 2
        failed["next_payment_attempt"] = .number(JSONNumber(Self.apr1 + 3 * 86_400))
        let renewal = try StripeEventMapper.recordedMap(try StripeFixtures.event("invoice.payment_failed", created: Self.apr1, object: failed))
        #expect(renewal.map(\.type) == [.billingIssue] && renewal[0].idempotencyKey == "stripe:billing_issue:sub_1:\(Self.apr1):2")
        #expect(renewal[0].data["grace_until"] == "2026-04-05T10:00:00Z")
        failed["next_payment_attempt"] = .number(JSONNumber(Self.apr1 + 60 * 86_400))
        let capped = try StripeEventMapper.recordedInterpret(
            try StripeFixtures.event("invoice.payment_failed", created: Self.apr1, object: failed),
            options: StripeMappingOptions(graceMaxSeconds: 10 * 86_400))
        #expect(capped.drafts.first?.data["grace_until"] == "2026-04-11T10:00:00Z")
        #expect(
            try StripeEventMapper.recordedMap(
                try StripeFixtures.event("invoice.payment_failed", object: invoice("subscription_create", lines: [line]))
            )
            .isEmpty)
    }

    @Test("an upgrade's proration credit refunds and cuts the credited invoice; the new item is a purchase")
    func upgrade() throws {
        let mid: Int64 = 1_773_568_800
        let m = try StripeEventMapper.recordedInterpret(
            try StripeFixtures.event(
                "invoice.paid",
                object: invoice(
                    "subscription_update",
                    lines: [
                        StripeFixtures.line(
                            id: "il_old", amount: -500, start: mid, end: Self.apr1, price: StripeFixtures.price("pro.monthly"), proration: true,
                            credited: "in_0"),
                        StripeFixtures.line(
                            id: "il_new", amount: 1000, start: mid, end: Self.apr1, price: StripeFixtures.price("max.monthly", id: "price_max"),
                            proration: true),
                    ], paidAt: mid)))
        #expect(m.drafts.map(\.type) == [.refund, .purchase])
        #expect(m.drafts[0].data["amount_minor"] == 500 && m.drafts[0].data["cut"] == true && m.drafts[0].metadata["credited_invoice"] == "in_0")
        #expect(m.drafts[1].productID == "max.monthly" && m.drafts[1].data["transaction_id"] == "pi_1")
    }

    @Test("refunds are partial (cut false) by refund id; a fully refunded charge adds the cut; disputes are chargebacks")
    func refunds() throws {
        let refund = StripeFixtures.object(
            "refund", ["id": "re_1", "amount": 300, "payment_intent": "pi_1", "created": .number(JSONNumber(Self.mar1 + 100))])
        let r = try StripeEventMapper.recordedInterpret(try StripeFixtures.event("refund.created", object: refund))
        #expect(r.drafts.count == 1 && r.drafts[0].idempotencyKey == "stripe:refund:re_1" && r.drafts[0].data["cut"] == false)
        #expect(r.drafts[0].data["transaction_id"] == "pi_1" && r.accountID == "pi_1")
        let charge = StripeFixtures.object(
            "charge",
            [
                "id": "ch_1", "payment_intent": "pi_1", "customer": "cus_1", "amount": 1000, "amount_refunded": 1000, "refunded": true,
                "refunds": [
                    "object": "list",
                    "data": [
                        .object(refund),
                        .object(StripeFixtures.object("refund", ["id": "re_2", "amount": 700, "created": .number(JSONNumber(Self.mar1 + 200))])),
                    ],
                ],
            ])
        let c = try StripeEventMapper.recordedInterpret(try StripeFixtures.event("charge.refunded", object: charge))
        #expect(c.drafts.map(\.idempotencyKey) == ["stripe:refund:re_1", "stripe:refund:re_2", "stripe:charge_refunded:ch_1"])
        #expect(c.drafts[2].data["cut"] == true && c.drafts[2].data["amount_minor"] == 0)
        #expect(c.drafts[2].occurredAt == Timestamp(microseconds: (Self.mar1 + 200) * 1_000_000))
        let dispute = StripeFixtures.object("dispute", ["id": "dp_1", "payment_intent": "pi_1", "amount": 1000])
        let d = try StripeEventMapper.recordedMap(try StripeFixtures.event("charge.dispute.created", object: dispute))
        #expect(d.first?.type == .refund && d.first?.data["reason"] == "chargeback" && d.first?.data["cut"] == true)
        var won = dispute
        won["status"] = "won"
        #expect(try StripeEventMapper.recordedMap(try StripeFixtures.event("charge.dispute.closed", object: won)).first?.type == .refundReversal)
        won["status"] = "lost"
        #expect(try StripeEventMapper.recordedMap(try StripeFixtures.event("charge.dispute.closed", object: won)).isEmpty)
    }

    @Test("subscriptions: trial window, auto-renew off, past_due grace, deletion reasons; unknown types are ignored")
    func subscriptions() throws {
        var sub = StripeFixtures.object(
            "subscription",
            [
                "id": "sub_1", "status": "trialing", "trial_start": .number(JSONNumber(Self.mar1)),
                "trial_end": .number(JSONNumber(Self.mar1 + 7 * 86_400)),
                "metadata": ["subscriber_id": "web-1"], "cancel_at_period_end": false,
            ])
        var items = sub["items"]!.objectValue!
        var item = items["data"]!.arrayValue![0].objectValue!
        item["price"] = StripeFixtures.price("pro.monthly")
        items["data"] = [.object(item)]
        sub["items"] = .object(items)
        let trial = try StripeEventMapper.recordedMap(try StripeFixtures.event("customer.subscription.created", object: sub))
        #expect(
            trial.count == 1 && trial[0].data["offer"] == "trial" && trial[0].data["price_minor"] == 0
                && trial[0].idempotencyKey == "stripe:trial:sub_1")
        sub["status"] = "active"
        sub["cancel_at_period_end"] = true
        let off = try StripeEventMapper.recordedMap(
            try StripeFixtures.event("customer.subscription.updated", object: sub, previous: ["cancel_at_period_end": false]))
        #expect(off.map(\.type) == [.autoRenewChanged] && off[0].data["enabled"] == false)
        // The newer way: a `cancel_at` set, then removed.
        var at = sub
        at["cancel_at_period_end"] = false
        at["cancel_at"] = .number(JSONNumber(Self.apr1))
        let setAt = try StripeEventMapper.recordedMap(
            try StripeFixtures.event("customer.subscription.updated", id: "evt_3", object: at, previous: ["cancel_at": .null]))
        #expect(setAt.map(\.type) == [.autoRenewChanged] && setAt[0].data["enabled"] == false)
        at["cancel_at"] = .null
        let cleared = try StripeEventMapper.recordedMap(
            try StripeFixtures.event(
                "customer.subscription.updated", id: "evt_4", object: at, previous: ["cancel_at": .number(JSONNumber(Self.apr1))]))
        #expect(cleared.map(\.type) == [.autoRenewChanged] && cleared[0].data["enabled"] == true)
        sub["status"] = "past_due"
        sub["current_period_start"] = .number(JSONNumber(Self.apr1))
        let due = try StripeEventMapper.recordedMap(
            try StripeFixtures.event("customer.subscription.updated", object: sub, previous: ["status": "active"]))
        #expect(due.map(\.type) == [.billingIssue] && due[0].data["grace_until"] == "2026-04-08T10:00:00Z")
        sub["status"] = "canceled"
        sub["ended_at"] = .number(JSONNumber(Self.apr1 + 86_400))
        sub["cancellation_details"] = ["reason": "payment_failed", "comment": .null, "feedback": .null]
        let deleted = try StripeEventMapper.recordedMap(try StripeFixtures.event("customer.subscription.deleted", object: sub))
        #expect(deleted.map(\.type) == [.expiration] && deleted[0].data["reason"] == "billing")
        let unknown = try StripeEventMapper.recordedInterpret(
            try StripeFixtures.event("plan.created", object: StripeFixtures.all["event"]!.objectValue!["data"]!.objectValue!["object"]!.objectValue!))
        #expect(unknown.ignored && unknown.drafts.isEmpty)
    }

    @Test("malformed events name the field; amounts above 10^15 are refused")
    func malformed() throws {
        #expect(throws: StoreMappingError.self) { try StripeEvent(payload: ["id": "evt_1", "type": "invoice.paid", "created": 1]) }
        let line = StripeFixtures.line(
            id: "il_1", amount: 1_000_000_000_000_001, start: Self.mar1, end: Self.apr1, price: StripeFixtures.price("pro.monthly"))
        do {
            _ = try StripeEventMapper.recordedMap(try StripeFixtures.event("invoice.paid", object: invoice("subscription_create", lines: [line])))
            Issue.record("accepted an amount above the limit")
        } catch {
            #expect((error as? StoreMappingError)?.field == "data.object.lines.data[0].amount")
        }
        let backwards = StripeFixtures.line(id: "il_1", amount: 10, start: Self.apr1, end: Self.mar1, price: StripeFixtures.price("pro.monthly"))
        #expect(throws: StoreMappingError.self) {
            try StripeEventMapper.recordedMap(try StripeFixtures.event("invoice.paid", object: invoice("subscription_create", lines: [backwards])))
        }
    }
}

@Suite("Stripe event mapping: API 2025-03-31.basil and later (pure)")
struct StripeBasilMapperTests {
    static let mar1: Int64 = 1_772_359_200
    static let apr1: Int64 = 1_775_037_600

    @Test("an invoice without payment intent is its own transaction; its price is named by id; invoice_payment.paid pairs it with its payment")
    func basilInvoice() throws {
        var line = StripeFixtures.all["invoice"]!.objectValue!["lines"]!.objectValue!["data"]!.arrayValue![0].objectValue!
        line["id"] = "il_1"
        line["amount"] = 1000
        line["period"] = ["start": .number(JSONNumber(Self.mar1)), "end": .number(JSONNumber(Self.apr1))]
        line["pricing"] = ["type": "price_details", "price_details": ["price": "price_1", "product": "prod_1"]]
        line["parent"] = ["type": "subscription_item_details", "subscription_item_details": ["proration": false, "subscription": "sub_1"]]
        var inv = StripeFixtures.object(
            "invoice",
            [
                "id": "in_1", "billing_reason": "subscription_create", "customer": "cus_1", "lines": ["object": "list", "data": [.object(line)]],
                "status_transitions": ["paid_at": .number(JSONNumber(Self.mar1))],
                "parent": [
                    "type": "subscription_details", "subscription_details": ["subscription": "sub_1", "metadata": ["subscriber_id": "web-1"]],
                ],
            ])
        inv["subscription"] = nil
        var payload = try StripeFixtures.event("invoice.paid", object: inv).payload
        payload["api_version"] = "2025-03-31.basil"
        let e = try StripeEvent(payload: payload)
        #expect(StripeAPIVersion.isKnown(e.apiVersion) && !StripeAPIVersion.isKnown("2031-01-01.zebra") && !StripeAPIVersion.isKnown(nil))
        let m = try StripeEventMapper.recordedInterpret(e)
        #expect(m.subscriberHint == "web-1" && m.linkedIDs == ["in_1"])
        #expect(
            m.drafts.first?.productID == "price_1" && m.drafts.first?.data["transaction_id"] == "in_1"
                && m.drafts.first?.data["original_transaction_id"] == "sub_1")
        let pay = StripeFixtures.object(
            "invoice_payment", ["invoice": "in_1", "status": "paid", "payment": ["type": "payment_intent", "payment_intent": "pi_1"]])
        let p = try StripeEventMapper.recordedInterpret(try StripeFixtures.event("invoice_payment.paid", object: pay))
        #expect(!p.ignored && p.drafts.isEmpty && p.accountID == "in_1" && p.invoicePayment?.payments == ["pi_1"])
    }

    @Test("a subscription deleted before its period's end is also a cancellation (other) then; an extended trial is a credit")
    func cancelAndTrial() throws {
        var sub = StripeFixtures.object(
            "subscription",
            [
                "id": "sub_1", "status": "canceled", "ended_at": .number(JSONNumber(Self.mar1 + 86_400)),
                "current_period_end": .number(JSONNumber(Self.apr1)),
                "cancellation_details": ["reason": "cancellation_requested"],
            ])
        var items = sub["items"]!.objectValue!
        var item = items["data"]!.arrayValue![0].objectValue!
        item["price"] = StripeFixtures.price("pro.monthly")
        items["data"] = [.object(item)]
        sub["items"] = .object(items)
        let deleted = try StripeEventMapper.recordedMap(try StripeFixtures.event("customer.subscription.deleted", object: sub))
        #expect(deleted.map(\.type) == [.expiration, .cancellation] && deleted[1].data["reason"] == "other")
        sub["status"] = "trialing"
        sub["trial_start"] = .number(JSONNumber(Self.mar1))
        sub["trial_end"] = .number(JSONNumber(Self.mar1 + 14 * 86_400))
        let extended = try StripeEventMapper.recordedMap(
            try StripeFixtures.event(
                "customer.subscription.updated", object: sub, previous: ["trial_end": .number(JSONNumber(Self.mar1 + 7 * 86_400))]))
        #expect(extended.map(\.type) == [.credit, .purchase])
        #expect(extended[1].data["period_end"] == "2026-03-08T10:00:00Z" && extended[0].data["window_end"] == "2026-03-15T10:00:00Z")
    }
}
