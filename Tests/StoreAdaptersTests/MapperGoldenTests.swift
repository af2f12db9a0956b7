import AppleStore
import Foundation
import GoogleStore
import LedgerCore
import LedgerTestSupport
import StoreAdapters
import StripeStore
import Testing

/// The mappers' `data`, byte for byte, against goldens written from the mappers before the typed write model
/// (issue 34 item 3): fingerprints, the idempotency of redelivered messages and the hash chain depend on it.
/// Each store's mapper tests run again here with every draft they map recorded; the RevenueCat import's
/// mapping is run over a generated export and a row of each shape the generator does not make.
@Suite("Mapped event data is byte-identical to the goldens", .serialized)
struct MapperGoldenTests {
    static func collect(_ name: String, _ body: (GoldenSink) async throws -> Void) async throws {
        let sink = GoldenSink()
        try await GoldenSink.$current.withValue(sink) { try await body(sink) }
        try sink.check(name)
    }

    @Test("App Store notifications and receipts")
    func apple() async throws {
        try await Self.collect("apple.tsv") { s in
            let n = NotificationMapperTests()
            s.begin("subscribed")
            try await n.subscribed()
            s.begin("didRenew")
            try await n.didRenew()
            s.begin("refunds")
            try await n.refunds()
            s.begin("otherTypes")
            try await n.otherTypes()
            s.begin("appleStorefront")
            try CountryAndTaxMappingTests().appleStorefront()
            let r = ReceiptMapperTests()
            let receiptTests: [(String, () throws -> Void)] = [
                ("trialThenRenewals", r.trialThenRenewalsComeOutInPurchaseOrder),
                ("cancellation", r.cancellationAddsARefundForItsOwnTransactionOnly),
                ("cancellationWithoutReason", r.cancellationWithoutReasonIsAnAppleCancellation),
                ("autoRenewOff", r.autoRenewTurnedOff), ("renewalProduct", r.renewalProductFallsBackToAutoRenewProduct),
                ("grace", r.gracePeriodBecomesABillingIssue), ("retry", r.billingRetryWithoutGraceIsABillingIssueWithoutGrace),
                ("graceByExpiry", r.graceEndingByTheExpiryIsNoBillingIssue), ("otherChain", r.renewalInfoOfAnotherChainIsLeftOut),
                ("oldShape", r.oldShapeWithOneLatestReceiptInfoObject), ("oldShapeExpired", r.oldShapeExpiredStillCarriesData),
                ("oldShapeSandboxRefund", r.oldShapeSandboxAndRefund), ("sandboxToProduction", r.sandboxReceiptSentToProduction),
                ("duplicate", r.duplicateTransactionIsMappedOnceFromTheRenewalHistory),
                ("withoutExpiry", r.purchasesWithoutExpiryLeaveTheKindToTheCatalog), ("numbers", r.numbersMayBeJSONNumbers),
            ]
            for (label, test) in receiptTests {
                s.begin("receipt." + label)
                try test()
            }
            for (extra, offer) in [
                ("", "none"), (#""is_in_intro_offer_period": "true""#, "intro"), (#""promotional_offer_id": "winback_50""#, "promo"),
                (#""offer_code_ref_name": "SPRING24""#, "promo"), (#""is_trial_period": "true", "offer_code_ref_name": "FREEWEEK""#, "trial"),
            ] {
                s.begin("receipt.offer.\(offer)")
                try r.offerIsRead(extra: extra, offer: offer)
            }
            // What the App Store Server API answers for a revoked transaction.
            let revoked = SignedNotifications.transaction(
                "1000", from: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z",
                extra: ["revocationDate": SignedNotifications.ms("2026-03-10T00:00:00Z"), "revocationReason": 0])
            s.begin("revoked")
            for t in [revoked, revoked.merging(["revocationType": "FAMILY_REVOKE"]) { $1 }] {
                GoldenSink.record([try AppleNotificationMapper.revokedDraft(t, environment: .production, meta: [:])])
            }
        }
    }

    @Test("Google Play subscriptions, one-time products, orders, replacements and voided purchases")
    func google() async throws {
        try await Self.collect("google.tsv") { s in
            let g = GoogleAdapterTests()
            s.begin("money")
            g.money()
            s.begin("mapping")
            try g.mapping()
            s.begin("lateAndMonthEnd")
            try g.lateAndMonthEnd()
            s.begin("twoLineItems")
            try g.twoLineItems()
            s.begin("googleRegionAndTax")
            try CountryAndTaxMappingTests().googleRegionAndTax()
            try Self.googleSweep(s)
            s.begin("replacement")
            let n = try GoogleAdapterTests.notification(type: 1)
            let old = GoogleAdapterTests.state("SUBSCRIPTION_STATE_CANCELED", order: "GPA.1..2")
            GoldenSink.record(GoogleSubscriptionMapper.replacement(old: old, at: n.eventTime, currency: "EUR", n: n))
            GoldenSink.record(GoogleSubscriptionMapper.replacement(old: old, at: n.eventTime, currency: nil, n: n))
            s.begin("voided")
            for refundType: Int64 in [1, 2] {
                let voided = try GoogleNotification(
                    messageID: "m-v\(refundType)",
                    notification: [
                        "packageName": "com.example", "eventTimeMillis": "1775037600000",
                        "voidedPurchaseNotification": [
                            "purchaseToken": "tok", "orderId": "GPA.7..3", "productType": 1, "refundType": .number(JSONNumber(refundType)),
                        ],
                    ])
                GoldenSink.record(GoogleSubscriptionMapper.voided(voided, product: "pro.monthly", environment: .production))
                var refund = GoogleSubscriptionMapper.voided(voided, product: nil, environment: .sandbox, at: n.eventTime)[0]
                GoogleOrderPricing.applyRefund(
                    order: CountryAndTaxMappingTests.googleOrder(total: ("12", 990_000_000), tax: ("2", 0)), to: &refund)
                GoldenSink.record([refund])
            }
        }
    }

    /// Every subscription state with every notification type the mapper reads, with and without the order,
    /// for each kind of line item; one-time products paid, refunded and priced.
    static func googleSweep(_ s: GoldenSink) throws {
        let states = ["ACTIVE", "CANCELED", "EXPIRED", "IN_GRACE_PERIOD", "ON_HOLD", "PAUSED", "PENDING"].map { "SUBSCRIPTION_STATE_" + $0 }
        let items: [(String, [String: JSONValue])] = [
            ("plain", [:]), ("trial", ["offerPhase": ["freeTrial": [:]]]), ("intro", ["offerPhase": ["introductoryPrice": [:]]]),
            ("promo", ["offerDetails": ["offerId": "spring"]]), ("prepaid", ["prepaidPlan": [:]]),
        ]
        let contexts: [JSONValue?] = [nil, ["userInitiatedCancellation": [:]], ["systemInitiatedCancellation": [:]]]
        var cases: [(state: String, type: Int, item: String, context: Int)] = []
        for state in states {
            for type in [2, 3, 7, 8, 9, 12, 13, 19] { cases += (type == 13 ? [0, 1, 2] : [0]).map { (state, type, "plain", $0) } }
        }
        cases += items.dropFirst().map { ("SUBSCRIPTION_STATE_ACTIVE", 2, $0.0, 0) }
        for c in cases {
            for order in ["GPA.1", "GPA.1..0"] {
                var p = GoogleAdapterTests.state(c.state, order: order, extra: ["regionCode": "DE"])
                var item = p["lineItems"]!.arrayValue![0].objectValue!
                for (k, v) in items.first(where: { $0.0 == c.item })!.1 { item[k] = v }
                item["autoRenewingPlan"] = ["autoRenewEnabled": .bool(c.type == 7), "priceChangeDetails": ["newPrice": ["units": "12"]]]
                p["lineItems"] = [.object(item)]
                if let context = contexts[c.context] { p["canceledStateContext"] = context }
                let n = try GoogleAdapterTests.notification(type: c.type)
                for orders in [[:], [order: GoogleAdapterTests.order(order, "2026-04-01T10:00:00Z", "2026-04-20T10:00:00Z")]] {
                    s.begin("sweep \(c.state) \(c.type) \(c.item) \(c.context) \(order) \(orders.count)")
                    GoldenSink.record(try GoogleSubscriptionMapper.resolve(n, purchase: p, orders: orders).drafts)
                }
            }
        }
        let n = try GoogleAdapterTests.notification(type: 1)
        for (state, placed) in [(0, nil), (0, CountryAndTaxMappingTests.googleOrder(total: ("12", 990_000_000), tax: ("2", 0))), (1, nil)] {
            for orderState in ["PROCESSED", "REFUNDED"] {
                var order = placed ?? GoogleAdapterTests.order("GPA.5", "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z")
                order["state"] = .string(orderState)
                let p: [String: JSONValue] = [
                    "purchaseState": .number(JSONNumber(Int64(state))), "orderId": "GPA.5", "purchaseTimeMillis": "1775037600000",
                    "regionCode": "FR", "acknowledgementState": 0,
                ]
                s.begin("product \(state) \(orderState) \(placed != nil)")
                GoldenSink.record(try GoogleProductMapper.resolve(n, product: "lifetime.pro", purchase: p, order: order).drafts)
            }
        }
    }

    @Test("Stripe events")
    func stripe() async throws {
        try await Self.collect("stripe.tsv") { s in
            let t = StripeMapperTests()
            let tests: [(String, () throws -> Void)] = [
                ("purchase", t.purchase), ("feeAndCurrency", t.feeAndCurrency), ("paymentFailed", t.paymentFailed), ("upgrade", t.upgrade),
                ("refunds", t.refunds), ("subscriptions", t.subscriptions), ("malformed", t.malformed),
                ("basilInvoice", StripeBasilMapperTests().basilInvoice), ("cancelAndTrial", StripeBasilMapperTests().cancelAndTrial),
                ("stripeInvoiceTax", CountryAndTaxMappingTests().stripeInvoiceTax),
            ]
            for (label, test) in tests {
                s.begin(label)
                try test()
            }
            // What the tests above do not map: a one-time pass, a paused subscription, a failed renewal past its retries.
            s.begin("extra")
            let pass = StripeFixtures.object(
                "payment_intent",
                [
                    "id": "pi_9", "metadata": ["lookup_key": "lifetime.pro"], "amount_received": 4999, "currency": "usd",
                    "created": .number(JSONNumber(StripeMapperTests.mar1)),
                ])
            GoldenSink.record(try StripeEventMapper.map(try StripeFixtures.event("payment_intent.succeeded", object: pass)))
            let paused = StripeFixtures.object("subscription", ["id": "sub_9", "status": "paused"])
            GoldenSink.record(
                try StripeEventMapper.map(try StripeFixtures.event("customer.subscription.updated", object: paused, previous: ["status": "active"])))
            let line = StripeFixtures.line(
                id: "il_9", amount: 1000, start: StripeMapperTests.mar1, end: StripeMapperTests.apr1, price: StripeFixtures.price("pro.monthly"))
            let failed = t.invoice("subscription_cycle", lines: [line]).merging(["next_payment_attempt": .null, "attempt_count": 4]) { $1 }
            GoldenSink.record(
                try StripeEventMapper.map(try StripeFixtures.event("invoice.payment_failed", created: StripeMapperTests.mar1, object: failed)))
        }
    }

    @Test("RevenueCat export rows")
    func revenueCat() async throws {
        try await Self.collect("revenuecat.tsv") { s in
            var generator = RevenueCatExportGenerator(seed: 7, subscribers: 60)
            _ = generator.update(count: 20, at: generator.exportTime)
            var rows = generator.rows
            // Shapes the generator does not make: a promotional grant (with an end and for ever), a product with
            // no entitlement, a non-renewing period, a lifetime purchase, an intro offer, a row with no currency.
            var promo = rows[0]
            promo.store = "promotional"
            rows.append(promo)
            var plain = rows[1]
            plain.entitlements = []
            rows.append(plain)
            var intro = rows[2]
            intro.isIntro = true
            rows.append(intro)
            let text = RevenueCatExportGenerator.csv(rows, version: .v7)
            var bytes = Array(text.utf8)[...]
            var reader = CSVRecordReader(delimiter: UInt8(ascii: ",")) {
                defer { bytes = bytes.dropFirst(1 << 16) }
                return Array(bytes.prefix(1 << 16))
            }
            var records: [CSVRecordReader.Record] = []
            while let r = try reader.next() { records.append(r) }
            let header = try RevenueCatHeader(records[0].fields)
            func column(_ name: String) -> Int { RevenueCatExportGenerator.header(.v7, updatedAt: true).firstIndex(of: name)! }
            var forever = records[records.count - 3]
            forever.fields[column("end_time")] = ""
            forever.fields[column("effective_end_time")] = ""
            var nonRenewing = records[3]
            nonRenewing.fields[column("is_auto_renewable")] = "false"
            var lifetime = nonRenewing
            lifetime.fields[column("end_time")] = ""
            lifetime.fields[column("effective_end_time")] = ""
            var free = records[4]
            free.fields[column("purchased_currency")] = ""
            for price in ["price_in_usd", "price_in_purchased_currency", "purchase_price_in_usd", "purchase_price_in_purchased_currency"] {
                free.fields[column(price)] = ""
            }
            free.fields[column("is_trial_period")] = "true"
            records += [forever, nonRenewing, lifetime, free]
            for record in records.dropFirst() {
                s.begin("line \(record.line)")
                let row = try RevenueCatRow(fields: record.fields, line: record.line, header: header)
                _ = GoldenSink.record(try RevenueCatMapping.events(for: row, asOf: generator.exportTime))
            }
        }
    }
}
