import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

@Suite("Exchange rates: parsing, limits, look-up")
struct FXParsingTests {
    /// The ECB layout as published: a header ending in a comma, `N/A` for currencies without a rate, every line
    /// ending in a comma (real rates of 2025-03-03 and 2025-02-28 from eurofxref-hist.csv, a few columns).
    static let ecb = """
        Date,USD,JPY,CYP,GBP,CHF,SEK,
        2025-03-03,1.0465,158.33,N/A,0.8253,0.9428,11.15,
        2025-02-28,1.0411,156.96,N/A,0.82608,0.9394,11.188,

        """

    @Test func readsTheECBLayout() throws {
        let rows = try FXUpload.ecbCSV(Array(Self.ecb.utf8))
        #expect(rows.count == 10)
        #expect(rows.contains(FXRateRow(day: FXDay(iso: "2025-03-03")!, currency: "JPY", rate: FXRate("158.33")!)))
        #expect(!rows.contains { $0.currency == "CYP" })
        // CRLF and no trailing commas read the same.
        let crlf = Self.ecb.replacingOccurrences(of: ",\n", with: "\r\n")
        #expect(try FXUpload.ecbCSV(Array(crlf.utf8)) == rows)
    }

    @Test func theShippedSampleIsRealECBData() throws {
        let url = TestDatabase.schemaDirectory.deletingLastPathComponent().appendingPathComponent(
            "tools/data/fx/ecb-eurofxref-hist-2025-01-to-05.csv")
        let rows = try FXUpload.ecbCSV(Array(try Data(contentsOf: url)))
        #expect(rows.contains(FXRateRow(day: FXDay(iso: "2025-03-03")!, currency: "USD", rate: FXRate("1.0465")!)))
        #expect(Set(rows.map(\.currency)).isSuperset(of: ["USD", "JPY", "GBP", "CHF", "SEK"]))
    }

    @Test func refusesWhatIsOutsideTheLimits() {
        func refused(_ text: String) -> String? {
            do {
                _ = try FXUpload.ecbCSV(Array(text.utf8))
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(refused("Date,USD\n1998-12-31,1.1\n")?.contains("outside") == true)
        #expect(refused("Date,USD\n2101-01-01,1.1\n")?.contains("outside") == true)
        #expect(refused("Date,USD\n2025-02-30,1.1\n")?.contains("not a date") == true)
        #expect(refused("Date,USD\n2025-03-03,1.1234567\n")?.contains("not a rate") == true)
        #expect(refused("Date,USD\n2025-03-03,-1\n")?.contains("not a rate") == true)
        #expect(refused("Date,USD\n2025-03-03,0\n")?.contains("not a rate") == true)
        #expect(refused("Date,USD\n2025-03-03,1e3\n")?.contains("not a rate") == true)
        #expect(refused("Date,USD\n2025-03-03,99999999\n")?.contains("not a rate") == true)
        #expect(refused("Date,EUR\n2025-03-03,1\n")?.contains("not a currency") == true)
        #expect(refused("Date,USD,USD\n2025-03-03,1,1\n")?.contains("twice") == true)
        #expect(refused("Date,USD\n2025-03-03,1\n2025-03-03,1\n")?.contains("twice") == true)
        #expect(refused("Date,USD\n2025-03-03,1,2,3\n")?.contains("cells") == true)
        #expect(refused("Currency,USD\n") != nil)
        #expect(refused("Date,USD\n2025-03-03,N/A\n")?.contains("no rate") == true)
        let wide =
            "Date,"
            + (0..<65).map { i in "A" + String(UnicodeScalar(65 + i / 26)!) + String(UnicodeScalar(65 + i % 26)!) }.joined(
                separator: ",")
        #expect(refused(wide + "\n")?.contains("at most 64") == true)
        var many = "Date,USD,JPY,GBP\n"
        var day = FXDay(iso: "1999-01-01")!
        for _ in 0...(FXLimits.maxRowsPerUpload / 3) {
            many += "\(day),1.1,2.2,3.3\n"
            day.days += 1
        }
        #expect(refused(many)?.contains("more than") == true)
    }

    @Test func readsJSON() throws {
        let rows = try FXUpload.json(
            try JSONParser.parse(
                Array(
                    #"{"base":"EUR","rates":[{"date":"2025-03-03","currency":"USD","rate":"1.0465"},{"date":"2025-03-03","currency":"JPY","rate":158.33}]}"#
                        .utf8)))
        #expect(
            rows == [
                FXRateRow(day: FXDay(iso: "2025-03-03")!, currency: "USD", rate: FXRate("1.0465")!),
                FXRateRow(day: FXDay(iso: "2025-03-03")!, currency: "JPY", rate: FXRate("158.33")!),
            ])
        for bad in [
            #"{"base":"USD","rates":[{"date":"2025-03-03","currency":"JPY","rate":"1"}]}"#,
            #"{"rates":[{"date":"2025-03-03","currency":"usd","rate":"1"}]}"#,
            #"{"rates":[{"date":"2025-03-03","currency":"USD","rate":"1","x":1}]}"#,
            #"{"rates":[]}"#, #"[]"#,
        ] {
            #expect(throws: FXInputError.self) { try FXUpload.json(try JSONParser.parse(Array(bad.utf8))) }
        }
    }

    @Test func aRateIsTheLatestOnOrBeforeTheDateAtMostSevenDaysOlder() throws {
        var table = FXTable()
        table.add(currency: "USD", day: FXDay(iso: "2025-03-03")!, rate: FXRate("1.0465")!)
        table.add(currency: "USD", day: FXDay(iso: "2025-02-28")!, rate: FXRate("1.0411")!)
        table.sort()
        #expect(try table.rate("USD", on: FXDay(iso: "2025-03-02")!) == FXRate("1.0411")!)  // a Sunday: Friday's
        #expect(try table.rate("USD", on: FXDay(iso: "2025-03-10")!) == FXRate("1.0465")!)  // seven days older
        #expect(throws: MissingFXRate(currency: "USD", day: FXDay(iso: "2025-03-11")!)) { try table.rate("USD", on: FXDay(iso: "2025-03-11")!) }
        #expect(throws: MissingFXRate(currency: "USD", day: FXDay(iso: "2025-02-27")!)) { try table.rate("USD", on: FXDay(iso: "2025-02-27")!) }
        #expect(throws: MissingFXRate(currency: "GBP", day: FXDay(iso: "2025-03-03")!)) {
            try table.factor(from: "GBP", to: "EUR", on: FXDay(iso: "2025-03-03")!)
        }
        #expect(try table.rate("EUR", on: FXDay(iso: "1970-01-01")!) == FXRate(units: 1, decimals: 0))
    }

    @Test func factorsCrossThroughTheEuroAndMindExponents() throws {
        var table = FXTable()
        let d = FXDay(iso: "2025-03-03")!
        table.add(currency: "USD", day: d, rate: FXRate("1.0465")!)
        table.add(currency: "JPY", day: d, rate: FXRate("158.33")!)
        table.add(currency: "KWD", day: d, rate: FXRate("0.3229")!)
        table.sort()
        // 9.99 USD = 999 cents → EUR cents: 999 / 1.0465.
        #expect(try table.factor(from: "USD", to: "EUR", on: d) == FXFactor(numerator: 10_000, denominator: 10_465))
        // USD cents → yen (exponent 0): × 158.33 / 1.0465 / 100.
        #expect(try table.factor(from: "USD", to: "JPY", on: d) == FXFactor(numerator: 15_833, denominator: 10_465))
        #expect(try table.factor(from: "USD", to: "JPY", on: d).apply(999) == 1511)
        // KWD has three decimals: 1 EUR = 322.9 fils.
        #expect(try table.factor(from: "EUR", to: "KWD", on: d).apply(100) == 323)
        #expect(try table.factor(from: "JPY", to: "JPY", on: d) == .one)
        #expect(FXRate("1.10") == FXRate("1.1"))
        #expect(FXRate("0.82608")?.description == "0.82608" && FXRate("158.330")?.description == "158.33")
    }
}

/// The reporting currency's identities (docs/reports.md, "Reporting currency"): random ledgers, random rates,
/// exact integer arithmetic.
@Suite("Reporting currency: every identity holds in the reporting currency")
struct FXRevenuePropertyTests {
    static let currencies = ["EUR", "USD", "JPY", "KWD", "GBP"]

    /// Random rates for every day of the generated ledgers' span (each currency per 1 EUR), from a seed.
    static func rates(seed: UInt64) -> FXTable {
        var r = SplitMix64(seed: seed)
        var table = FXTable()
        let first = FXDay(iso: "2025-10-01")!
        for day in first.days..<(first.days + 700) {
            // Some days missing (weekends), never more than seven in a row.
            if r.int(0...6) == 0 { continue }
            for c in currencies.dropFirst() {
                table.add(currency: c, day: FXDay(days: day), rate: FXRate(units: Int64(r.int(1...9_999_999)), decimals: r.int(0...6)))
            }
        }
        table.sort()
        return table
    }

    /// The population of ReportIdentityTests with each transaction in a currency chosen by its event id.
    static let transactions: [RevenueTransaction] = ReportIdentityTests.population.flatMap(\.transactions).map { t in
        var t = t
        t.currency = currencies[Int(t.eventID.uuid.0) % currencies.count]
        return t
    }

    static func converted(_ transactions: [RevenueTransaction], _ boundaries: [Timestamp], into target: String, _ rates: FXTable) throws
        -> [RevenuePeriod]
    {
        var acc = RevenueAccumulator(boundaries: boundaries)
        for t in transactions {
            try acc.add(t, currency: target, factor: try rates.factor(from: t.currency, to: target, on: FXDay(t.occurredAt)))
        }
        return acc.periods
    }

    @Test(arguments: 0..<3, ["EUR", "USD", "JPY", "KWD"])
    func deferredIdentityAndChainingHold(grid: Int, target: String) throws {
        let rates = Self.rates(seed: UInt64(grid * 31 + target.utf8.count))
        let rows = try Self.converted(Self.transactions, ReportIdentityTests.grids[grid], into: target, rates)
        #expect(Set(rows.map(\.currency)) == [target])
        var previous: Int128?
        var billed: Int128 = 0
        for row in rows {
            let f = row.figures
            #expect(row.deferredEnd == row.deferredStart + f.billings - f.recognized - f.refundedUnrecognized, "\(row.start)")
            #expect(f.refunds == f.refundedUnrecognized + f.refundsRecognized)
            #expect(f.proceeds == f.billings - f.commission)
            if let previous { #expect(row.deferredStart == previous, "deferred chains at \(row.start)") }
            previous = row.deferredEnd
            billed += f.billings
        }
        #expect(billed > 0)
    }

    /// Every transaction, converted: recognised parts plus refunded deferred money equal its converted gross,
    /// parts of any random grid add up to the whole, nothing stays deferred once it is settled, and recognised
    /// money is `round_half_up(R(x) × rate)` at every instant.
    @Test(arguments: ["EUR", "JPY", "KWD"])
    func partsOfAnyGridAddUpToTheWhole(target: String) throws {
        let rates = Self.rates(seed: 7)
        var r = SplitMix64(seed: 99)
        for t in Self.transactions {
            let f = try rates.factor(from: t.currency, to: target, on: FXDay(t.occurredAt))
            let schedule = RevenueSchedule(t)
            let far = Timestamp(microseconds: t.settledAt.microseconds + 1)
            let total = try schedule.cumulative(before: far, converting: f)
            #expect(total.recognized + total.refundedUnrecognized == total.billings, "\(t.eventID)")
            #expect(total.billings == (try f.apply(Int128(t.gross))))
            #expect(total.deferred == 0)
            var cuts = (0..<20).map { _ in
                Timestamp(microseconds: t.start.microseconds - 86_400_000_000 + Int64(r.int(0...(90 * 86_400))) * 1_000_000)
            }
            cuts = ([Timestamp(microseconds: 0)] + cuts + [far]).sorted()
            var sum: Int128 = 0
            for (a, b) in zip(cuts, cuts.dropFirst()) {
                let (x, y) = (try schedule.cumulative(before: a, converting: f), try schedule.cumulative(before: b, converting: f))
                sum += y.recognized - x.recognized
                #expect(y.recognized == (try f.apply(schedule.cumulative(before: b).recognized)), "R_C(x) = round_half_up(R(x) × rate)")
            }
            #expect(sum == total.recognized)
        }
    }

    /// A month is the sum of its days in the reporting currency too.
    @Test func gridsAgree() throws {
        let rates = Self.rates(seed: 3)
        let months = try Self.converted(
            Self.transactions, ReportCalendar.boundaries(from: StreamBuilder.t("2026-03-01"), to: StreamBuilder.t("2026-06-01"), interval: .month),
            into: "USD", rates)
        let days = try Self.converted(
            Self.transactions, ReportCalendar.boundaries(from: StreamBuilder.t("2026-03-01"), to: StreamBuilder.t("2026-06-01"), interval: .day),
            into: "USD", rates)
        for row in months {
            let inside = days.filter { $0.start >= row.start && $0.end <= row.end }
            #expect(inside.map(\.figures.recognized).reduce(0, +) == row.figures.recognized)
            #expect(inside.map(\.figures.billings).reduce(0, +) == row.figures.billings)
            #expect(inside.map(\.figures.refundedUnrecognized).reduce(0, +) == row.figures.refundedUnrecognized)
            #expect(inside.first?.deferredStart == row.deferredStart && inside.last?.deferredEnd == row.deferredEnd)
        }
    }

    /// Transfers: a transaction's two holders convert at the one rate of its date, so their handovers cancel
    /// in every period and the converted report equals the one of the history without transfers.
    @Test(arguments: 0..<20)
    func handoversConvertTheSameWay(seed: Int) throws {
        let rates = Self.rates(seed: UInt64(seed))
        // The histories of IdentityPropertyTests, all in USD, run there with transfers and here converted.
        var random = SplitMix64(seed: UInt64(seed) &* 7919 &+ 17)
        var moved = IdentityPropertyTests.Ledger()
        var clock: Int64 = 0
        var next: [String: Int64] = [:]
        var ids: [String: [String]] = [:]
        for step in 0..<24 {
            clock += Int64(random.below(9))
            let purchase = ["p0", "p1"][random.below(2)]
            switch random.below(10) {
            case 0...4:
                let from = max(next[purchase] ?? clock, clock - 5)
                let id = "\(purchase)-t\(step)"
                let data = IdentityPropertyTests.transaction(id, purchase: purchase, from: from, days: 30, price: Int64(500 + random.below(2_000)))
                let owner = moved.owner(of: purchase) ?? ["s0", "s1", "s2"][random.below(3)]
                _ = moved.append(owner, ids[purchase] == nil ? .purchase : .renewal, at: IdentityPropertyTests.at(from), data)
                next[purchase] = from + 30
                ids[purchase, default: []].append(id)
            case 5...6:
                guard let list = ids[purchase], let owner = moved.owner(of: purchase) else { continue }
                _ = moved.append(
                    owner, .refund, at: IdentityPropertyTests.at(clock),
                    [
                        "transaction_id": .string(list[random.below(list.count)]),
                        "amount_minor": .number(JSONNumber(Int64(100 + random.below(400)))),
                        "currency": "USD", "reason": "refund", "cut": .bool(random.below(2) == 0),
                    ])
            default:
                moved.transfer(purchase, to: ["s0", "s1", "s2"][random.below(3)], at: IdentityPropertyTests.at(clock))
            }
        }
        let boundaries = (0..<12).map { IdentityPropertyTests.at(Int64($0) * 15) }
        let transactions = moved.facts.flatMap(\.transactions)
        for target in ["EUR", "JPY"] {
            let rows = try Self.converted(transactions, boundaries, into: target, rates)
            for row in rows {
                #expect(row.figures.handover == 0, "seed \(seed): handovers cancel in \(target)")
                let f = row.figures
                #expect(row.deferredEnd == row.deferredStart + f.billings - f.recognized - f.refundedUnrecognized, "seed \(seed)")
            }
        }
    }

    @Test func theFactorOneIsThePlainReport() throws {
        let grid = ReportIdentityTests.grids[0]
        var plain = RevenueAccumulator(boundaries: grid)
        var one = RevenueAccumulator(boundaries: grid)
        for t in ReportIdentityTests.population.flatMap(\.transactions) {
            plain.add(t)
            try one.add(t, currency: t.currency, factor: .one)
        }
        #expect(plain.periods == one.periods)
    }
}

/// The hand-computed example of docs/reports.md, "Reporting currency".
@Suite("Reporting currency: the worked example")
struct FXWorkedExampleTests {
    @Test func aMonthlyUSDPurchaseInEuroYenAndPounds() throws {
        var table = FXTable()
        let d = FXDay(iso: "2025-03-03")!
        // ECB reference rates of 2025-03-03 (tools/data/fx/).
        table.add(currency: "USD", day: d, rate: FXRate("1.0465")!)
        table.add(currency: "JPY", day: d, rate: FXRate("158.33")!)
        table.add(currency: "GBP", day: d, rate: FXRate("0.8253")!)
        table.sort()
        let t = RevenueTransaction(
            eventID: UUID(), entitlements: ["pro"], kind: .paid, currency: "USD", gross: 999, commission: 300,
            occurredAt: StreamBuilder.t("2025-03-03T10:00:00Z"), start: StreamBuilder.t("2025-03-03T10:00:00Z"),
            end: StreamBuilder.t("2025-04-03T10:00:00Z"), stop: nil, refunds: [], monthly: nil)
        let grid = ReportCalendar.boundaries(from: StreamBuilder.t("2025-03-01"), to: StreamBuilder.t("2025-05-01"), interval: .month)
        func report(_ c: String) throws -> [[Int128]] {
            var acc = RevenueAccumulator(boundaries: grid)
            try acc.add(t, currency: c, factor: try table.factor(from: "USD", to: c, on: d))
            return acc.periods.map { [$0.figures.billings, $0.figures.commission, $0.figures.proceeds, $0.figures.recognized, $0.deferredEnd] }
        }
        // March: R(April 1st) = round(999 × 686 h / 744 h) = 921 cents.
        #expect(try report("USD") == [[999, 300, 699, 921, 78], [0, 0, 0, 78, 0]])
        #expect(try report("EUR") == [[955, 287, 668, 880, 75], [0, 0, 0, 75, 0]])
        #expect(try report("JPY") == [[1511, 454, 1057, 1393, 118], [0, 0, 0, 118, 0]])
        #expect(try report("GBP") == [[788, 237, 551, 726, 62], [0, 0, 0, 62, 0]])
    }
}
