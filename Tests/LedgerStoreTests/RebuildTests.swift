import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Rebuild into fresh tables, swapped in")
struct RebuildTests {
    /// Indexes, constraints, privileges and CHECKs of the projection tables, as text.
    static func schema(_ client: PostgresClient) async throws -> [String] {
        var out: [String] = []
        for try await row in try await client.query(
            """
            SELECT 'index ' || indexname || ' ' || indexdef FROM pg_indexes
             WHERE tablename = ANY(subledger_projection_tables())
            UNION ALL
            SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
              FROM pg_constraint WHERE conrelid::regclass::text = ANY(subledger_projection_tables())
            UNION ALL
            SELECT 'grant ' || table_name || ' ' || grantee || ' ' || privilege_type
              FROM information_schema.role_table_grants
             WHERE table_name = ANY(subledger_projection_tables()) AND grantee = 'subledger_app'
            UNION ALL
            SELECT 'table ' || relname FROM pg_class WHERE relname LIKE 'rebuild\\_%' AND relkind = 'r'
            ORDER BY 1
            """, logger: TestDatabase.logger)
        {
            out.append(try row.decode(String.self))
        }
        return out
    }

    @Test("the swapped-in tables keep every index, constraint and privilege, and no shadow is left")
    func schemaSurvives() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await store.append([SampleEvents.purchase(subscriber: "s1", key: "k1")])
            let before = try await Self.schema(client)
            #expect(before.contains { $0.hasPrefix("index windows_pkey") })
            #expect(before.contains { $0.hasPrefix("grant windows subledger_app INSERT") })
            try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
            try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
            #expect(try await Self.schema(client) == before)
            // The new tables come with column statistics (the first reports after an import are planned on them).
            let analyzed = try await client.query(
                "SELECT count(DISTINCT tablename) FROM pg_stats WHERE tablename IN ('windows', 'report_transactions', 'report_runs')",
                logger: TestDatabase.logger
            ).collect().first?.decode(Int64.self)
            #expect(analyzed == 3)
        }
    }

    @Test("appends made while a rebuild runs are in the projection it leaves")
    func appendsDuringRebuild() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let events = GeneratedLedger.events(seed: 7, subscribers: 300, eventsPerSubscriber: 1...12)
            let half = events.count / 2
            var i = 0
            while i < half {
                _ = try await store.append(Array(events[i..<min(half, i + 50)]))
                i += 50
            }
            let late = Array(events[half...])
            // Small batches so the rebuild's reader, folders and writer interleave with the appends.
            async let rebuilt = Rebuilder(client: client, logger: TestDatabase.logger, chunkSize: 5).rebuild()
            var j = 0
            while j < late.count {
                _ = try await store.append(Array(late[j..<min(late.count, j + 7)]))
                j += 7
            }
            _ = try await rebuilt
            let kept = try await ProjectionTests.dump(client)
            try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
            #expect(try await ProjectionTests.dump(client) == kept)

            let reader = ProjectionReader(client: client, logger: TestDatabase.logger)
            let at = try Timestamp(rfc3339: "2026-06-01T00:00:00Z")
            for subscriber in Set(late.map(\.subscriberID)).sorted().prefix(30) {
                let stream = try await store.stream(subscriberID: subscriber, afterVersion: 0, limit: 1000)
                #expect(try await reader.ledger(subscriberID: subscriber).entitlements(at: at) == Fold.fold(stream).entitlements(at: at))
            }
        }
    }

    @Test("the service role can append after a rebuild (privileges carried over)")
    func serviceRoleAfterRebuild() async throws {
        try await TestDatabase.with { owner, url in
            try await Rebuilder(client: owner, logger: TestDatabase.logger).rebuild()
            try await TestDatabase.run(url.clientConfiguration(role: "subledger_app", maximumConnections: 4)) { client in
                let store = EventStore(client: client, logger: TestDatabase.logger)
                let appended = try await store.append([SampleEvents.purchase(subscriber: "after", key: "a1")])
                #expect(appended.createdCount == 1)
                #expect(try await ProjectionReader(client: client, logger: TestDatabase.logger).ledger(subscriberID: "after").windows.count == 1)
            }
        }
    }

    /// Every row of the five projection tables as text, in a fixed order (the report facts once the rollup
    /// worker has followed the log to its end, as a report reads them).
    static func projection(_ client: PostgresClient) async throws -> [String] {
        try await ReportRollupWorker.catchUpIfBehind(Database(client: client, logger: TestDatabase.logger))
        var out: [String] = []
        for table in ["windows", "subscriber_state", "report_runs", "report_transactions", "report_trials"] {
            for try await row in try await client.query(
                "SELECT \(unescaped: table)::text FROM \(unescaped: table) ORDER BY 1", logger: TestDatabase.logger)
            {
                out.append(table + " " + (try row.decode(String.self)))
            }
        }
        return out
    }

    @Test("a rebuild (COPY rows) writes exactly the rows the appends (JSON rows) wrote: one description of the tables")
    func rebuildEqualsAppends() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let events = GeneratedLedger.events(seed: 19, subscribers: 60, eventsPerSubscriber: 1...25)
            for start in stride(from: 0, to: events.count, by: 200) {
                _ = try await store.append(Array(events[start..<min(start + 200, events.count)]))
            }
            let appended = try await Self.projection(client)
            #expect(appended.count > 100)
            #expect(appended.contains { $0.hasPrefix("report_transactions ") } && appended.contains { $0.hasPrefix("report_runs ") })
            try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
            let rebuilt = try await Self.projection(client)
            #expect(rebuilt == appended)
        }
    }
}
