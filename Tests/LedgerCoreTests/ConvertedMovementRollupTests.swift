import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

/// MRR movement in a reporting currency from per-factor cells (`ConvertedMovementRollup`, schema 0039) against
/// `GroupedMRRMovementAccumulator` converting, on random ledgers in five currencies.
@Suite("Converted MRR movement from cells equals the accumulator's")
struct ConvertedMovementRollupTests {
    typealias B = StreamBuilder

    /// The random population, and one subscriber whose only service lies within a month, of an entitlement of its
    /// own (a report grouped by entitlement shows the group, all zeros).
    static let population: [SubscriberFacts] = {
        var list = ReportsIIPropertyTests.population
        if let i = list.firstIndex(where: { $0.transactions.contains { $0.monthly != nil } }) {
            var lone = list[i]
            var t = lone.transactions.first { $0.monthly != nil }!
            (t.start, t.end, t.stop, t.heldFrom, t.handedOver, t.refunds) = (B.t("2026-04-10"), B.t("2026-04-17"), nil, nil, nil, [])
            lone.runs = [
                PaidRun(entitlement: "", start: t.start, end: t.end, lapse: .voluntary),
                PaidRun(entitlement: "lone", start: t.start, end: t.end, lapse: .voluntary),
            ]
            t.entitlements = ["lone"]
            lone.transactions = [t]
            list.append(lone)
        }
        return list
    }()

    /// What the store's query reads for a shape: key, dimension and value of the cells, and the column grouped by.
    struct Scope {
        var key: String?  // nil: every key but ""
        var dimension = ""
        var value: String? = nil
        var groupByValue = false
    }

    static let shapes: [(ReportDimensions, Scope)] = [
        (.none, Scope(key: "")), (ReportDimensions(entitlements: ["pro"]), Scope(key: "pro")),
        (ReportDimensions(groupBy: .entitlement), Scope(key: nil)),
    ]

    @Test(arguments: 0..<3, ["EUR", "JPY", "KWD"])
    func cellsEqualTheAccumulator(grid: Int, target: String) throws {
        let rates = FXRevenuePropertyTests.rates(seed: UInt64(grid * 31 + target.utf8.count))
        var currency = ReportingCurrency(currency: target, rates: rates)
        var rollup = ConvertedMovementRollup()
        for facts in Self.population { try rollup.add(facts, sign: 1, rates: &currency) }
        let (interval, from, to): (ReportInterval, String, String) =
            [(.month, "2025-12-01", "2027-03-01"), (.month, "2026-03-01", "2026-09-01"), (.day, "2026-03-20", "2026-05-10")][grid]
        let boundaries = ReportCalendar.boundaries(from: B.t(from), to: B.t(to), interval: interval)
        let (lo, hi) = (boundaries.first!, boundaries.last!)
        var moved = 0
        for (dimensions, scope) in Self.shapes {
            // The accumulator reads the services touching the span, as the facts query does.
            var acc = GroupedMRRMovementAccumulator(
                boundaries: boundaries, dimensions: dimensions, reporting: ReportingCurrency(currency: target, rates: rates))
            for facts in Self.population {
                let touching = facts.transactions.filter { $0.serviceStart < hi && ($0.serviceEnd.map { $0 >= lo } ?? true) }
                var firsts: [String: Timestamp] = [:]
                for r in facts.runs where firsts[r.entitlement] == nil { firsts[r.entitlement] = r.start }
                try acc.add(transactions: touching, runs: facts.runs, firstStarts: firsts)
            }
            let expected = try acc.periods()
            // The cells as the store's two queries sum them.
            var level: [String?: [FXFactor: [Int128: Int128]]] = [:]
            var cells: [(period: Int64, group: String?, factor: FXFactor, part: MRRMovementFigures.Part, denominator: Int128, value: Int128)] = []
            for (k, v) in rollup.cells {
                guard scope.key.map({ k.entitlement == $0 }) ?? (k.entitlement != ""), k.dimension == scope.dimension,
                    scope.value.map({ k.value == $0 }) ?? true
                else { continue }
                let g: String? = scope.key == nil ? k.entitlement : scope.groupByValue ? (k.value.isEmpty ? nil : k.value) : nil
                if k.interval == .day, k.period < lo.microseconds {
                    let signed: Int128 =
                        k.denominator == 0 && [.start, .expansion, .contraction].contains(k.part) ? 0 : k.part.rawValue <= 4 ? v : -v
                    level[g, default: [:]][k.factor, default: [:]][k.denominator, default: 0] += signed
                }
                if k.interval == interval, k.period >= lo.microseconds, k.period < hi.microseconds {
                    cells.append((k.period, g, k.factor, k.part, k.denominator, v))
                }
            }
            let flat = level.flatMap { g, byFactor in byFactor.flatMap { f, byD in byD.map { (g, f, $0.key, $0.value) } } }.filter { $0.3 != 0 }
            let found = try ConvertedMovementRollup.periods(
                boundaries: boundaries, grouped: dimensions.groupBy != nil, currency: target, level: flat, cells: cells)
            #expect(found.count == expected.count, "\(dimensions) \(interval) \(target): \(found.count) rows vs \(expected.count)")
            for (f, e) in zip(found, expected) {
                #expect(f.group == e.group && f.period == e.period, "\(dimensions) \(interval) \(target):\n\(f)\n vs \(e)")
                moved += f.period.figures.count(.new) + f.period.figures.count(.churned)
            }
            if dimensions.groupBy == .entitlement, interval == .month {
                #expect(found.contains { $0.group == "lone" }, "the entitlement whose only service lies within a month shows")
            }
        }
        #expect(moved > 0)
    }

    @Test("the days whose transactions convert differently at a new rate version")
    func daysDiffering() {
        var a = FXTable()
        a.add(currency: "USD", day: FXDay(days: 10), rate: FXRate("1.10")!)
        a.add(currency: "USD", day: FXDay(days: 20), rate: FXRate("1.20")!)
        a.sort()
        var b = a
        b.add(currency: "USD", day: FXDay(days: 15), rate: FXRate("1.15")!)
        b.add(currency: "JPY", day: FXDay(days: 40), rate: FXRate("160")!)
        b.sort()
        // Days 15–19 took day 10's rate and take day 15's; from 20 on both agree; JPY is new from day 40 to 47 (its
        // rate serves seven days after it).
        #expect(a.daysDiffering(from: b).map(\.days) == Array(15...19) + Array(40...47))
        #expect(b.daysDiffering(from: b).isEmpty)
    }
}
