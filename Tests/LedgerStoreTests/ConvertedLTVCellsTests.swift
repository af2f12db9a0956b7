import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Realized LTV in a reporting currency from cells (schema 0038)")
struct ConvertedLTVCellsTests {
    static func t(_ s: String) -> Timestamp { ReportRollupTests.t(s) }

    static let shapes: [ReportDimensions] =
        ConvertedRevenueCellsTests.shapes + [
            ReportDimensions(groupBy: .store), ReportDimensions(entitlements: ["basic"], groupBy: .entitlement),
        ]

    /// Cohort spans: every month shown, months not shown yet (`until`), and the longest `months`.
    static let spans: [(from: Timestamp, to: Timestamp, months: Int, until: Timestamp)] = [
        (t("2025-11-01"), t("2027-01-01"), 12, t("2027-03-01")), (t("2026-02-01"), t("2026-08-01"), 4, t("2026-06-15")),
        (t("2026-01-01"), t("2026-03-01"), 120, t("2030-01-01")),
    ]

    /// Every converted LTV report from the cells equals the one from the facts; returns how many the cells answered.
    @discardableResult
    static func expectSame(_ client: PostgresClient, version: Int64?, _ note: String, cellsAnswer: Bool = true, routed: Bool = false) async throws
        -> Int
    {
        let cells = ReportStore(client: client, logger: TestDatabase.logger)
        let facts = ReportStore(client: client, logger: TestDatabase.logger, rollups: false)
        var answered = 0
        var realized: Int128 = 0
        for currency in ["EUR", "USD"] {
            let fx = FXUse(currency: currency, version: version)
            for d in shapes {
                for span in spans {
                    let who = "\(currency) \(span.from)..\(span.to) months \(span.months) \(d), \(note)"
                    let expected = await Outcome {
                        try await facts.ltv(from: span.from, to: span.to, months: span.months, until: span.until, dimensions: d, converting: fx)
                    }
                    let direct = await Outcome {
                        try await cells.ltvFromConvertedCells(
                            from: span.from, to: span.to, months: span.months, until: span.until, dimensions: d, fx: fx)
                    }
                    switch (direct, expected) {
                    case (.rows(let found?), .rows(let want)):
                        answered += 1
                        realized += found.compactMap { $0.row.gross.last }.reduce(0, +)
                        let difference = zip(found, want).first { $0 != $1 }.map { "\($0)\n vs \($1)" } ?? "\(found.count) vs \(want.count) rows"
                        let same = found == want
                        #expect(same, "\(who): \(difference.prefix(1500))")
                    case (.rows(nil), _):
                        #expect(!cellsAnswer, "the cells did not answer: \(who)")
                    default:
                        Issue.record("\(who): cells \("\(direct)".prefix(600)), facts \("\(expected)".prefix(600))")
                    }
                    if routed {
                        let answer = await Outcome {
                            try await cells.ltv(from: span.from, to: span.to, months: span.months, until: span.until, dimensions: d, converting: fx)
                        }
                        let same = answer == expected
                        #expect(same, "routed: \(who)")
                    }
                }
            }
        }
        if cellsAnswer { #expect(realized > 0, "\(note)") }
        return answered
    }

    static let movementShapes: [ReportDimensions] =
        shapes + [ReportDimensions(countries: ["DE"]), ReportDimensions(groupBy: .productID), ReportDimensions(entitlements: ["basic"])]

    /// Every converted MRR movement report from the cells (`report_fx_movement`) equals the one from the facts, on
    /// month, week and day grids; returns how many the cells answered.
    @discardableResult
    static func expectSameMovement(_ client: PostgresClient, version: Int64?, _ note: String, cellsAnswer: Bool = true, routed: Bool = false)
        async throws -> Int
    {
        let cells = ReportStore(client: client, logger: TestDatabase.logger)
        let facts = ReportStore(client: client, logger: TestDatabase.logger, rollups: false)
        var answered = 0
        var moved: Int128 = 0
        for currency in ["EUR", "USD"] {
            let fx = FXUse(currency: currency, version: version)
            for d in movementShapes {
                for (interval, from, to) in ConvertedRevenueCellsTests.grids {
                    let b = ReportCalendar.boundaries(from: from, to: to, interval: interval)
                    let who = "movement \(currency) \(interval) \(d), \(note)"
                    let expected = await Outcome { try await facts.mrrMovement(boundaries: b, dimensions: d, converting: fx) }
                    let direct = await Outcome { try await cells.mrrMovementFromConvertedCells(boundaries: b, dimensions: d, fx: fx) }
                    switch (direct, expected) {
                    case (.rows(let found?), .rows(let want)):
                        answered += 1
                        moved += found.map { $0.row.figures[.new] + $0.row.figures[.churned] }.reduce(0, +)
                        let difference = zip(found, want).first { $0 != $1 }.map { "\($0)\n vs \($1)" } ?? "\(found.count) vs \(want.count) rows"
                        let same = found == want
                        #expect(same, "\(who): \(difference.prefix(1500))")
                    case (.rows(nil), _):
                        // Filters the movement cells do not keep read the facts.
                        #expect(!cellsAnswer || !Self.movementKept(d, interval), "the cells did not answer: \(who)")
                    default:
                        Issue.record("\(who): cells \("\(direct)".prefix(600)), facts \("\(expected)".prefix(600))")
                    }
                    if routed {
                        let answer = await Outcome { try await cells.mrrMovement(boundaries: b, dimensions: d, converting: fx) }
                        let same = answer == expected
                        #expect(same, "routed: \(who)")
                    }
                }
            }
        }
        if cellsAnswer { #expect(moved > 0, "\(note)") }
        return answered
    }

    /// Whether the movement cells answer a shape on a grid (`ConvertedMovementRollup.intervals`, no store, country
    /// or product, one entitlement key or grouped by entitlement).
    static func movementKept(_ d: ReportDimensions, _ interval: ReportInterval) -> Bool {
        ConvertedMovementRollup.intervals.contains(interval) && d.stores.isEmpty && d.countries.isEmpty && d.productIDs.isEmpty
            && (d.groupBy == nil || d.groupBy == .entitlement) && (d.groupBy == .entitlement || d.entitlements.count <= 1)
    }

    /// The movement cells' non-zero rows, as text.
    static func movementRows(_ client: PostgresClient) async throws -> [String] {
        var rows: [String] = []
        let q = try await client.query(
            """
            SELECT concat_ws(' ', reporting_currency, entitlement, dimension, period_interval, period_us, value, factor_num, factor_den, part,
                             denominator, amount)
            FROM report_fx_movement WHERE amount <> 0 ORDER BY 1
            """, logger: TestDatabase.logger)
        for try await r in q.decode(String.self) { rows.append(r) }
        return rows
    }

    /// The cells' non-zero rows, as text.
    static func cellRows(_ client: PostgresClient) async throws -> [String] {
        var rows: [String] = []
        let q = try await client.query(
            """
            SELECT concat_ws(' ', reporting_currency, entitlement, cohort_us, store, country, product_id, month_us, members, gross, proceeds)
            FROM report_fx_ltv_cells WHERE members <> 0 OR gross <> 0 OR proceeds <> 0 ORDER BY 1
            """, logger: TestDatabase.logger)
        for try await r in q.decode(String.self) { rows.append(r) }
        return rows
    }

    static func position(_ client: PostgresClient) async throws -> Int64? {
        try await client.query("SELECT min(position) FROM report_fx_ltv_state WHERE complete", logger: TestDatabase.logger).collect().first?
            .decode(Int64?.self) ?? nil
    }

    @Test("converted LTV from the cells equals the facts' through appends it follows, a new rate version and a rebuild")
    func cellsMatchFacts() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let database = Database(client: client, logger: TestDatabase.logger)
            let fx = FXStore(client: client, logger: TestDatabase.logger)
            let cells = ConvertedLTVCells(database: database, batchSize: 7, flushCells: 300, fetchBatch: 50)
            let events = ReportRollupTests.ledger(seed: 36)
            let third = events.count / 3
            for start in stride(from: 0, to: third, by: 9) { _ = try await store.append(Array(events[start..<min(third, start + 9)])) }
            #expect(try await fx.upload(ConvertedRevenueCellsTests.rates(seed: 8), origin: "cli", label: "one").version == 1)
            try await ReportRollupWorker(database: database).drain()
            // EUR and USD are kept from the start (`report_fx_cells`); both are computed at version 1.
            #expect(try await cells.refresh() == ["EUR", "USD"])
            #expect(try await cells.refresh() == [])
            try await Self.expectSame(client, version: 1, "computed", routed: true)
            try await Self.expectSameMovement(client, version: 1, "computed", routed: true)

            // The second third: followed by the worker, several batches.
            for start in stride(from: third, to: 2 * third, by: 9) { _ = try await store.append(Array(events[start..<min(2 * third, start + 9)])) }
            let head = try await client.query("SELECT max(position) FROM events", logger: TestDatabase.logger).collect().first?.decode(Int64.self)
            #expect(try await Self.position(client) ?? 0 < head ?? 0)
            #expect((try await cells.drain() ?? 0) > 7)
            #expect(try await Self.position(client) == head)
            try await Self.expectSame(client, version: 1, "followed by the worker")
            try await Self.expectSameMovement(client, version: 1, "followed by the worker")

            // The last third: the report follows the log itself before reading.
            for start in stride(from: 2 * third, to: events.count, by: 9) {
                _ = try await store.append(Array(events[start..<min(events.count, start + 9)]))
            }
            try await Self.expectSame(client, version: 1, "followed by the report", routed: true)
            try await Self.expectSameMovement(client, version: 1, "followed by the report", routed: true)
            #expect(try await cells.drain() == 0)

            // What it followed is what a computation afresh gives.
            let followed = try await Self.cellRows(client)
            let followedMovement = try await Self.movementRows(client)
            try await client.query("UPDATE report_fx_ltv_state SET complete = false", logger: TestDatabase.logger)
            #expect(try await cells.refresh() == ["EUR", "USD"])
            #expect(try await Self.cellRows(client) == followed)
            let afresh = try await Self.movementRows(client)
            #expect(
                afresh == followedMovement,
                "followed only: \(Set(followedMovement).subtracting(afresh).sorted().prefix(20)); afresh only: \(Set(afresh).subtracting(followedMovement).sorted().prefix(20))"
            )
            #expect(!followedMovement.isEmpty)

            // A few appends the rollups hold and the cells do not yet: the move below reads the facts at the rollups'
            // position and takes the subscribers of the events between the two as well.
            let extra = ReportRollupTests.ledger(seed: 38).filter { $0.subscriberID.hasSuffix("1") }.prefix(40)
            _ = try await store.append(Array(extra))
            try await ReportRollupWorker(database: database).drain()
            // A new version: until the cells are computed at it, version 2 reads the facts (and version 1 too).
            #expect(try await fx.upload(ConvertedRevenueCellsTests.rates(seed: 8, bump: 3), origin: "cli", label: "two").version == 2)
            #expect(try await Self.expectSame(client, version: 2, "version 2, cells at 1", cellsAnswer: false) == 0)
            #expect(try await Self.expectSameMovement(client, version: 2, "version 2, cells at 1", cellsAnswer: false) == 0)
            #expect(try await cells.refresh() == ["EUR", "USD"])
            try await Self.expectSame(client, version: 2, "cells at version 2")
            try await Self.expectSameMovement(client, version: 2, "cells at version 2")
            // The cells moved to version 2 by the days whose rates changed are those a computation afresh gives.
            let (movedLTV, movedMovement) = (try await Self.cellRows(client), try await Self.movementRows(client))
            try await client.query("UPDATE report_fx_ltv_state SET complete = false", logger: TestDatabase.logger)
            #expect(try await cells.refresh() == ["EUR", "USD"])
            #expect(try await Self.cellRows(client) == movedLTV)
            #expect(try await Self.movementRows(client) == movedMovement)
            let older = try await ReportStore(client: client, logger: TestDatabase.logger).ltvFromConvertedCells(
                from: Self.t("2026-01-01"), to: Self.t("2026-03-01"), months: 3, until: Self.t("2026-06-01"), dimensions: .none,
                fx: FXUse(currency: "EUR", version: 1))
            #expect(older == nil, "an older version reads the facts")

            // A newly kept currency computes them all afresh; one no longer kept goes.
            try await ConvertedRevenueCells(database: database).keep(["EUR", "JPY"])
            #expect(try await cells.refresh() == ["EUR", "JPY"])
            let jpy = FXUse(currency: "JPY", version: 2)
            let span = Self.spans[0]
            let fromCells = try await ReportStore(client: client, logger: TestDatabase.logger).ltvFromConvertedCells(
                from: span.from, to: span.to, months: span.months, until: span.until, dimensions: ReportDimensions(groupBy: .country), fx: jpy)
            let fromFacts = try await ReportStore(client: client, logger: TestDatabase.logger, rollups: false).ltv(
                from: span.from, to: span.to, months: span.months, until: span.until, dimensions: ReportDimensions(groupBy: .country), converting: jpy
            )
            #expect(fromCells == fromFacts)
            #expect(fromCells?.isEmpty == false)
            try await ConvertedRevenueCells(database: database).keep(["EUR", "USD"])
            #expect(try await cells.refresh() == ["EUR", "USD"])

            // A rebuild leaves them to be computed afresh, to the same cells.
            let before = try await Self.cellRows(client)
            let beforeMovement = try await Self.movementRows(client)
            try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
            #expect(try await Self.expectSame(client, version: 2, "after a rebuild, not computed", cellsAnswer: false) == 0)
            #expect(try await Self.expectSameMovement(client, version: 2, "after a rebuild, not computed", cellsAnswer: false) == 0)
            #expect(try await cells.refresh() == ["EUR", "USD"])
            #expect(try await Self.cellRows(client) == before)
            #expect(try await Self.movementRows(client) == beforeMovement)
            try await Self.expectSame(client, version: 2, "after a rebuild")
            try await Self.expectSameMovement(client, version: 2, "after a rebuild")
        }
    }

    @Test("a transaction without a rate sends its cohort to the facts (422 naming currency and date); other cohorts stay on the cells")
    func missingRates() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let database = Database(client: client, logger: TestDatabase.logger)
            let cells = ConvertedLTVCells(database: database)
            _ = try await store.append(ReportRollupTests.ledger(seed: 37))
            _ = try await FXStore(client: client, logger: TestDatabase.logger).upload(
                ConvertedRevenueCellsTests.rates(seed: 9), origin: "cli", label: "one")
            try await ReportRollupWorker(database: database).drain()
            #expect(try await cells.refresh() == ["EUR", "USD"])
            // A purchase in Swiss francs, which have no rate: its member's cohort is May 2026.
            let chf: [String: JSONValue] = [
                "subscriber_id": "chf-1", "type": "purchase", "occurred_at": "2026-05-10T10:00:00Z", "source": "gen",
                "environment": "production", "idempotency_key": "chf-1-p",
                "data": [
                    "product_id": "pro.pack", "transaction_id": "chf-1-t", "entitlements": ["pro"], "duration": "P1M", "kind": "non_renewing",
                    "price_minor": 1200, "currency": "CHF",
                ],
            ]
            _ = try await store.append([try EventDecoder.decode(chf, path: "")])
            let reports = ReportStore(client: client, logger: TestDatabase.logger)
            let eur = FXUse(currency: "EUR", version: 1)
            await #expect(throws: FXRequestError.self) {
                _ = try await reports.ltv(
                    from: Self.t("2026-04-01"), to: Self.t("2026-07-01"), months: 3, until: Self.t("2026-09-01"), dimensions: .none, converting: eur)
            }
            do {
                _ = try await reports.ltv(
                    from: Self.t("2026-05-01"), to: Self.t("2026-06-01"), months: 1, until: Self.t("2026-09-01"), dimensions: .none, converting: eur)
            } catch let e as FXRequestError {
                #expect(e.missing.currency == "CHF" && e.missing.day.description == "2026-05-10")
            }
            #expect(try await ConvertedRevenueCellsTests.queued(client, "report_fx_ltv_missing WHERE transactions <> 0") == 2)  // EUR and USD
            let may = try await reports.ltvFromConvertedCells(
                from: Self.t("2026-05-01"), to: Self.t("2026-06-01"), months: 1, until: Self.t("2026-09-01"), dimensions: .none, fx: eur)
            #expect(may == nil, "May's cohort reads the facts")
            let march = try await reports.ltvFromConvertedCells(
                from: Self.t("2026-03-01"), to: Self.t("2026-04-01"), months: 3, until: Self.t("2026-09-01"), dimensions: .none, fx: eur)
            #expect(march != nil, "March's cohort stays on the cells")
            try await Self.expectSame(client, version: 1, "a CHF purchase without rates", cellsAnswer: false, routed: true)
            try await Self.expectSameMovement(client, version: 1, "a CHF purchase without rates", cellsAnswer: false, routed: true)
            // Francs' rates arrive (version 2): computed afresh, the purchase is converted.
            let francs = (0..<40).map { FXRateRow(day: FXDay(days: FXDay(iso: "2026-05-01")!.days + $0), currency: "CHF", rate: FXRate("0.9412")!) }
            #expect(try await FXStore(client: client, logger: TestDatabase.logger).upload(francs, origin: "cli", label: "chf").version == 2)
            #expect(try await cells.refresh() == ["EUR", "USD"])
            #expect(try await ConvertedRevenueCellsTests.queued(client, "report_fx_ltv_missing WHERE transactions <> 0") == 0)
            try await Self.expectSame(client, version: 2, "francs' rates arrived")
            try await Self.expectSameMovement(client, version: 2, "francs' rates arrived")
        }
    }
}
