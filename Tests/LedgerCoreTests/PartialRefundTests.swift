import Foundation
import LedgerCore
import Testing

/// Refunds with `cut: false`, the `paused` lapse and `store_notice` (ledger-semantics sections 2, 5 and 6).
@Suite("Partial refunds, paused lapses and store notices")
struct PartialRefundTests {
    typealias B = StreamBuilder

    func subscription3000(_ b: inout B) {
        b.add(
            .purchase, "2026-01-01",
            [
                "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": "t1", "kind": "auto_renewable",
                "period_start": "2026-01-01T00:00:00Z", "period_end": "2026-01-31T00:00:00Z", "period": "P1M",
                "price_minor": 3000, "currency": "USD",
            ])
    }

    func revenue(_ b: B, _ bounds: [String]) -> [RevenuePeriod] {
        var acc = RevenueAccumulator(boundaries: bounds.map(B.t))
        for t in SubscriberFacts.derive(events: b.events, ledger: b.ledger).transactions { acc.add(t) }
        return acc.periods
    }

    @Test("a cut: false refund leaves access; deferred money goes first, the rest is spread over what remains")
    func priceAdjustment() {
        var b = B()
        subscription3000(&b)
        b.refund("t1", at: "2026-01-11", amount: 1000, cut: false)  // R(t) = 1000, D(t) = 2000, u = 1000
        #expect(b.state(at: "2026-01-20T00:00:00Z")?.active == true)
        #expect(b.ledger.windows[0].effectiveCut == nil)
        let rows = revenue(b, ["2026-01-01", "2026-01-21", "2026-02-01"])
        // [Jan 1, Jan 21): 1000 before the refund, then 1000 × 10/20 = 500 of the rest.
        #expect(rows.map(\.figures.recognized) == [1500, 500])
        #expect(rows[0].figures.refunds == 1000 && rows[0].figures.refundedUnrecognized == 1000 && rows[0].figures.refundsRecognized == 0)
        #expect(rows.last?.deferredEnd == 0)
        for row in rows {
            #expect(row.deferredEnd == row.deferredStart + row.figures.billings - row.figures.recognized - row.figures.refundedUnrecognized)
        }
    }

    @Test("several adjustments apply in order on the schedule the previous one left; more than deferred is contra")
    func severalAdjustments() {
        var b = B()
        subscription3000(&b)
        b.refund("t1", at: "2026-01-11", amount: 1000, cut: false)  // rest 1000 over Jan 11 … Jan 31
        b.refund("t1", at: "2026-01-21", amount: 800, cut: false)  // R = 1500, D = 500: u = 500, contra 300
        let rows = revenue(b, ["2026-01-01", "2026-01-21", "2026-02-01"])
        #expect(rows.map(\.figures.recognized) == [1500, 0])
        #expect(rows[1].figures.refundedUnrecognized == 500 && rows[1].figures.refundsRecognized == 300)
        #expect(rows.last?.deferredEnd == 0)
    }

    @Test("a full refund after an adjustment still cuts and settles")
    func cutAfterAdjustment() {
        var b = B()
        subscription3000(&b)
        b.refund("t1", at: "2026-01-11", amount: 1000, cut: false)
        b.refund("t1", at: "2026-01-21", amount: 2000)  // cut: recognised so far 1500, deferred 500
        #expect(b.state(at: "2026-01-25T00:00:00Z")?.active == false)
        let rows = revenue(b, ["2026-01-01", "2026-02-01"])
        #expect(rows[0].figures.recognized == 1500 && rows[0].figures.refunds == 3000)
        #expect(rows[0].figures.refundedUnrecognized == 1500 && rows[0].figures.refundsRecognized == 1500)
        #expect(rows[0].deferredEnd == 0)
    }

    @Test("an expiration with reason paused is a voluntary lapse; a store notice changes nothing")
    func pausedAndNotice() {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        b.add(.storeNotice, "2026-01-15", ["store": "google", "kind": "refund_requested", "transaction_id": "t1", "detail": [:]])
        b.add(.expiration, "2026-02-01", ["product_id": "pro.monthly", "entitlements": ["pro"], "reason": "paused"])
        let facts = SubscriberFacts.derive(events: b.events, ledger: b.ledger)
        #expect(facts.runs.first?.lapse == .voluntary)
        #expect(b.ledger.windows.count == 1)
        var plain = B()
        plain.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        #expect(plain.ledger.windows.map(\.end) == b.ledger.windows.map(\.end))
    }
}
