import Foundation
import Testing

@testable import LedgerCore

@Suite struct ReportArithmeticTests {
    typealias B = StreamBuilder

    @Test func roundHalfUpAndCommission() {
        #expect(Money.roundHalfUp(5, 2) == 3)
        #expect(Money.roundHalfUp(-5, 2) == -2)
        #expect(Money.roundHalfUp(7, 3) == 2)
        #expect(Money.commission(999, rate: "0.30") == 300)  // 299.7
        #expect(Money.commission(5, rate: "0.5") == 3)  // 2.5 rounds up
        #expect(Money.commission(1000, rate: "0.15") == 150)
        #expect(Money.commission(999, rate: "1") == 999)
    }

    @Test("round half up: the 64-bit division and the 128-bit one agree, at the edges too")
    func roundHalfUpWidths() {
        // Reference: the nearest integer to n/d, halves up, from n·2 + d over d·2 with a floor division.
        func reference(_ n: Int128, _ d: Int128) -> Int128 {
            let (a, b) = (2 * n + d, 2 * d)
            let q = a / b
            return a % b < 0 ? q - 1 : q
        }
        var rng = SystemRandomNumberGenerator()
        var cases: [(Int128, Int128)] = [
            (Int128(Int64.max), 1), (Int128(Int64.min), 1), (Int128(Int64.min), 2), (Int128(Int64.max), 2), (-1, 2), (1, 2),
            (Int128(Int64.max) + 1, 2), (Int128(Int64.min) - 1, 3), (Int128(Int64.max) * 7, Int128(Int64.max)),
        ]
        for _ in 0..<2_000 {
            cases.append((Int128(Int64.random(in: .min ... .max, using: &rng)), Int128(Int64.random(in: 1 ... .max, using: &rng))))
            cases.append((Int128(Int64.random(in: -100_000...100_000, using: &rng)), Int128(Int64.random(in: 1...1_000, using: &rng))))
        }
        for (n, d) in cases { #expect(Money.roundHalfUp(n, d) == reference(n, d), "\(n) / \(d)") }
    }

    @Test("decimal text: the byte-by-byte reading and the general one agree")
    func decimals() {
        #expect(Money.decimal("0.30")! == (30, 100))
        #expect(Money.decimal("5.")! == (5, 1))
        #expect(Money.decimal("12")! == (12, 1))
        #expect(Money.decimal("+0.30")! == (30, 100))
        // Digits past the 18th are dropped, so that amount × rate stays inside 128 bits.
        #expect(Money.decimal("0.1234567890123456789012")! == (123_456_789_012_345_678, 1_000_000_000_000_000_000))
        for bad in ["", ".5", "1.2.3", "-1", "0,3", "0.3x", " 0.3", "1e3"] {
            #expect(Money.decimal(bad) == nil, "accepted \(bad)")
        }
    }

    @Test func monthlyAmountsFollowTheSpecFormulas() throws {
        #expect(try MonthlyAmount.roundedSum([try #require(MonthlyAmount(price: 999, period: "P1M"))]) == 999)
        #expect(try MonthlyAmount.roundedSum([try #require(MonthlyAmount(price: 299, period: "P1W"))]) == 1296)  // 299×52/12 = 1295.67
        #expect(try MonthlyAmount.roundedSum([try #require(MonthlyAmount(price: 2999, period: "P3M"))]) == 1000)  // 999.67
        #expect(try MonthlyAmount.roundedSum([try #require(MonthlyAmount(price: 700, period: "P7D"))]) == 3044)  // 700×30.4375/7 = 3043.75
        #expect(try MonthlyAmount.roundedSum([try #require(MonthlyAmount(price: 9999, period: "P1Y"))]) == 833)  // 833.25
        // Summed exactly, rounded once: two yearly plans are 1666.5 → 1667, not 833 + 833.
        let yearly = try #require(MonthlyAmount(price: 9999, period: "P1Y"))
        #expect(try MonthlyAmount.roundedSum([yearly, yearly]) == 1667)
        #expect(MonthlyAmount(price: 999, period: "nonsense") == nil)
    }

    @Test func periodsAreCalendarAligned() {
        let months = ReportCalendar.boundaries(from: B.t("2026-01-15T10:00:00Z"), to: B.t("2026-03-01"), interval: .month)
        #expect(months == [B.t("2026-01-01"), B.t("2026-02-01"), B.t("2026-03-01")])
        #expect(ReportCalendar.periodCount(from: B.t("2026-01-15T10:00:00Z"), to: B.t("2026-03-01"), interval: .month) == 2)
        #expect(ReportCalendar.periodCount(from: B.t("2026-01-15"), to: B.t("2026-03-01T00:00:01Z"), interval: .month) == 3)
        // 2026-01-01 is a Thursday: its ISO week starts Monday 2025-12-29.
        let weeks = ReportCalendar.boundaries(from: B.t("2026-01-01"), to: B.t("2026-01-06"), interval: .week)
        #expect(weeks == [B.t("2025-12-29"), B.t("2026-01-05"), B.t("2026-01-12")])
        let days = ReportCalendar.boundaries(from: B.t("2026-02-27T12:00:00Z"), to: B.t("2026-03-02"), interval: .day)
        #expect(days == [B.t("2026-02-27"), B.t("2026-02-28"), B.t("2026-03-01"), B.t("2026-03-02")])
        #expect(ReportCalendar.boundaries(from: B.t("2026-03-01"), to: B.t("2026-03-01"), interval: .day).isEmpty)
    }

    /// Revenue of one transaction on a grid of months.
    func revenue(_ b: StreamBuilder, _ bounds: [String]) -> [RevenuePeriod] {
        var acc = RevenueAccumulator(boundaries: bounds.map(B.t))
        for t in SubscriberFacts.derive(events: b.events, ledger: b.ledger).transactions { acc.add(t) }
        return acc.periods
    }

    @Test func recognitionIsRatableAndAddsUpToGross() {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-01-31")  // 30 days, 999
        let rows = revenue(b, ["2026-01-01", "2026-01-16", "2026-02-01"])
        #expect(rows.map(\.figures.recognized) == [500, 499])  // 999 × 15/30 = 499.5 → 500
        #expect(rows[0].figures.billings == 999 && rows[0].figures.commission == 0 && rows[0].figures.proceeds == 999)
        #expect(rows.map(\.deferredStart) == [0, 499])
        #expect(rows.last?.deferredEnd == 0)
    }

    @Test func aRefundTakesBackDeferredMoneyFirst() {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-01-31")
        b.refund("t1", at: "2026-01-16", amount: 999)
        let rows = revenue(b, ["2026-01-01", "2026-02-01"])
        let f = rows[0].figures
        #expect(f.recognized == 500)
        #expect(f.refunds == 999 && f.refundedUnrecognized == 499 && f.refundsRecognized == 500)
        #expect(rows[0].deferredEnd == 0)
    }

    @Test func aPartialRefundLeavesTheRestRecognizedAtTheCut() {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-01-31")
        b.refund("t1", at: "2026-01-16", amount: 100)
        let rows = revenue(b, ["2026-01-01", "2026-01-16", "2026-01-17", "2026-02-01"])
        #expect(rows.map(\.figures.recognized) == [500, 399, 0])
        #expect(rows[1].figures.refundedUnrecognized == 100 && rows[1].figures.refundsRecognized == 0)
        #expect(rows.map(\.deferredEnd) == [499, 0, 0])
    }

    @Test func aCancellationRecognizesTheRestAtTheCut() {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-01-31")
        b.add(.cancellation, "2026-01-16", ["entitlements": [], "reason": "developer"])
        let rows = revenue(b, ["2026-01-01", "2026-01-16", "2026-01-17", "2026-02-01"])
        #expect(rows.map(\.figures.recognized) == [500, 499, 0])
        #expect(rows.allSatisfy { $0.figures.refunds == 0 })
    }

    @Test func aRefundReversalRemovesTheRefundFromEveryPeriod() {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-01-31")
        b.refund("t1", at: "2026-01-16", amount: 999)
        b.add(.refundReversal, "2026-02-10", ["transaction_id": "t1"])
        let rows = revenue(b, ["2026-01-01", "2026-02-01", "2026-03-01"])
        #expect(rows.map(\.figures.recognized) == [999, 0])
        #expect(rows.allSatisfy { $0.figures.refunds == 0 })
    }

    @Test func lifetimeIsRecognizedWholeAtPurchaseTrialsAndCreditsNever() {
        var b = B()
        b.add(
            .purchase, "2026-01-10",
            [
                "product_id": "pro.lifetime", "entitlements": ["pro"], "transaction_id": "l1", "kind": "lifetime",
                "price_minor": 4999, "currency": "EUR", "commission_rate": "0.15",
            ])
        b.subscription("t1", from: "2026-01-01", to: "2026-01-08", offer: "trial")
        b.add(.credit, "2026-01-02", ["entitlement": "pro", "duration": "P7D", "reason": "r", "granted_by": "g"])
        let rows = revenue(b, ["2026-01-01", "2026-02-01"])
        #expect(rows.count == 1)
        #expect(rows[0].currency == "EUR" && rows[0].figures.recognized == 4999 && rows[0].figures.commission == 750)
    }

    @Test func sandboxNeverCounts() {
        var b = B()
        b.add(
            .purchase, "2026-01-01",
            [
                "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": "s1", "kind": "auto_renewable",
                "period_start": "2026-01-01T00:00:00Z", "period_end": "2026-02-01T00:00:00Z", "period": "P1M",
                "price_minor": 999, "currency": "USD",
            ], environment: .sandbox)
        let facts = SubscriberFacts.derive(events: b.events, ledger: b.ledger)
        #expect(facts.runs.isEmpty && facts.transactions.isEmpty && facts.trials.isEmpty)
    }
}
