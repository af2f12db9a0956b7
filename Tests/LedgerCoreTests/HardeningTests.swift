import Foundation
import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

/// Issue 13: input ceilings refused by name, and report arithmetic that never traps.
@Suite("Hardening: input ceilings and arithmetic that never traps")
struct HardeningTests {
    typealias F = Fixtures

    @Test("price_minor above 10^15 is refused naming the field; 10^15 itself is accepted")
    func moneyCeiling() {
        for bad in ["9223372036854775807", "1000000000000001", "99999999999999999999"] {
            let error = F.decodeError(F.event(.purchase, settingData: ["price_minor": F.number(bad)]))
            #expect(error?.field == "data.price_minor", "accepted \(bad)")
            #expect(error?.reason.contains("at most 1000000000000000") == true)
        }
        #expect(F.decodeError(F.event(.purchase, settingData: ["price_minor": F.number("1000000000000000")])) == nil)
        let refund = F.decodeError(F.event(.refund, settingData: ["amount_minor": F.number("1000000000000001")]))
        #expect(refund?.field == "data.amount_minor")
    }

    @Test("the catalog refuses a price above the ceiling")
    func catalogMoneyCeiling() {
        let body = F.json(
            #"{"entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M", "price_minor": 9223372036854775807, "currency": "USD"}"#)
        #expect(throws: EventValidationError.self) { try Product.decode(productID: "big", body) }
        do {
            _ = try Product.decode(productID: "big", body)
        } catch {
            #expect(error.field == "price_minor")
        }
    }

    @Test("at most 64 entitlements per event; 20,000 are refused before any is read")
    func entitlementCount() {
        func names(_ n: Int) -> JSONValue { .array((0..<n).map { .string("e\($0)") }) }
        #expect(F.decodeError(F.event(.purchase, settingData: ["entitlements": names(64)])) == nil)
        #expect(F.decodeError(F.event(.purchase, settingData: ["entitlements": names(65)]))?.field == "data.entitlements")
        #expect(F.decodeError(F.event(.purchase, settingData: ["entitlements": names(20_000)]))?.field == "data.entitlements")
    }

    @Test("identifiers: one rule (≤ 200 bytes, no control characters, NFC) for ids and keys")
    func identifierRule() {
        let nfc = "caf\u{E9}"
        let nfd = "cafe\u{301}"
        #expect(Identifiers.problem(nfc) == nil)
        #expect(Identifiers.problem(nfd)?.contains("NFC") == true)
        #expect(Identifiers.problem("a\u{0}b") != nil)
        #expect(Identifiers.problem("a\u{85}b") != nil)
        #expect(Identifiers.problem(String(repeating: "p", count: 201)) != nil)
        #expect(Identifiers.problem(String(repeating: "p", count: 200)) == nil)
        #expect(F.decodeError(F.event(.purchase, settingData: ["product_id": .string(nfd)]))?.field == "data.product_id")
        #expect(
            F.decodeError(F.event(.purchase, settingData: ["product_id": .string(String(repeating: "p", count: 1_000_000))]))?.field
                == "data.product_id")
        #expect(F.decodeError(F.event(.purchase, settingData: ["transaction_id": .string(nfd)]))?.field == "data.transaction_id")
        #expect(F.decodeError(F.event(.purchase, settingData: ["entitlements": .array([.string(nfd)])]))?.field == "data.entitlements[0]")
        #expect(F.decodeError(F.event(.purchase, key: nfd))?.field == "idempotency_key")
        #expect(F.decodeError(F.event(.purchase, key: nfc)) == nil)
        #expect(throws: EventValidationError.self) {
            try Product.decode(productID: nfd, F.json(#"{"entitlements": ["pro"], "kind": "lifetime", "price_minor": 1, "currency": "USD"}"#))
        }
    }

    @Test("metadata is at most 16 KiB and free text at most 1,000 bytes; U+0000 is refused anywhere")
    func sizes() {
        var big = F.event(.purchase)
        big["metadata"] = .object(["x": .string(String(repeating: "a", count: 17_000))])
        #expect(F.decodeError(big)?.field == "metadata")
        var nul = F.event(.purchase)
        nul["metadata"] = .object(["x": .array([.string("a\u{0}")])])
        #expect(F.decodeError(nul)?.field == "metadata.x[0]")
        let longReason = F.event(.credit, settingData: ["reason": .string(String(repeating: "r", count: 1_001))])
        #expect(F.decodeError(longReason)?.field == "data.reason")
    }

    @Test("MRR over hostile periods whose common denominator outgrows 128 bits is refused, not a trap")
    func mrrOverflowIsAnError() throws {
        // Distinct prime-day periods: their least common multiple passes 2^127 after a few dozen.
        let primes = (900_000...999_999).lazy.filter { n in (2...Int(Double(n).squareRoot())).allSatisfy { n % $0 != 0 } }.prefix(40)
        let amounts = try primes.map { try #require(MonthlyAmount(price: 1_000_000_000_000_000, period: "P\($0)D")) }
        #expect(throws: ReportOverflow.self) { _ = try MonthlyAmount.roundedSum(amounts) }
        // Stored events from before the ceiling can carry 2^63 − 1: still exact, still no trap.
        let max = try #require(MonthlyAmount(price: .max, period: "P1W"))
        #expect(try MonthlyAmount.roundedSum(Array(repeating: max, count: 1_000)) == Money.roundHalfUp(Int128(Int64.max) * 52 * 1_000, 12))
    }

    @Test("every report takes extreme but valid amounts (and pre-ceiling 2^63 − 1) without trapping")
    func extremeValuesThroughEveryReport() async {
        await propertyCheck(count: 60, input: Gen.int(in: 0...Int.max)) { seed in
            var rng = SplitMix64(seed: UInt64(seed))
            var b = StreamBuilder()
            let prices: [Int64] = [Limits.maxMoneyMinor, .max, 1, 0]
            var day = 0
            for i in 0..<Int.random(in: 1...12, using: &rng) {
                let price = prices.randomElement(using: &rng)!
                let from = B.t("2026-01-01").microseconds + Int64(day) * 86_400_000_000
                let to = from + Int64(Int.random(in: 1...60, using: &rng)) * 86_400_000_000
                day += Int.random(in: 0...40, using: &rng)
                b.add(
                    i == 0 ? .purchase : .renewal, Timestamp(microseconds: from).rfc3339,
                    [
                        "product_id": "p", "entitlements": ["pro"], "transaction_id": .string("t\(i)"),
                        "kind": "auto_renewable", "period_start": .string(Timestamp(microseconds: from).rfc3339),
                        "period_end": .string(Timestamp(microseconds: to).rfc3339),
                        "period": .string(["P1D", "P1W", "P1M", "P1Y", "P999999D"].randomElement(using: &rng)!),
                        "price_minor": .number(JSONNumber(price)), "currency": "USD",
                        "commission_rate": .string(["0.30", "1", "0.123456789012345678901234567"].randomElement(using: &rng)!),
                    ])
                if Bool.random(using: &rng) {
                    b.refund("t\(i)", at: Timestamp(microseconds: from + 3_600_000_000).rfc3339, amount: prices.randomElement(using: &rng)!)
                }
            }
            let facts = SubscriberFacts.derive(events: b.events, ledger: b.ledger)
            let bounds = ReportCalendar.boundaries(from: B.t("2025-12-01"), to: B.t("2027-01-01"), interval: .week)
            var revenue = RevenueAccumulator(boundaries: bounds)
            for t in facts.transactions { revenue.add(t) }
            for row in revenue.periods {
                #expect(row.deferredEnd == row.deferredStart + row.figures.billings - row.figures.recognized - row.figures.refundedUnrecognized)
            }
            var churn = ChurnAccumulator(boundaries: bounds)
            churn.add(runs: facts.runs, firstStart: facts.runs.first?.start ?? B.t("2026-01-01"))
            _ = churn.periods
            var retention = RetentionAccumulator(from: B.t("2026-01-01"), to: B.t("2026-06-01"), until: B.t("2027-01-01"))
            retention.add(runs: facts.runs)
            _ = retention.cohorts
            _ = try? MonthlyAmount.roundedSum(facts.transactions.compactMap(\.monthly))
        }
    }
}

private typealias B = StreamBuilder
