import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Event store on PostgreSQL")
struct EventStoreTests {
    @Test("appends assign versions per subscriber, gapless positions and a hash chain")
    func appendAssignsEnvelope() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let first = try await store.append([SampleEvents.purchase(subscriber: "alice", key: "a1")])
            #expect(first.createdCount == 1)
            #expect(first.events[0].version == 1)
            #expect(first.events[0].position == 1)
            #expect(first.events[0].prevHash == RecordedEvent.genesisHash)

            let batch = try await store.append([
                SampleEvents.autoRenewOff(subscriber: "alice", key: "a2"),
                SampleEvents.purchase(subscriber: "bob", key: "b1"),
                SampleEvents.purchase(subscriber: "alice", key: "a3"),
            ])
            #expect(batch.events.map(\.version) == [2, 1, 3])
            #expect(batch.events.map(\.position) == [2, 3, 4])
            #expect(batch.events[0].prevHash == first.events[0].hash)
            #expect(batch.events[2].prevHash == batch.events[0].hash)
            #expect(Set(batch.events.map(\.recordedAt)).count == 1)
            #expect(batch.events[0].recordedAt >= first.events[0].recordedAt)

            let stream = try await store.stream(subscriberID: "alice", afterVersion: 0, limit: 10)
            #expect(stream.map(\.version) == [1, 2, 3])
            #expect(stream[0] == first.events[0])
            let page = try await store.stream(subscriberID: "alice", afterVersion: 1, limit: 1)
            #expect(page.map(\.version) == [2])
            let feed = try await store.feed(afterPosition: 1, limit: 2)
            #expect(feed.map(\.position) == [2, 3])

            let verification = try await ChainVerifier(client: client, logger: TestDatabase.logger).verify()
            #expect(verification.ok)
            #expect(verification.eventsChecked == 4)
            #expect(verification.streamsChecked == 2)
        }
    }

    @Test("two concurrent writers with the same expected_version: exactly one wins")
    func concurrentExpectedVersion() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await store.append([SampleEvents.purchase(subscriber: "carol", key: "c0")])
            try await store.running { _ in
                for round in 0..<20 {
                    let version = Int64(round + 1)
                    let outcomes = await withTaskGroup(of: Result<AppendResult, any Error>.self) { group in
                        for writer in 0..<2 {
                            group.addTask {
                                do {
                                    return .success(
                                        try await store.append([
                                            SampleEvents.autoRenewOff(
                                                subscriber: "carol", key: "c\(round)-\(writer)", expectedVersion: version)
                                        ]))
                                } catch {
                                    return .failure(error)
                                }
                            }
                        }
                        return await group.reduce(into: []) { $0.append($1) }
                    }
                    let wins = outcomes.filter { if case .success = $0 { true } else { false } }
                    #expect(wins.count == 1)
                    for case .failure(let error) in outcomes {
                        #expect(error as? StoreError == .versionConflict(subscriberID: "carol", expected: version, actual: version + 1, index: nil))
                    }
                }
            }
            let stream = try await store.stream(subscriberID: "carol", afterVersion: 0, limit: 100)
            #expect(stream.map(\.version) == Array(1...21))
        }
    }

    @Test("idempotent replay returns the original; a different body under the same key is a conflict")
    func idempotency() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let original = try await store.append([SampleEvents.purchase(subscriber: "dave", key: "d1")])
            let replay = try await store.append([SampleEvents.purchase(subscriber: "dave", key: "d1")])
            #expect(replay.isReplay)
            #expect(replay.events == original.events)

            // Same key from another source is a different event.
            let other = try await store.append([SampleEvents.purchase(subscriber: "dave", key: "d1", source: "stripe")])
            #expect(other.createdCount == 1)

            await #expect(throws: StoreError.idempotencyConflict(source: "web", key: "d1", index: nil)) {
                try await store.append([SampleEvents.purchase(subscriber: "dave", key: "d1", price: 1999)])
            }
            // A batch mixing a replay with a conflict stores nothing.
            await #expect(throws: StoreError.idempotencyConflict(source: "web", key: "d1", index: 1)) {
                try await store.append([
                    SampleEvents.purchase(subscriber: "dave", key: "d2"),
                    SampleEvents.purchase(subscriber: "dave", key: "d1", price: 1),
                ])
            }
            // A batch mixing a replay with new events stores the new ones and returns all in order.
            let mixed = try await store.append([
                SampleEvents.purchase(subscriber: "dave", key: "d1"),
                SampleEvents.purchase(subscriber: "dave", key: "d3"),
            ])
            #expect(mixed.createdCount == 1)
            #expect(mixed.events[0] == original.events[0])
            #expect(mixed.events[1].version == 3)
            // A retried append that carried expected_version is a replay, not a version conflict.
            let guarded = try await store.append([SampleEvents.autoRenewOff(subscriber: "dave", key: "d4", expectedVersion: 3)])
            let retried = try await store.append([SampleEvents.autoRenewOff(subscriber: "dave", key: "d4", expectedVersion: 3)])
            #expect(retried.isReplay)
            #expect(retried.events == guarded.events)
            let all = try await store.feed(afterPosition: 0, limit: 100)
            #expect(all.count == 4)
        }
    }

    @Test("a batch whose third event conflicts stores nothing")
    func batchAllOrNothing() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            await #expect(throws: StoreError.self) {
                try await store.append([
                    SampleEvents.purchase(subscriber: "erin", key: "e1"),
                    SampleEvents.purchase(subscriber: "frank", key: "f1"),
                    SampleEvents.autoRenewOff(subscriber: "erin", key: "e2", expectedVersion: 0),
                ])
            }
            #expect(try await store.feed(afterPosition: 0, limit: 10).isEmpty)
            let ok = try await store.append([
                SampleEvents.purchase(subscriber: "erin", key: "e1"),
                SampleEvents.autoRenewOff(subscriber: "erin", key: "e2", expectedVersion: 1),
            ])
            #expect(ok.events.map(\.position) == [1, 2])
        }
    }

    @Test("UPDATE, DELETE and TRUNCATE are rejected, even for the table owner; the service role lacks the privilege")
    func appendOnly() async throws {
        try await TestDatabase.with { client, url in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await store.append([SampleEvents.purchase(subscriber: "gina", key: "g1")])
            // `client` logs in as the owner of the table (tools/pg's `subledger` role).
            for statement in [
                "UPDATE events SET type = 'refund'", "DELETE FROM events", "TRUNCATE events",
            ] {
                let error = await #expect(throws: PSQLError.self) { try await client.query(PostgresQuery(unsafeSQL: statement)) }
                #expect(error?.serverMessage.contains("append-only") == true, "\(statement)")
            }
            // Even a superuser using replication-role tricks meets the ENABLE ALWAYS triggers.
            let superuser = try TestDatabase.superuserURL().with(database: url.database)
            try await TestDatabase.run(superuser.clientConfiguration(maximumConnections: 1)) { su in
                try await su.withConnection { c in
                    try await c.query("SET session_replication_role = replica", logger: TestDatabase.logger)
                    for statement in ["UPDATE events SET type = 'refund'", "DELETE FROM events", "TRUNCATE events"] {
                        let error = await #expect(throws: PSQLError.self) {
                            try await c.query(PostgresQuery(unsafeSQL: statement), logger: TestDatabase.logger)
                        }
                        #expect(error?.serverMessage.contains("append-only") == true, "\(statement)")
                    }
                }
                return true
            }
            // The service's role has no UPDATE/DELETE/TRUNCATE privilege at all.
            try await TestDatabase.run(url.clientConfiguration(role: "subledger_app", maximumConnections: 1)) { app in
                for statement in ["UPDATE events SET type = 'refund'", "DELETE FROM events", "TRUNCATE events"] {
                    let error = await #expect(throws: PSQLError.self) { try await app.query(PostgresQuery(unsafeSQL: statement)) }
                    #expect(error?.sqlState == "42501", "\(statement)")
                }
                let count = try await app.query("SELECT count(*) FROM events").collect()[0].decode(Int64.self)
                #expect(count == 1)
                return true
            }
            #expect(try await store.feed(afterPosition: 0, limit: 10).count == 1)
        }
    }

    @Test("the chain check names the event whose payload was altered behind the ledger's back")
    func chainFindsAlteredPayload() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            var events: [NewEvent] = []
            for s in 0..<5 {
                for k in 0..<4 { events.append(SampleEvents.purchase(subscriber: "s\(s)", key: "s\(s)-\(k)")) }
            }
            let stored = try await store.append(events).events
            let verifier = ChainVerifier(client: client, logger: TestDatabase.logger, pageSize: 7)
            #expect(try await verifier.verify().ok)

            let victim = stored.first { $0.subscriberID == "s3" && $0.version == 2 }!
            try await client.withConnection { c in
                try await c.query("ALTER TABLE events DISABLE TRIGGER events_reject_update_delete", logger: TestDatabase.logger)
                try await c.query(
                    "UPDATE events SET data = jsonb_set(data, '{price_minor}', '1') WHERE event_id = \(victim.eventID)",
                    logger: TestDatabase.logger)
                try await c.query("ALTER TABLE events ENABLE ALWAYS TRIGGER events_reject_update_delete", logger: TestDatabase.logger)
            }
            let result = try await verifier.verify()
            #expect(!result.ok)
            #expect(result.eventsChecked == 20)
            #expect(result.breaks.count == 1)
            #expect(result.firstBroken?.eventID == victim.eventID)
            #expect(result.firstBroken?.reason.contains("altered") == true)
        }
    }
}
