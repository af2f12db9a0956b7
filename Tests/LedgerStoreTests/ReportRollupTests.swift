import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Report rollups on PostgreSQL")
struct ReportRollupTests {
    static func t(_ s: String) -> Timestamp { try! Timestamp(rfc3339: s + "T00:00:00Z") }

    /// A generated ledger plus price adjustments (`cut: false` refunds) and a second currency's refunds.
    static func ledger(seed: UInt64) -> [NewEvent] {
        var events = GeneratedLedger.events(seed: seed, subscribers: 60, eventsPerSubscriber: 1...18)
        for s in stride(from: 0, to: 60, by: 3) {
            let subscriber = "gen-\(seed)-\(s)"
            let members: [String: JSONValue] = [
                "subscriber_id": .string(subscriber), "type": "refund", "occurred_at": .string("2026-0\(s % 9 + 1)-15T12:00:00Z"),
                "source": "gen", "environment": "production", "idempotency_key": .string("\(subscriber)-adjust"),
                "data": [
                    "transaction_id": .string("\(subscriber)-t\(s % 4 + 1)"), "amount_minor": 300, "currency": "USD",
                    "reason": "price adjustment", "cut": false,
                ],
            ]
            events.insert(try! EventDecoder.decode(members, path: ""), at: (s * 7) % events.count)
        }
        /// A non-renewing purchase of `product` by `subscriber`, on `day` (2026) at `time`.
        func purchase(
            _ subscriber: String, _ key: String, _ day: String, _ time: String, _ product: String, _ entitlements: [String], _ duration: String,
            _ price: Int, _ currency: String
        ) -> NewEvent {
            let members: [String: JSONValue] = [
                "subscriber_id": .string(subscriber), "type": "purchase", "occurred_at": .string("2026-\(day)T\(time)Z"),
                "source": "gen", "environment": "production", "idempotency_key": .string("\(subscriber)-\(key)"),
                "data": [
                    "product_id": .string(product), "transaction_id": .string("\(subscriber)-\(key)"), "kind": "non_renewing",
                    "entitlements": .array(entitlements.map(JSONValue.string)), "duration": .string(duration),
                    "price_minor": .number(JSONNumber(Int64(price))), "currency": .string(currency),
                ],
            ]
            return try! EventDecoder.decode(members, path: "")
        }
        // Transactions too large for the month cells (`ReportRollup.maxRevenueCells`): six years of service,
        // and a year over forty entitlements; revenue reads them from the facts beside the rollup.
        for s in stride(from: 1, to: 60, by: 11) {
            let many = s % 2 == 0
            let entitlements = many ? ["pro"] + (1...40).map { "e\($0)" } : ["pro", "basic"]
            let event = purchase(
                "gen-\(seed)-\(s)", "long", "0\(s % 9 + 1)-03", "08:00:00", "pro.long", entitlements, many ? "P1Y" : "P6Y", 50000, "GBP")
            events.insert(event, at: (s * 13) % events.count)
        }
        // Subscribers holding only `basic`, who pay for it: by entitlement they are in the null group of
        // `entitlement=pro`, and not converted there (none of their payments is in scope).
        for s in stride(from: 2, to: 60, by: 13) {
            let event = purchase("gen-\(seed)-basic-\(s)", "basic", "0\(s % 9 + 1)-06", "07:15:00", "basic.month", ["basic"], "P1M", 499, "USD")
            events.insert(event, at: (s * 11) % events.count)
        }
        // Two years of one entitlement: in the month cells, too long for the day cells
        // (`ReportRollup.maxRevenueDayCells`), so day and week grids read it from the facts.
        for s in stride(from: 5, to: 60, by: 17) {
            let event = purchase("gen-\(seed)-\(s)", "two-years", "0\(s % 9 + 1)-04", "09:30:00", "pro.two", ["pro"], "P2Y", 17999, "EUR")
            events.insert(event, at: (s * 5) % events.count)
        }
        return events
    }

    /// Every report from the rollups equals the same report from the facts, on every grid and key.
    static func expectSameReports(_ client: PostgresClient, _ note: String) async throws {
        let rollups = ReportStore(client: client, logger: TestDatabase.logger)
        let facts = ReportStore(client: client, logger: TestDatabase.logger, rollups: false)
        let grids: [(ReportInterval, Timestamp, Timestamp)] = [
            (.month, t("2025-11-01"), t("2027-03-01")), (.week, t("2026-01-05"), t("2026-09-07")),
            (.day, t("2026-02-01"), t("2026-05-01")), (.month, t("2026-04-01"), t("2026-07-01")),
            (.week, t("2025-06-02"), t("2028-01-03")), (.day, t("2026-06-10"), t("2026-06-20")),
        ]
        for entitlement in [nil, "pro", "basic"] as [String?] {
            let who = "\(note), \(entitlement ?? "all")"
            for (interval, from, to) in grids {
                let b = ReportCalendar.boundaries(from: from, to: to, interval: interval)
                let churn = try await rollups.churn(boundaries: b, interval: interval, entitlement: entitlement)
                #expect(churn == (try await facts.churn(boundaries: b, entitlement: entitlement)), "churn \(interval) \(who)")
                let trials = try await rollups.trials(boundaries: b, interval: interval, entitlement: entitlement)
                #expect(trials == (try await facts.trials(boundaries: b, entitlement: entitlement)), "trials \(interval) \(who)")
                let revenue = try await rollups.revenue(boundaries: b, interval: interval, entitlement: entitlement)
                let expected = try await facts.revenue(boundaries: b, entitlement: entitlement)
                let differing = zip(revenue, expected).first { $0 != $1 }.map { "\($0)\n vs \($1)" } ?? "\(revenue.count) vs \(expected.count) rows"
                #expect(revenue == expected, "revenue \(interval) \(who): \(differing)")
            }
            for (from, to, until) in [(t("2026-01-01"), t("2026-12-01"), t("2027-06-01")), (t("2026-03-01"), t("2026-05-01"), t("2026-08-15"))] {
                let a = try await rollups.retention(from: from, to: to, until: until, entitlement: entitlement)
                #expect(a == (try await facts.retention(from: from, to: to, until: until, entitlement: entitlement)), "retention \(who)")
            }
        }
        var instants = [
            t("2026-03-01"), t("2026-06-17"), try! Timestamp(rfc3339: "2026-05-09T13:45:07Z"),
            try! Timestamp(rfc3339: "2026-05-09T13:00:00Z"), try! Timestamp(rfc3339: "2026-05-09T12:59:59.999999Z"),
            try! Timestamp(rfc3339: "2026-07-01T23:59:59.999999Z"), try! Timestamp(rfc3339: "2026-04-20T12:00:00Z"),
            try! Timestamp(rfc3339: "2026-04-20T05:30:00Z"),
        ]
        // Instants where service starts or ends, and just before and after them.
        let rows = try await client.query(
            "SELECT start_us, service_end_us FROM report_transactions ORDER BY source_event_id LIMIT 12", logger: TestDatabase.logger)
        for try await (start, end) in rows.decode((Int64, Int64?).self) {
            for us in [start, end].compactMap({ $0 }) { instants += [us - 1, us, us + 1].map(Timestamp.init(microseconds:)) }
        }
        for entitlement in [nil, "pro", "basic"] as [String?] {
            for at in instants {
                let a = try await rollups.mrr(at: at, entitlement: entitlement)
                #expect(a == (try await facts.mrr(at: at, entitlement: entitlement)), "mrr at \(at.rfc3339), \(note), \(entitlement ?? "all")")
            }
        }
        try await expectSameReportsII(rollups, facts, note)
        // MRR at an instant by dimension (schema 0036's cells where they answer), every shape above and more.
        var grouped = 0
        for d in reportsIIShapes + [
            ReportDimensions(stores: ["gen"]), ReportDimensions(productIDs: ["pro.long"]),
            ReportDimensions(countries: ["DE", "JP", "US"], groupBy: .country), ReportDimensions(entitlements: ["pro"], groupBy: .productID),
            ReportDimensions(stores: ["gen"], groupBy: .entitlement), ReportDimensions(countries: ["DE"], groupBy: .country),
        ] {
            for at in instants {
                let a = try await rollups.mrr(at: at, dimensions: d)
                #expect(a == (try await facts.mrr(at: at, dimensions: d)), "mrr at \(at.rfc3339), \(note), \(d)")
                grouped += a.filter { $0.group != nil && $0.row.activePaid > 0 }.count
            }
        }
        #expect(grouped > 100)
        for table in [
            "report_refund_days", "report_refund_repeats", "report_conversion_days", "report_ltv_cells", "report_mrr_movement",
            "report_revenue_month_dims", "report_trial_day_dims", "report_churn_active_days", "report_churn_moves",
        ] {
            let rows = try await client.query(PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(table)"), logger: TestDatabase.logger)
                .collect().first?.decode(Int64.self)
            #expect(rows ?? 0 > 0, "\(table), \(note)")
        }
        #expect(try await rollups.mrr(at: t("2026-06-01"), entitlement: nil).contains { $0.activePaid > 1 })
        let b = ReportCalendar.boundaries(from: t("2026-01-01"), to: t("2026-12-01"), interval: .month)
        #expect(try await rollups.churn(boundaries: b, interval: .month, entitlement: nil).contains { $0.churnedTotal > 0 && $0.new > 0 })
        #expect(try await rollups.revenue(boundaries: b, interval: .month, entitlement: nil).contains { $0.figures.refunds > 0 })
        #expect(try await rollups.revenue(boundaries: b, interval: .month, entitlement: nil).contains { $0.currency == "GBP" })
        let long = try await client.query(
            "SELECT count(*) FROM report_transactions WHERE NOT revenue_rolled_up", logger: TestDatabase.logger
        ).collect().first?.decode(Int64.self)
        #expect(long ?? 0 >= 4, "transactions left to the facts")
        let longDays = try await client.query(
            "SELECT count(*) FROM report_transactions WHERE revenue_rolled_up AND NOT revenue_rolled_up_days", logger: TestDatabase.logger
        ).collect().first?.decode(Int64.self)
        #expect(longDays ?? 0 >= 3, "transactions in the month cells left out of the day cells")
    }

    static func pending(_ client: PostgresClient) async throws -> Int64 {
        try await client.query("SELECT count(*) FROM report_revenue_pending", logger: TestDatabase.logger).collect().first?
            .decode(Int64.self) ?? -1
    }

    /// Refunds, conversion and LTV from their cells (schema 0030) equal the same reports from the facts, with the
    /// filters and groupings the cells answer.
    static let reportsIIShapes: [ReportDimensions] = [
        .none, ReportDimensions(entitlements: ["pro"]), ReportDimensions(groupBy: .store), ReportDimensions(groupBy: .country),
        ReportDimensions(groupBy: .productID), ReportDimensions(groupBy: .entitlement),
        ReportDimensions(entitlements: ["pro", "basic"], groupBy: .entitlement), ReportDimensions(stores: ["apple", "gen"]),
        ReportDimensions(countries: ["DE"], entitlements: ["basic"], groupBy: .store),
        ReportDimensions(stores: ["google"], countries: ["JP", "US"], groupBy: .productID), ReportDimensions(countries: ["DE"]),
        ReportDimensions(entitlements: ["basic"]), ReportDimensions(entitlements: ["pro"], groupBy: .entitlement),
    ]

    static func expectSameReportsII(_ rollups: ReportStore, _ facts: ReportStore, _ note: String) async throws {
        let shapes = reportsIIShapes
        let grids: [(ReportInterval, Timestamp, Timestamp)] = [
            (.month, t("2025-11-01"), t("2027-03-01")), (.week, t("2026-01-05"), t("2026-09-07")), (.day, t("2026-02-01"), t("2026-05-01")),
            // Late starts: MRR movement's level before them sums many day cells.
            (.month, t("2026-07-01"), t("2026-11-01")), (.day, t("2026-08-10"), t("2026-08-20")),
        ]
        var seen = (refunds: 0, converted: 0, ltv: 0, moved: 0, billed: 0, trials: 0, churned: 0)
        for d in shapes {
            let who = "\(note), \(d)"
            for (interval, from, to) in grids {
                let b = ReportCalendar.boundaries(from: from, to: to, interval: interval)
                let refunds = try await rollups.refunds(boundaries: b, dimensions: d)
                #expect(refunds == (try await facts.refunds(boundaries: b, dimensions: d)), "refunds \(interval) \(who)")
                seen.refunds += refunds.map(\.row.refunds).reduce(0, +)
                let churn = try await rollups.churn(boundaries: b, interval: interval, dimensions: d)
                let expectedChurn = try await facts.churn(boundaries: b, interval: interval, dimensions: d)
                let churnDifference =
                    zip(churn, expectedChurn).first { $0 != $1 }.map { "\($0)\n vs \($1)" } ?? "\(churn.count) vs \(expectedChurn.count) rows"
                #expect(churn == expectedChurn, "churn \(interval) \(who): \(churnDifference)")
                seen.churned += churn.map(\.row.churnedTotal).reduce(0, +)
                let trials = try await rollups.trials(boundaries: b, interval: interval, dimensions: d)
                #expect(trials == (try await facts.trials(boundaries: b, interval: interval, dimensions: d)), "trials \(interval) \(who)")
                seen.trials += trials.map(\.row.started).reduce(0, +)
                let revenue = try await rollups.revenue(boundaries: b, interval: interval, dimensions: d)
                let expectedRevenue = try await facts.revenue(boundaries: b, interval: interval, dimensions: d)
                let revenueDifference =
                    zip(revenue, expectedRevenue).first { $0 != $1 }.map { "\($0)\n vs \($1)" } ?? "\(revenue.count) vs \(expectedRevenue.count) rows"
                #expect(revenue == expectedRevenue, "revenue \(interval) \(who): \(revenueDifference)")
                seen.billed += revenue.map { Int($0.row.figures.billings) }.reduce(0, +)
                let movement = try await rollups.mrrMovement(boundaries: b, dimensions: d)
                #expect(movement == (try await facts.mrrMovement(boundaries: b, dimensions: d)), "mrr movement \(interval) \(who)")
                seen.moved += movement.map { $0.row.figures.count(.new) + $0.row.figures.count(.expansion) }.reduce(0, +)
                let conversion = try await rollups.conversion(boundaries: b, days: [1, 7, 30, 3650], dimensions: d)
                #expect(
                    conversion == (try await facts.conversion(boundaries: b, days: [1, 7, 30, 3650], dimensions: d)), "conversion \(interval) \(who)")
                seen.converted += conversion.map { $0.row.converted[1] }.reduce(0, +)
            }
            for (from, to, until, months) in [
                (t("2025-10-01"), t("2026-12-01"), t("2027-03-01"), 12), (t("2026-03-01"), t("2026-05-01"), t("2026-08-15"), 120),
            ] {
                let ltv = try await rollups.ltv(from: from, to: to, months: months, until: until, dimensions: d)
                #expect(ltv == (try await facts.ltv(from: from, to: to, months: months, until: until, dimensions: d)), "ltv \(who)")
                seen.ltv += ltv.count
            }
        }
        #expect(
            seen.refunds > 0 && seen.converted > 0 && seen.ltv > 0 && seen.moved > 0 && seen.billed > 0 && seen.trials > 0 && seen.churned > 0,
            "\(seen)")
    }

    /// The rollup tables' non-zero rows, as text (a rebuild leaves no zero rows; appends may).
    static func tables(_ client: PostgresClient) async throws -> [String] {
        var all: [String] = []
        for (table, nonzero) in [
            (
                "report_revenue_months",
                "transactions <> 0 OR billings <> 0 OR refunds <> 0 OR recognized <> 0 OR commission <> 0 OR settled_deferred <> 0"
            ),
            ("report_trial_days", "started <> 0 OR converted <> 0"), ("report_run_days", "starts <> 0 OR ends <> 0"),
            (
                "report_churn_periods",
                "new <> 0 OR reactivated <> 0 OR churned_refund <> 0 OR churned_other <> 0 OR churned_voluntary <> 0 OR churned_involuntary <> 0"
            ),
            ("report_retention_cells", "delta <> 0"), ("report_mrr_days", "started <> 0 OR ended <> 0"),
            ("report_paid_days", "starts <> 0 OR ends <> 0"),
            ("report_mrr_hours", "started <> 0 OR ended <> 0"), ("report_paid_hours", "starts <> 0 OR ends <> 0"),
            ("report_mrr_rate_days", "started <> 0 OR ended <> 0"), ("report_paid_any_days", "starts <> 0 OR ends <> 0"),
            ("report_mrr_dimension_days", "started <> 0 OR ended <> 0"), ("report_paid_dimension_days", "starts <> 0 OR ends <> 0"),
            ("report_mrr_rate_hours", "started <> 0 OR ended <> 0"), ("report_paid_any_hours", "starts <> 0 OR ends <> 0"),
            ("report_conversion_holders", "subscribers <> 0"),
            (
                "report_revenue_days",
                "transactions <> 0 OR billings <> 0 OR refunds <> 0 OR recognized <> 0 OR commission <> 0 OR settled_deferred <> 0"
            ),
            ("report_refund_days", "refunds <> 0 OR amount <> 0 OR refunded_transactions <> 0 OR paid_transactions <> 0"),
            ("report_refund_repeats", "repeats <> 0"), ("report_conversion_days", "subscribers <> 0"),
            ("report_ltv_cells", "members <> 0 OR gross <> 0 OR proceeds <> 0"), ("report_mrr_movement", "amount <> 0"),
            ("report_revenue_month_dims", "transactions <> 0 OR billings <> 0 OR refunds <> 0 OR recognized <> 0 OR settled_deferred <> 0"),
            ("report_trial_day_dims", "started <> 0 OR converted <> 0"), ("report_churn_active_days", "starts <> 0 OR ends <> 0"),
            (
                "report_churn_moves",
                "new <> 0 OR reactivated <> 0 OR churned_refund <> 0 OR churned_other <> 0 OR churned_voluntary <> 0 OR churned_involuntary <> 0"
            ),
        ] {
            let rows = try await client.query(
                PostgresQuery(unsafeSQL: "SELECT t::text FROM \(table) t WHERE \(nonzero) ORDER BY 1"), logger: TestDatabase.logger)
            for try await text in rows.decode(String.self) { all.append("\(table) \(text)") }
        }
        return all
    }

    @Test("reports from the rollups equal the facts' after appends on both paths and after a rebuild; the rebuild writes the same cells")
    func rollupsMatchFacts() async throws {
        try await TestDatabase.with { client, _ in
            // Two stores: each one's belief goes stale when the other appends, so both append paths run.
            let one = EventStore(client: client, logger: TestDatabase.logger)
            let two = EventStore(client: client, logger: TestDatabase.logger)
            let events = Self.ledger(seed: 21)
            var i = 0
            var turn = 0
            while i < events.count {
                let batch = Array(events[i..<min(events.count, i + 1 + turn % 5)])
                _ = try await (turn % 3 == 0 ? two : one).append(batch)
                i += batch.count
                turn += 1
            }
            // The worker follows the appends (schema 0034) in batches, the revenue moves among their cells going
            // to the day cells' queue, which reports add.
            let database = Database(client: client, logger: TestDatabase.logger)
            #expect(try await ReportRollupFollowTests.behind(client) > 0)
            #expect((try await ReportRollupWorker(database: database, batchSize: 7).drain() ?? 0) > 0)
            #expect(try await ReportRollupFollowTests.behind(client) == 0)
            #expect(try await Self.pending(client) > 0)
            try await Self.expectSameReports(client, "after appends, day cells queued")
            // One small batch applied: reports read part from the cells, part from the queue.
            #expect(try await RevenueDayWorker(database: database, batchSize: 25).applyBatch() == 25)
            try await Self.expectSameReports(client, "after appends, day cells partly applied")
            #expect(try await RevenueDayWorker(database: database, batchSize: 40).drain() > 0)
            #expect(try await Self.pending(client) == 0)
            try await Self.expectSameReports(client, "after appends, day cells applied")
            let appended = try await Self.tables(client)
            #expect(appended.contains { $0.hasPrefix("report_revenue_days") })
            try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
            #expect(try await Self.tables(client) == appended)
            #expect(try await Self.pending(client) == 0)
            try await Self.expectSameReports(client, "after a rebuild")
        }
    }

    @Test("incomplete rollups (a migration on a ledger with events) are not read until a rebuild completes them")
    func incompleteRollupsFallBack() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await store.append(Self.ledger(seed: 5))
            try await ReportRollupWorker(database: Database(client: client, logger: TestDatabase.logger)).drain()
            let months = ReportCalendar.boundaries(from: Self.t("2026-01-01"), to: Self.t("2026-12-01"), interval: .month)
            let reports = ReportStore(client: client, logger: TestDatabase.logger)
            let expected = try await reports.revenue(boundaries: months, entitlement: nil)
            // As 0014 leaves a ledger with events: empty rollups, marked incomplete.
            for table in ["report_revenue_months", "report_trial_days", "report_run_days", "report_churn_periods", "report_retention_cells"] {
                try await client.query(PostgresQuery(unsafeSQL: "DELETE FROM \(table)"), logger: TestDatabase.logger)
            }
            try await client.query("UPDATE report_rollup_state SET complete = false", logger: TestDatabase.logger)
            #expect(try await reports.revenue(boundaries: months, interval: .month, entitlement: nil) == expected)
            try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
            let complete = try await client.query("SELECT complete FROM report_rollup_state", logger: TestDatabase.logger)
                .collect().first?.decode(Bool.self)
            #expect(complete == true)
            #expect(try await reports.revenue(boundaries: months, interval: .month, entitlement: nil) == expected)
            try await Self.expectSameReports(client, "after the completing rebuild")
        }
    }
}
