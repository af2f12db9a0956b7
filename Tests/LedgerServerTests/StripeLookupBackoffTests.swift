import Testing

@testable import StripeStore

@Suite("Stripe customer look-up back-off")
struct StripeLookupBackoffTests {
    @Test("a customer without a subscriber waits a minute, then twice as long each time, at most six hours; forgotten once not pending")
    func backoff() {
        var b = StripeCustomerLookup.Backoff()
        let t0 = ContinuousClock.now
        #expect(!b.isWaiting("cus_1", now: t0))
        b.unknown("cus_1", now: t0)
        #expect(b.isWaiting("cus_1", now: t0 + .seconds(59)) && !b.isWaiting("cus_1", now: t0 + .seconds(60)))
        b.unknown("cus_1", now: t0 + .seconds(60))
        #expect(b.isWaiting("cus_1", now: t0 + .seconds(179)) && !b.isWaiting("cus_1", now: t0 + .seconds(180)))
        for _ in 0..<20 { b.unknown("cus_1", now: t0) }
        #expect(b.until["cus_1"]?.1 == .seconds(6 * 3600))
        b.keep(only: ["cus_2"])
        #expect(!b.isWaiting("cus_1", now: t0))
    }
}
