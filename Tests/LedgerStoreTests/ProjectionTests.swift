import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Projections on PostgreSQL")
struct ProjectionTests {
    /// Every projection row, in a stable order, as text.
    /// The report facts are the rollup worker's: it is brought to the log's end first, as a report would.
    static func dump(_ client: PostgresClient) async throws -> [String] {
        try await ReportRollupWorker.catchUpIfBehind(Database(client: client, logger: TestDatabase.logger))
        var out: [String] = []
        for try await row in try await client.query(
            "SELECT row_to_json(w)::text FROM (SELECT * FROM windows ORDER BY subscriber_id, seq) w", logger: TestDatabase.logger)
        {
            out.append(try row.decode(String.self))
        }
        for try await row in try await client.query(
            "SELECT row_to_json(s)::text FROM (SELECT * FROM subscriber_state ORDER BY subscriber_id) s", logger: TestDatabase.logger)
        {
            out.append(try row.decode(String.self))
        }
        for try await row in try await client.query(
            """
            SELECT row_to_json(r)::text FROM (SELECT * FROM report_runs ORDER BY entitlement, subscriber_id, start_us) r
            UNION ALL SELECT row_to_json(t)::text FROM (SELECT * FROM report_transactions ORDER BY source_event_id) t
            UNION ALL SELECT row_to_json(t)::text FROM (SELECT * FROM report_trials ORDER BY source_event_id, entitlement) t
            """, logger: TestDatabase.logger)
        {
            out.append(try row.decode(String.self))
        }
        return out
    }

    @Test("the projection kept by appends equals the fold of the log, and a rebuild ends identical to it")
    func incrementalEqualsRebuild() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let events = GeneratedLedger.events(seed: 42, subscribers: 60, eventsPerSubscriber: 1...25)
            // Appended in shuffled order, in batches of varying size: many events arrive late.
            var i = 0
            var size = 1
            while i < events.count {
                let batch = Array(events[i..<min(events.count, i + size)])
                _ = try await store.append(batch)
                i += batch.count
                size = size % 17 + 1
            }
            let incremental = try await Self.dump(client)
            #expect(!incremental.isEmpty)

            // The kept projection equals a fresh fold of each subscriber's log.
            let reader = ProjectionReader(client: client, logger: TestDatabase.logger)
            for subscriber in Set(events.map(\.subscriberID)).sorted().prefix(20) {
                let kept = try await reader.ledger(subscriberID: subscriber)
                let stream = try await store.stream(subscriberID: subscriber, afterVersion: 0, limit: 1000)
                let folded = Fold.fold(stream)
                #expect(kept.windows.map(\.start) == folded.windows.map(\.start))
                #expect(kept.windows.map(\.end) == folded.windows.map(\.end))
                #expect(kept.renewing == folded.renewing)
                for day in ["2026-02-01", "2026-06-01", "2026-09-15"] {
                    let at = try Timestamp(rfc3339: day + "T00:00:00Z")
                    #expect(kept.entitlements(at: at) == folded.entitlements(at: at))
                }
            }

            // Wipe the projections, rebuild, compare row for row.
            try await client.query("DELETE FROM windows", logger: TestDatabase.logger)
            try await client.query("DELETE FROM report_runs", logger: TestDatabase.logger)
            try await client.query("DELETE FROM report_transactions", logger: TestDatabase.logger)
            try await client.query("UPDATE subscriber_state SET version = 0, will_renew = '{}'", logger: TestDatabase.logger)
            let progress = try await Rebuilder(client: client, logger: TestDatabase.logger, chunkSize: 7).rebuild()
            #expect(progress.events == events.count)
            #expect(progress.subscribers == 60)
            #expect(try await Self.dump(client) == incremental)
        }
    }

    @Test("as_of answers from only the events recorded by then, by position or by recorded time")
    func asOf() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let purchase = try await store.append([SampleEvents.purchase(subscriber: "asof", key: "p1")]).events[0]
            let refundEvent = try EventDecoder.decode(
                [
                    "subscriber_id": "asof", "type": "refund", "occurred_at": "2026-03-10T00:00:00Z", "source": "web",
                    "environment": "production", "idempotency_key": "r1",
                    "data": ["transaction_id": "t-p1", "amount_minor": 999, "currency": "USD"],
                ], path: "")
            let refund = try await store.append([refundEvent]).events[0]
            let reader = ProjectionReader(client: client, logger: TestDatabase.logger)
            let at = try Timestamp(rfc3339: "2026-03-20T00:00:00Z")
            #expect(try await reader.ledger(subscriberID: "asof").entitlements(at: at).first?.active == false)
            #expect(try await reader.ledger(subscriberID: "asof", asOf: .position(purchase.position)).entitlements(at: at).first?.active == true)
            #expect(try await reader.ledger(subscriberID: "asof", asOf: .recordedAt(purchase.recordedAt)).entitlements(at: at).first?.active == true)
            #expect(try await reader.ledger(subscriberID: "asof", asOf: .position(refund.position)).entitlements(at: at).first?.active == false)
            #expect(try await reader.ledger(subscriberID: "asof", asOf: .position(0)).windows.isEmpty)
            #expect(try await reader.ledger(subscriberID: "nobody").windows.isEmpty)
        }
    }

    @Test("a statement error nobody read still fails the transaction: COMMIT answering ROLLBACK is an error")
    func unreadErrorFailsCommit() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            try await client.query("CREATE TABLE probe_commit (x int)", logger: TestDatabase.logger)
            await #expect(throws: Database.RolledBackAtCommit.self) {
                try await database.transaction { connection in
                    try await connection.query("INSERT INTO probe_commit VALUES (1)", logger: TestDatabase.logger)
                    // The error comes after the row description, in rows this body never reads.
                    _ = try await connection.query("SELECT 1 / (x - 1) FROM probe_commit", logger: TestDatabase.logger)
                    return true
                }
            }
            let rows = try await client.query("SELECT count(*) FROM probe_commit", logger: TestDatabase.logger).collect()
            #expect(try rows[0].decode(Int64.self) == 0)
        }
    }

    @Test("a projection write that fails rolls the event back with it")
    func projectionFailureRollsBack() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            // Make every windows insert fail (a constraint no window meets).
            try await client.query("ALTER TABLE windows ADD CONSTRAINT probe_fail CHECK (kind = 'never')", logger: TestDatabase.logger)
            await #expect(throws: (any Error).self) {
                try await store.append([SampleEvents.purchase(subscriber: "rb", key: "rb1")])
            }
            #expect(try await store.feed(afterPosition: 0, limit: 10).isEmpty)
            try await client.query("ALTER TABLE windows DROP CONSTRAINT probe_fail", logger: TestDatabase.logger)
            #expect(try await store.append([SampleEvents.purchase(subscriber: "rb", key: "rb1")]).events[0].position == 1)
        }
    }
}
