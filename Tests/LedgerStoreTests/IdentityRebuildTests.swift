import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Identity in the projection: rebuilt as appended")
struct IdentityRebuildTests {
    static func purchase(_ subscriber: String, _ id: String, purchase: String, from: String, to: String, type: EventType = .purchase) -> NewEvent {
        NewEvent(
            subscriberID: subscriber, type: type, occurredAt: try! Timestamp(rfc3339: from), source: "apple", environment: .production,
            idempotencyKey: "k-\(id)",
            data: [
                "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": .string(id), "original_transaction_id": .string(purchase),
                "kind": "auto_renewable", "offer": "none", "period_start": .string(from), "period_end": .string(to), "period": "P1M",
                "price_minor": 1000, "currency": "USD", "commission_rate": "0.30",
            ])
    }

    @Test("transfers, a merge and a refund on the new owner: a rebuild writes exactly the rows the appends wrote, rollups included")
    func rebuildEqualsAppends() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let intake = EventIntake(store: EventStore(database: database), catalog: CatalogStore(database: database), database: database)
            let identity = IdentityStore(intake: intake, database: database)
            _ = try await intake.append(
                [
                    Self.purchase("a", "t1", purchase: "p1", from: "2026-03-01T00:00:00Z", to: "2026-04-01T00:00:00Z"),
                    Self.purchase("anon", "t2", purchase: "p2", from: "2026-03-05T00:00:00Z", to: "2026-04-05T00:00:00Z"),
                ], path: { "events[\($0)]" })
            let t = try Timestamp(rfc3339: "2026-03-10T00:00:00Z")
            _ = try await identity.transfer(.init(from: "a", to: "b", purchaseID: "p1", reason: .support, occurredAt: t, idempotencyKey: "x"))
            _ = try await identity.merge("anon", into: "b", idempotencyKey: "m", occurredAt: try Timestamp(rfc3339: "2026-03-12T00:00:00Z"))
            _ = try await intake.append(
                [
                    Self.purchase("b", "t3", purchase: "p1", from: "2026-04-01T00:00:00Z", to: "2026-05-01T00:00:00Z", type: .renewal),
                    NewEvent(
                        subscriberID: "b", type: .refund, occurredAt: try Timestamp(rfc3339: "2026-03-20T00:00:00Z"), source: "apple",
                        environment: .production, idempotencyKey: "r1",
                        data: ["transaction_id": "t2", "amount_minor": 400, "currency": "USD", "reason": "refund", "cut": false]),
                ], path: { "events[\($0)]" })
            let appended = try await RebuildTests.projection(client)
            #expect(appended.filter { $0.hasPrefix("report_transactions ") }.count >= 5, "the copies the transfers made are facts too")
            try await ReportRollupWorker(database: database).drain()
            let rollups = try await Self.rollups(client)
            try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
            #expect(try await RebuildTests.projection(client) == appended)
            #expect(try await Self.rollups(client) == rollups)
            // And `verify` covers the new events' hash chains.
            let ledger = try await ProjectionReader(client: client, logger: TestDatabase.logger).ledger(subscriberID: "anon")
            #expect(ledger.mergedInto == "b")
        }
    }

    /// The revenue and churn rollups, summed per key (cells that cancel out to zero are left out).
    static func rollups(_ client: PostgresClient) async throws -> [String] {
        var out: [String] = []
        for (table, query) in [
            (
                "revenue",
                "SELECT entitlement || ' ' || month_us || ' ' || currency || ' ' || sum(billings) || ' ' || sum(recognized) || ' ' || sum(refunds) || ' ' || sum(handover) FROM report_revenue_months GROUP BY entitlement, month_us, currency HAVING sum(billings) <> 0 OR sum(recognized) <> 0 OR sum(refunds) <> 0 OR sum(handover) <> 0 ORDER BY 1"
            ),
            (
                "churn",
                "SELECT entitlement || ' ' || period_interval || ' ' || period_us || ' ' || sum(new) || ' ' || sum(transferred_in) || ' ' || sum(transferred_out) FROM report_churn_periods GROUP BY entitlement, period_interval, period_us HAVING sum(new) <> 0 OR sum(transferred_in) <> 0 OR sum(transferred_out) <> 0 ORDER BY 1"
            ),
        ] {
            for try await row in try await client.query(PostgresQuery(unsafeSQL: query), logger: TestDatabase.logger) {
                out.append(table + " " + (try row.decode(String.self)))
            }
        }
        return out
    }
}
