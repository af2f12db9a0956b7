import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

@Suite("Reports II: MRR movement, LTV, refunds and conversion on random ledgers")
struct ReportsIIPropertyTests {
    /// The population of ReportIdentityTests with its transactions spread over five currencies (by event id).
    static let population: [SubscriberFacts] = ReportIdentityTests.population.map { facts in
        var facts = facts
        for i in facts.transactions.indices {
            facts.transactions[i].currency = FXRevenuePropertyTests.currencies[Int(facts.transactions[i].eventID.uuid.0) % 5]
        }
        return facts
    }

    @Test(arguments: 0..<3, ["", "pro"])
    func theMovementIdentityHoldsPerCurrencyAndEndsAreTheMRRReport(grid: Int, key: String) throws {
        let boundaries = ReportIdentityTests.grids[grid]
        let rows = try ReportsIIFeed.movement(Self.population, boundaries, key: key)
        var moved = 0
        for (i, b) in boundaries.enumerated() {
            let mrr = try ReportsIIFeed.mrr(Self.population, justBefore: b, key: key)
            for currency in Set(rows.map(\.currency)) {
                let expected = mrr[currency] ?? (0, 0)
                if i < boundaries.count - 1 {
                    let row = try #require(rows.first { $0.start == b && $0.currency == currency })
                    #expect(row.figures[.start] == expected.0, "mrr_start \(currency) \(b)")
                    #expect(row.figures.count(.start) == expected.1, "subscribers_start \(currency) \(b)")
                    #expect(ReportsIIFeed.identityHolds(row.figures), "identity \(currency) \(b)")
                    let f = row.figures
                    #expect(
                        f.subscribersEnd == f.count(.start) + f.count(.new) + f.count(.reactivation) + f.count(.transferredIn)
                            - f.count(.churned) - f.count(.transferredOut))
                    for part in MRRMovementFigures.Part.allCases { #expect(f[part] >= 0, "\(part) \(currency) \(b)") }
                    moved += f.count(.new) + f.count(.churned) + f.count(.expansion) + f.count(.contraction) + f.count(.reactivation)
                }
                if i > 0 {
                    let row = try #require(rows.first { $0.end == b && $0.currency == currency })
                    #expect(row.figures.mrrEnd == expected.0, "mrr_end \(currency) \(b)")
                    #expect(row.figures.subscribersEnd == expected.1, "subscribers_end \(currency) \(b)")
                }
            }
        }
        #expect(moved > 0, "the population moves at all")
    }

    /// Subscribers counted new, reactivated and churned are churn's (the same runs and "just before"), on the
    /// population in one currency where every paid run is covered by MRR service at its ends.
    @Test func movementCountsAgreeWithChurnOnASimpleLedger() throws {
        let boundaries = ReportCalendar.boundaries(
            from: ReportsIIExampleTests.t("2025-01-01"), to: ReportsIIExampleTests.t("2025-06-01"), interval: .month)
        let facts = ReportsIIExample.facts.map(\.facts)
        let rows = try ReportsIIFeed.movement(facts, boundaries, key: "")
        var churn = ChurnAccumulator(boundaries: boundaries)
        for f in facts where !f.runs.isEmpty {
            let runs = f.runs.filter { $0.entitlement == "" }
            churn.add(runs: runs, firstStart: runs[0].start)
        }
        for (row, c) in zip(rows, churn.periods) {
            #expect(row.figures.count(.new) == c.new && row.figures.count(.reactivation) == c.reactivated)
            #expect(row.figures.count(.churned) == c.churnedTotal && row.figures.count(.start) == c.activeStart)
        }
    }

    @Test(arguments: 0..<3, ["EUR", "USD", "JPY", "KWD"])
    func theMovementIdentityHoldsInAReportingCurrency(grid: Int, target: String) throws {
        let rates = FXRevenuePropertyTests.rates(seed: UInt64(grid * 17 + target.utf8.count))
        let boundaries = ReportIdentityTests.grids[grid]
        let rows = try ReportsIIFeed.movement(Self.population, boundaries, key: "", reporting: ReportingCurrency(currency: target, rates: rates))
        #expect(rows.count == boundaries.count - 1 && rows.allSatisfy { $0.currency == target })
        for (i, row) in rows.enumerated() {
            #expect(ReportsIIFeed.identityHolds(row.figures), "identity \(row.start)")
            #expect(row.figures[.start] == (try ReportsIIFeed.convertedMRR(Self.population, justBefore: row.start, into: target, rates)))
            if i + 1 < rows.count { #expect(rows[i + 1].figures[.start] == row.figures.mrrEnd, "chain at \(row.end)") }
        }
        let last = try #require(rows.last)
        #expect(last.figures.mrrEnd == (try ReportsIIFeed.convertedMRR(Self.population, justBefore: last.end, into: target, rates)))
    }

    /// With transfers (IdentityPropertyTests' histories): the identity and the ends hold for every period, the
    /// ledger's MRR is the same as without the transfers, and transfers are counted as such.
    @Test func transfersMoveMRRAndKeepTheIdentity() throws {
        var transferred = 0
        for seed in 0..<60 {
            let (moved, still, _, _) = IdentityPropertyTests.history(seed: seed)
            let boundaries = (0..<12).map { IdentityPropertyTests.at(Int64($0) * 15) }
            let rows = try ReportsIIFeed.movement(moved.facts, boundaries, key: "")
            let without = try ReportsIIFeed.movement(still.facts, boundaries, key: "")
            for (row, other) in zip(rows, without) {
                #expect(ReportsIIFeed.identityHolds(row.figures), "seed \(seed) \(row.start)")
                #expect(row.figures[.start] == other.figures[.start] && row.figures.mrrEnd == other.figures.mrrEnd, "seed \(seed) \(row.start)")
                let mrr = try ReportsIIFeed.mrr(moved.facts, justBefore: row.start, key: "")["USD"]
                #expect(row.figures[.start] == mrr?.0 ?? 0 && row.figures.count(.start) == mrr?.1 ?? 0, "seed \(seed) \(row.start)")
                transferred += row.figures.count(.transferredIn) + row.figures.count(.transferredOut)
            }
        }
        #expect(transferred > 0)
    }

    /// Without refunds, realized gross never goes down from one month to the next, and the last month of every
    /// cohort is all its members' billings before then.
    @Test(arguments: ["", "pro"])
    func ltvGrossNeverDecreasesWithoutRefunds(key: String) throws {
        let from = ReportsIIExampleTests.t("2025-12-01")
        let until = ReportsIIExampleTests.t("2027-06-01")
        var acc = LTVAccumulator(from: from, to: ReportsIIExampleTests.t("2027-01-01"), months: 9, until: until)
        var billed: [Timestamp: [String: Int128]] = [:]
        for facts in Self.population {
            let runs = facts.runs.filter { $0.entitlement == key }
            guard let first = runs.first?.start else { continue }
            let transactions = facts.transactions.filter { key.isEmpty || $0.entitlements.contains(key) }.map { t in
                var t = t
                t.refunds = []
                return t
            }
            try acc.add(firstStart: first, transactions: transactions)
            let cohort = ReportCalendar.monthStart(first)
            let end = ReportCalendar.addingMonths(9, to: cohort)
            for t in transactions where t.heldFrom == nil && t.occurredAt < end && cohort >= from {
                billed[cohort, default: [:]][t.currency, default: 0] += Int128(t.gross)
            }
        }
        var cohorts = 0
        for c in acc.rows {
            #expect(zip(c.gross, c.gross.dropFirst()).allSatisfy { $0 <= $1 }, "\(c.start) \(c.currency)")
            #expect(zip(c.proceeds, c.proceeds.dropFirst()).allSatisfy { $0 <= $1 })
            if c.gross.count == 9 { #expect(c.gross.last == billed[c.start]?[c.currency] ?? 0) }
            cohorts += c.size
        }
        #expect(cohorts > 0)
    }

    /// The refunds report's counts are those of a plain count of the refunds and transactions, and its
    /// amounts are revenue's `refunds` (in own currencies and converted).
    @Test(arguments: 0..<3)
    func refundsEqualHandCounts(grid: Int) throws {
        let boundaries = ReportIdentityTests.grids[grid]
        let transactions = Self.population.flatMap(\.transactions)
        var acc = RefundAccumulator(boundaries: boundaries)
        var revenue = RevenueAccumulator(boundaries: boundaries)
        for t in transactions {
            try acc.add(t)
            revenue.add(t)
        }
        var counted = 0
        for row in acc.periods {
            let inside = { (x: Timestamp) in x >= row.start && x < row.end }
            let mine = transactions.filter { $0.currency == row.currency }
            let refunds = mine.flatMap(\.refunds).filter { inside($0.at) }
            #expect(row.refunds == refunds.count)
            #expect(row.amount == refunds.map { Int128($0.amount) }.reduce(0, +))
            #expect(row.refundedTransactions == mine.filter { $0.refunds.contains { inside($0.at) } }.count)
            #expect(row.paidTransactions == mine.filter { $0.heldFrom == nil && inside($0.occurredAt) }.count)
            let revenueRow = revenue.periods.first { $0.start == row.start && $0.currency == row.currency }
            #expect(revenueRow.map { $0.figures.refunds == row.amount } ?? (row.amount == 0))
            counted += row.refunds
        }
        #expect(counted > 0)
        let rates = FXRevenuePropertyTests.rates(seed: UInt64(grid))
        var converted = RefundAccumulator(boundaries: boundaries, reporting: ReportingCurrency(currency: "JPY", rates: rates))
        for t in transactions { try converted.add(t) }
        let convertedRevenue = try FXRevenuePropertyTests.converted(transactions, boundaries, into: "JPY", rates)
        #expect(converted.periods.map(\.amount) == convertedRevenue.map(\.figures.refunds))
        #expect(
            converted.periods.map(\.refunds) == acc.periods.chunked(Set(acc.periods.map(\.currency)).count).map { $0.map(\.refunds).reduce(0, +) })
    }

    @Test func conversionCountsSubscribersByFirstSeen() {
        let boundaries = ReportIdentityTests.grids[0]
        var acc = ConversionAccumulator(boundaries: boundaries, days: [1, 7, 30])
        var seen = 0
        for facts in ReportIdentityTests.population {
            guard let first = facts.firstSeen else { continue }
            let paid = facts.transactions.filter { $0.heldFrom == nil }.map(\.occurredAt).min()
            acc.add(firstSeen: first, firstPaid: paid)
            if first >= boundaries[0] && first < boundaries.last! { seen += 1 }
        }
        #expect(acc.periods.map(\.subscribers).reduce(0, +) == seen)
        for p in acc.periods { #expect(p.converted[0] <= p.converted[1] && p.converted[1] <= p.converted[2] && p.converted[2] <= p.subscribers) }
    }
}

extension Array {
    func chunked(_ size: Int) -> [[Element]] {
        stride(from: 0, to: count, by: size).map { Array(self[$0..<Swift.min($0 + size, count)]) }
    }
}

/// The worked example of docs/reports.md ("Reports II: worked example"), by hand.
@Suite("Reports II: the worked example of docs/reports.md")
struct ReportsIIExampleTests {
    static func t(_ s: String) -> Timestamp { try! Timestamp(rfc3339: s.contains("T") ? s : s + "T00:00:00Z") }
    static let facts = ReportsIIExample.facts.map(\.facts)

    @Test func mrrMovement() throws {
        let rows = try ReportsIIFeed.movement(
            Self.facts, ReportCalendar.boundaries(from: Self.t("2025-03-01"), to: Self.t("2025-05-01"), interval: .month), key: "")
        #expect(rows.map(\.currency) == ["USD", "USD"])
        let (march, april) = (rows[0].figures, rows[1].figures)
        #expect(
            [march[.start], march[.new], march[.reactivation], march[.expansion], march[.contraction], march[.churned], march.mrrEnd] == [
                1999, 499, 0, 0, 0, 0, 2498,
            ])
        #expect(
            [april[.start], april[.new], april[.reactivation], april[.expansion], april[.contraction], april[.churned], april.mrrEnd] == [
                2498, 0, 999, 1000, 0, 1000, 3497,
            ])
        let marchCounts: [Int] = [march.count(.start), march.count(.new), march.subscribersEnd]
        #expect(marchCounts == [2, 1, 3])
        let aprilCounts: [Int] = [
            april.count(.start), april.count(.reactivation), april.count(.expansion), april.count(.churned), april.subscribersEnd,
        ]
        #expect(aprilCounts == [3, 1, 1, 1, 3])
    }

    @Test func ltv() throws {
        var acc = LTVAccumulator(from: Self.t("2025-01-01"), to: Self.t("2025-04-01"), months: 3, until: Self.t("2026-01-01"))
        for f in Self.facts {
            guard let run = f.runs.first(where: { $0.entitlement == "" }) else { continue }
            try acc.add(firstStart: run.start, transactions: f.transactions)
        }
        let rows = acc.rows
        #expect(rows.map(\.start) == [Self.t("2025-01-01"), Self.t("2025-02-01"), Self.t("2025-03-01")])
        #expect(rows.map(\.size) == [1, 2, 1])
        #expect(rows.map(\.gross) == [[999, 999, 999], [12998, 13997, 3997], [499, 798, 798]])
        #expect(rows.map(\.proceeds) == [[699, 699, 699], [9098, 9797, -803], [424, 648, 648]])
        #expect(rows[1].gross.map { rows[1].perCustomer($0) } == [6499, 6999, 1999])
        #expect(rows[1].proceeds.map { rows[1].perCustomer($0) } == [4549, 4899, -401])
    }

    @Test("converted LTV needs rates only for the transactions of the months it shows")
    func ltvConvertsOnlyWhatItShows() throws {
        // Rates from 1 January to 20 March 2025 only: the March cohort's first month converts, though its member
        // bills again in April (which adds nothing to March); two months need April's rate and are refused.
        var table = FXTable()
        for day in stride(from: FXDay(iso: "2025-01-01")!.days, through: FXDay(iso: "2025-03-20")!.days, by: 1) {
            table.add(currency: "USD", day: FXDay(days: day), rate: FXRate("1.0465")!)
        }
        table.sort()
        func cohorts(months: Int) throws -> [LTVCohort] {
            var acc = LTVAccumulator(
                from: Self.t("2025-03-01"), to: Self.t("2025-04-01"), months: months, until: Self.t("2026-01-01"),
                reporting: ReportingCurrency(currency: "EUR", rates: table))
            for f in Self.facts {
                guard let run = f.runs.first(where: { $0.entitlement == "" }) else { continue }
                try acc.add(firstStart: run.start, transactions: f.transactions)
            }
            return acc.rows
        }
        let march = try cohorts(months: 1)
        #expect(march.map(\.size) == [1] && march[0].gross.count == 1)
        #expect(throws: MissingFXRate.self) { try cohorts(months: 2) }
    }

    @Test func refunds() throws {
        var acc = RefundAccumulator(boundaries: ReportCalendar.boundaries(from: Self.t("2025-03-01"), to: Self.t("2025-06-01"), interval: .month))
        for f in Self.facts { for t in f.transactions { try acc.add(t) } }
        let rows = acc.periods
        #expect(rows.map(\.refunds) == [0, 2, 0])
        #expect(rows.map(\.amount) == [0, 12199, 0])
        #expect(rows.map(\.refundedTransactions) == [0, 2, 0])
        #expect(rows.map(\.paidTransactions) == [3, 3, 0])
        #expect(rows.map(\.refundRate) == [0, 2.0 / 3.0, nil])
    }

    @Test func conversion() {
        var acc = ConversionAccumulator(
            boundaries: ReportCalendar.boundaries(from: Self.t("2025-01-01"), to: Self.t("2025-05-01"), interval: .month), days: [7, 30])
        for f in Self.facts {
            acc.add(firstSeen: f.firstSeen!, firstPaid: f.transactions.filter { $0.heldFrom == nil }.map(\.occurredAt).min())
        }
        #expect(acc.periods.map(\.subscribers) == [1, 2, 3, 0])
        #expect(acc.periods.map(\.converted) == [[1, 1], [2, 2], [1, 2], [0, 0]])
        #expect(acc.periods[2].rate(0) == 1.0 / 3.0 && acc.periods[3].rate(0) == nil)
    }
}
