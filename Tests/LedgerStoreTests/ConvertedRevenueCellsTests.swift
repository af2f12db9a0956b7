import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Revenue in a reporting currency from cells (schema 0031)")
struct ConvertedRevenueCellsTests {
    static func t(_ s: String) -> Timestamp { ReportRollupTests.t(s) }

    /// USD, JPY and GBP per EUR for every day the test ledger spans, a day left out now and then (never a week).
    static func rates(seed: UInt64, bump: Int64 = 0) -> [FXRateRow] {
        var r = SplitMix64(seed: seed)
        var rows: [FXRateRow] = []
        let first = FXDay(iso: "2025-06-01")!
        for day in first.days..<(first.days + 1000) where r.int(0...6) != 0 {
            rows.append(FXRateRow(day: FXDay(days: day), currency: "USD", rate: FXRate(units: 10_000 + Int64(r.int(0...9999)) + bump, decimals: 4)))
            rows.append(FXRateRow(day: FXDay(days: day), currency: "JPY", rate: FXRate("\(r.int(100...200)).\(r.int(0...99))")!))
            rows.append(FXRateRow(day: FXDay(days: day), currency: "GBP", rate: FXRate("0.\(r.int(7000...9999))")!))
        }
        return rows
    }

    static let shapes: [ReportDimensions] = [
        .none, ReportDimensions(entitlements: ["pro"]), ReportDimensions(groupBy: .country), ReportDimensions(groupBy: .entitlement),
        ReportDimensions(stores: ["apple", "gen"], groupBy: .productID),
        ReportDimensions(countries: ["DE"], entitlements: ["basic"], groupBy: .store),
    ]

    static let grids: [(ReportInterval, Timestamp, Timestamp)] = [
        (.month, t("2025-11-01"), t("2027-03-01")), (.week, t("2026-01-05"), t("2026-09-07")), (.day, t("2026-04-20"), t("2026-05-20")),
    ]

    /// Every converted revenue report from the cells equals the one from the facts; returns how many the cells
    /// answered (the rest went to the facts).
    @discardableResult
    static func expectSame(
        _ client: PostgresClient, version: Int64?, _ note: String, cellsAnswer: Bool = true, routed: Bool = false, own: Bool = true
    ) async throws -> Int {
        let cells = ReportStore(client: client, logger: TestDatabase.logger)
        let facts = ReportStore(client: client, logger: TestDatabase.logger, rollups: false)
        var answered = 0
        var billed: Int128 = 0
        for currency in ["EUR", "USD"] + (own ? [ConvertedRevenueDays.ownCurrencies] : []) {
            // '': the cells in the transactions' own currencies, against the unconverted report.
            let fx: FXUse? = currency.isEmpty ? nil : FXUse(currency: currency, version: version)
            for d in shapes {
                for (interval, from, to) in grids {
                    let b = ReportCalendar.boundaries(from: from, to: to, interval: interval)
                    let who = "\(currency) \(interval) \(d), \(note)"
                    let expected = await Outcome { try await facts.revenue(boundaries: b, interval: interval, dimensions: d, converting: fx) }
                    let direct = await Outcome {
                        if let fx {
                            try await cells.revenueFromConvertedCells(boundaries: b, dimensions: d, fx: fx)
                        } else {
                            try await cells.revenueFromOwnCurrencyDays(boundaries: b, dimensions: d)
                        }
                    }
                    switch (direct, expected) {
                    case (.rows(let found?), .rows(let want)):
                        answered += 1
                        billed += found.map { $0.row.figures.billings }.reduce(0, +)
                        let difference = zip(found, want).first { $0 != $1 }.map { "\($0)\n vs \($1)" } ?? "\(found.count) vs \(want.count) rows"
                        let same = found == want
                        #expect(same, "\(who): \(difference.prefix(1500))")
                    case (.rows(nil), _):
                        #expect(!cellsAnswer, "the cells did not answer: \(who)")
                    case (.refused(let a), .refused(let b)):
                        #expect(a == b, "\(who)")
                    default:
                        Issue.record("\(who): cells \("\(direct)".prefix(600)), facts \("\(expected)".prefix(600))")
                    }
                    // The route's path (cells, else facts) answers what the facts answer.
                    if routed {
                        let answer = await Outcome { try await cells.revenue(boundaries: b, interval: interval, dimensions: d, converting: fx) }
                        let same = answer == expected
                        #expect(same, "\(who)")
                    }
                }
            }
        }
        if cellsAnswer { #expect(billed > 0, "\(note)") }
        return answered
    }

    static func queued(_ client: PostgresClient, _ table: String) async throws -> Int64 {
        try await client.query(PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(table)"), logger: TestDatabase.logger).collect().first?
            .decode(Int64.self) ?? -1
    }

    @Test("converted revenue from the cells equals the facts' through queued appends, a new rate version and a rebuild")
    func cellsMatchFacts() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let database = Database(client: client, logger: TestDatabase.logger)
            let fx = FXStore(client: client, logger: TestDatabase.logger)
            let cells = ConvertedRevenueCells(database: database, batchSize: 30)
            let events = ReportRollupTests.ledger(seed: 33)
            let half = events.count / 2
            for start in stride(from: 0, to: half, by: 9) { _ = try await store.append(Array(events[start..<min(half, start + 9)])) }
            #expect(try await fx.upload(Self.rates(seed: 5), origin: "cli", label: "one").version == 1)
            // EUR and USD are kept from the start, and the own-currency cells; all are computed at version 1.
            #expect(try await cells.refresh() == ["", "EUR", "USD"])
            #expect(try await cells.refresh() == [])
            try await Self.expectSame(client, version: 1, "computed, nothing queued for the day cells", routed: true)

            // The second half: queued for the rollups, then for the day cells, then moved on to these cells.
            for start in stride(from: half, to: events.count, by: 9) {
                _ = try await store.append(Array(events[start..<min(events.count, start + 9)]))
            }
            #expect((try await ReportRollupWorker(database: database).drain() ?? 0) > 0)
            #expect(try await Self.queued(client, "report_revenue_pending") > 0)
            try await Self.expectSame(client, version: 1, "appends queued for the day cells")
            #expect(try await RevenueDayWorker(database: database, batchSize: 40).applyBatch() == 40)
            #expect(try await Self.queued(client, "report_fx_pending") == 40)
            try await Self.expectSame(client, version: 1, "part moved to the reporting currency queue")
            try await RevenueDayWorker(database: database).drain()
            #expect(try await cells.applyBatch() == 30)
            #expect((try await cells.drain() ?? 0) > 0)
            #expect(try await Self.queued(client, "report_fx_pending") == 0)
            try await Self.expectSame(client, version: 1, "all applied")

            // A new version: until the cells follow it, version 2 reads the facts (and version 1 too).
            let v2 = try await fx.upload(Self.rates(seed: 5, bump: 3), origin: "cli", label: "two")
            #expect(v2.version == 2)
            #expect(try await Self.expectSame(client, version: 2, "version 2, cells at 1", cellsAnswer: false, own: false) == 0)
            #expect(try await cells.refresh() == ["EUR", "USD"])
            try await Self.expectSame(client, version: 2, "cells at version 2")
            let older = try await ReportStore(client: client, logger: TestDatabase.logger).revenueFromConvertedCells(
                boundaries: ReportCalendar.boundaries(from: Self.t("2026-01-01"), to: Self.t("2026-03-01"), interval: .month), dimensions: .none,
                fx: FXUse(currency: "EUR", version: 1))
            #expect(older == nil, "an older version reads the facts")

            // Version 3 corrects April's USD rates: the cells move through the transactions of those days (and the
            // week after) only, to the cells a computation afresh gives.
            let april = Self.rates(seed: 5, bump: 3).filter { $0.currency == "USD" && $0.day.description.hasPrefix("2026-04") }.map {
                FXRateRow(day: $0.day, currency: "USD", rate: FXRate(units: $0.rate.units + 11, decimals: $0.rate.decimals))
            }
            #expect(try await fx.upload(april, origin: "cli", label: "three").version == 3)
            _ = try await store.append([
                try EventDecoder.decode(
                    [
                        "subscriber_id": "late-1", "type": "purchase", "occurred_at": "2026-04-12T10:00:00Z", "source": "gen",
                        "environment": "production", "idempotency_key": "late-1-p",
                        "data": [
                            "product_id": "pro.pack", "transaction_id": "late-1-t", "entitlements": ["pro"], "duration": "P1M",
                            "kind": "non_renewing", "price_minor": 4999, "currency": "USD",
                        ],
                    ], path: "")
            ])
            #expect(try await cells.refresh() == ["EUR", "USD"])
            try await Self.expectSame(client, version: 3, "moved to version 3, a late purchase queued")
            // The reports followed the log first; the worker finds nothing left.
            #expect(try await ReportRollupWorker(database: database).drain() == 0)
            #expect(try await ReportRollupFollowTests.behind(client) == 0)
            try await RevenueDayWorker(database: database).drain()
            try await cells.drain()
            let moved = try await Self.cellRows(client)
            try await client.query("UPDATE report_fx_cells SET complete = false", logger: TestDatabase.logger)
            #expect(try await cells.refresh() == ["", "EUR", "USD"])
            #expect(try await Self.cellRows(client) == moved)
            let version = Int64(3)

            // A rebuild leaves them to be computed afresh, to the same cells.
            let before = try await Self.cellRows(client)
            try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
            #expect(try await Self.expectSame(client, version: version, "after a rebuild, not computed", cellsAnswer: false) == 0)
            #expect(try await cells.refresh() == ["", "EUR", "USD"])
            #expect(try await Self.cellRows(client) == before)
            try await Self.expectSame(client, version: version, "after a rebuild")
        }
    }

    @Test("a transaction without a rate sends the spans it moves in to the facts (422 naming currency and date); others stay on the cells")
    func missingRates() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let database = Database(client: client, logger: TestDatabase.logger)
            let cells = ConvertedRevenueCells(database: database)
            _ = try await store.append(ReportRollupTests.ledger(seed: 34))
            _ = try await FXStore(client: client, logger: TestDatabase.logger).upload(Self.rates(seed: 6), origin: "cli", label: "one")
            try await cells.refresh()
            // A purchase in Swiss francs, which have no rate: queued, then applied as missing.
            let chf: [String: JSONValue] = [
                "subscriber_id": "chf-1", "type": "purchase", "occurred_at": "2026-05-10T10:00:00Z", "source": "gen",
                "environment": "production", "idempotency_key": "chf-1-p",
                "data": [
                    "product_id": "pro.pack", "transaction_id": "chf-1-t", "entitlements": ["pro"], "duration": "P1M",
                    "kind": "non_renewing",
                    "price_minor": 1200, "currency": "CHF",
                ],
            ]
            _ = try await store.append([try EventDecoder.decode(chf, path: "")])
            try await ReportRollupWorker(database: database).drain()
            let reports = ReportStore(client: client, logger: TestDatabase.logger)
            let may = ReportCalendar.boundaries(from: Self.t("2026-05-01"), to: Self.t("2026-06-01"), interval: .day)
            let march = ReportCalendar.boundaries(from: Self.t("2026-03-01"), to: Self.t("2026-04-01"), interval: .day)
            for stage in ["queued", "applied"] {
                if stage == "applied" {
                    try await RevenueDayWorker(database: database).drain()
                    try await cells.drain()
                    #expect(try await Self.queued(client, "report_fx_missing") == 2)  // EUR and USD
                }
                await #expect(throws: FXRequestError.self, "\(stage)") {
                    _ = try await reports.revenue(boundaries: may, interval: .day, dimensions: .none, converting: FXUse(currency: "EUR", version: 1))
                }
                do {
                    _ = try await reports.revenue(boundaries: may, interval: .day, dimensions: .none, converting: FXUse(currency: "EUR", version: 1))
                } catch let e as FXRequestError {
                    #expect(e.missing.currency == "CHF" && e.missing.day.description == "2026-05-10")
                }
                // Queued, every span goes to the facts; applied, March answers from the cells again.
                let fromCells = try await reports.revenueFromConvertedCells(
                    boundaries: march, dimensions: .none, fx: FXUse(currency: "EUR", version: 1))
                #expect((fromCells != nil) == (stage == "applied"), "\(stage)")
            }
            try await Self.expectSame(client, version: 1, "a CHF purchase without rates", cellsAnswer: false, routed: true)
            // Francs' rates arrive (version 2): the cells move the purchase from missing to converted.
            let francs = (0..<40).map { FXRateRow(day: FXDay(days: FXDay(iso: "2026-05-01")!.days + $0), currency: "CHF", rate: FXRate("0.9412")!) }
            #expect(try await FXStore(client: client, logger: TestDatabase.logger).upload(francs, origin: "cli", label: "chf").version == 2)
            #expect(try await cells.refresh() == ["EUR", "USD"])
            #expect(try await Self.queued(client, "report_fx_missing WHERE transactions <> 0") == 0)
            let converted = try await reports.revenueFromConvertedCells(boundaries: may, dimensions: .none, fx: FXUse(currency: "EUR", version: 2))
            let facts = try await ReportStore(client: client, logger: TestDatabase.logger, rollups: false).revenue(
                boundaries: may, interval: .day, dimensions: .none, converting: FXUse(currency: "EUR", version: 2))
            #expect(converted == facts)
            try await Self.expectSame(client, version: 2, "francs' rates arrived")
        }
    }

    @Test("a computation is not bound by the server's statement timeout: it may read for minutes, or wait for another's")
    func computationOutlivesTheStatementTimeout() async throws {
        try await TestDatabase.withDatabase { url in
            try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { owner in
                _ = try await EventStore(client: owner, logger: TestDatabase.logger).append(ReportRollupTests.ledger(seed: 35))
                _ = try await FXStore(client: owner, logger: TestDatabase.logger).upload(Self.rates(seed: 7), origin: "cli", label: "one")
                // A server's connections: 50 ms for any statement. Another computation holds the lock for 400 ms
                // (`ConvertedRevenueCells.lockKey`); `fx import` waits for it, which would take longer than that.
                let timed = url.clientConfiguration(role: "subledger_app", maximumConnections: 2, statementTimeout: .milliseconds(50))
                try await TestDatabase.run(timed) { client in
                    let database = Database(client: client, logger: TestDatabase.logger)
                    await #expect(throws: (any Error).self, "the timeout applies") {
                        try await client.query("SELECT pg_sleep(0.2)", logger: TestDatabase.logger).collect()
                    }
                    let computed = try await owner.withConnection { holder in
                        try await holder.query("SELECT pg_advisory_lock(\(Int64(0x5355_424C_4658_4356)))", logger: TestDatabase.logger)
                        async let waited = ConvertedRevenueCells(database: database).refresh(waiting: true)
                        try await Task.sleep(for: .milliseconds(400))
                        try await holder.query("SELECT pg_advisory_unlock(\(Int64(0x5355_424C_4658_4356)))", logger: TestDatabase.logger)
                        return try await waited
                    }
                    #expect(computed == ["", "EUR", "USD"])
                }
            }
        }
    }

    /// The cells' non-zero rows, as text.
    static func cellRows(_ client: PostgresClient) async throws -> [String] {
        var rows: [String] = []
        let q = try await client.query(
            """
            SELECT concat_ws(' ', reporting_currency, entitlement, day_us, store, country, product_id, transactions, billings, commission,
                             refunds, refunded_unrecognized, refunds_recognized, recognized, settled_deferred, handover, tax)
            FROM report_fx_revenue_days
            WHERE transactions <> 0 OR billings <> 0 OR commission <> 0 OR refunds <> 0 OR refunded_unrecognized <> 0
               OR refunds_recognized <> 0 OR recognized <> 0 OR settled_deferred <> 0 OR handover <> 0 OR tax <> 0
            ORDER BY 1
            """, logger: TestDatabase.logger)
        for try await r in q.decode(String.self) { rows.append(r) }
        return rows
    }
}

/// A report's rows, or the 422 it was refused with.
enum Outcome<Rows: Equatable & Sendable>: Equatable, Sendable {
    case rows(Rows)
    case refused(String)

    init(_ body: () async throws -> Rows) async {
        do {
            self = .rows(try await body())
        } catch let e as FXRequestError {
            self = .refused(e.description)
        } catch {
            self = .refused("unexpected \(error)")
        }
    }
}
