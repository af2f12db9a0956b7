import Foundation
import LedgerCore
import LedgerTestSupport
import PostgresNIO
import Testing

@testable import LedgerStore

/// The cache against the real PostgreSQL: changes made by another process (another `EventStore`, a rebuild)
/// reach it through LISTEN/NOTIFY, and a lost listener disables it.
@Suite("Entitlement cache kept honest by change notifications")
struct ProjectionChangesTests {
    /// After `SampleEvents.autoRenewOff` (2026-03-05), inside the purchase's period: will_renew is false only
    /// once the cache serves the new ledger.
    static let afterAutoRenewOff = try! Timestamp(rfc3339: "2026-03-06T00:00:00Z")

    /// Runs `body` while a `ProjectionChanges` service listens for `cache`, once it is enabled.
    static func listening(
        _ client: PostgresClient, _ cache: LedgerCache, retryDelay: Duration = .milliseconds(100),
        _ body: @escaping @Sendable () async throws -> Void
    ) async throws {
        let changes = ProjectionChanges(
            client: client, cache: cache, logger: TestDatabase.logger, heartbeat: .milliseconds(200),
            retryDelay: retryDelay)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await changes.run() }
            try await eventually("the listener enables the cache") { cache.isEnabled }
            try await body()
            group.cancelAll()
        }
    }

    static func eventually(
        _ what: String, timeout: Duration = .seconds(30), _ condition: @Sendable () async throws -> Bool
    ) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("timed out waiting until \(what)")
    }

    @Test("an append by another process invalidates the cached subscriber; other subscribers stay cached")
    func otherProcessAppend() async throws {
        try await TestDatabase.with { client, _ in
            let cache = LedgerCache(byteBudget: 1 << 20)
            let reader = ProjectionReader(database: Database(client: client, logger: TestDatabase.logger), cache: cache)
            // No onCommit: as if another server or `subledger import` appended.
            let elsewhere = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await elsewhere.append([SampleEvents.purchase(subscriber: "s1", key: "k1")])
            _ = try await elsewhere.append([SampleEvents.purchase(subscriber: "s2", key: "k2")])
            try await Self.listening(client, cache) {
                #expect(try await reader.ledger(subscriberID: "s1").windows.count == 1)
                #expect(try await reader.ledger(subscriberID: "s2").windows.count == 1)
                #expect(cache.lookup("s1").0 != nil)

                _ = try await elsewhere.append([SampleEvents.autoRenewOff(subscriber: "s1", key: "k3")])
                try await Self.eventually("s1 is forgotten") { cache.lookup("s1").0 == nil }
                #expect(try await reader.ledger(subscriberID: "s1").willRenew("pro", at: Self.afterAutoRenewOff) == false)
                #expect(cache.lookup("s2").0 != nil)
            }
        }
    }

    @Test("this process's appends invalidate before they answer: a read right after sees the purchase")
    func ownAppendIsReadAtOnce() async throws {
        try await TestDatabase.with { client, _ in
            let cache = LedgerCache(byteBudget: 1 << 20)
            let reader = ProjectionReader(database: Database(client: client, logger: TestDatabase.logger), cache: cache)
            let store = EventStore(database: Database(client: client, logger: TestDatabase.logger)) { cache.invalidate($0) }
            try await Self.listening(client, cache) {
                #expect(try await reader.ledger(subscriberID: "s1").windows.isEmpty)
                #expect(cache.lookup("s1").0 != nil)
                for i in 1...20 {
                    let appended = try await store.append([SampleEvents.purchase(subscriber: "s1", key: "k\(i)")])
                    let position = appended.events[0].position
                    #expect(try await reader.ledger(subscriberID: "s1").windows.contains { $0.sourcePosition == position })
                }
            }
        }
    }

    @Test("a rebuild resets the cache; a killed listener disables it until it listens again")
    func resetAndOutage() async throws {
        try await TestDatabase.with { client, _ in
            let cache = LedgerCache(byteBudget: 1 << 20)
            let reader = ProjectionReader(database: Database(client: client, logger: TestDatabase.logger), cache: cache)
            let store = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await store.append([SampleEvents.purchase(subscriber: "s1", key: "k1")])
            // A long retry delay: the append below lands while the cache is disabled, its notification lost.
            try await Self.listening(client, cache, retryDelay: .seconds(2)) {
                _ = try await reader.ledger(subscriberID: "s1")
                #expect(cache.statistics.subscribers == 1)
                _ = try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
                try await Self.eventually("the rebuild's reset arrives") { cache.statistics.subscribers == 0 }

                _ = try await reader.ledger(subscriberID: "s1")
                #expect(cache.statistics.subscribers == 1)
                let superuser = PostgresClient(
                    configuration: try TestDatabase.superuserURL().clientConfiguration(maximumConnections: 1),
                    backgroundLogger: TestDatabase.logger)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await superuser.run() }
                    let database = try await client.query("SELECT current_database()").collect()[0].decode(String.self)
                    // Only the listener's backend (its last statement is its LISTEN, its heartbeat or its
                    // catch-up), so the test's own pooled connections live on; repeated until it notices.
                    try await Self.eventually("the cache is disabled", timeout: .seconds(30)) {
                        _ = try await superuser.query(
                            """
                            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                            WHERE datname = \(database)
                              AND (query LIKE 'LISTEN%' OR query = 'SELECT 1' OR query LIKE 'SELECT subscriber_id, position FROM events%')
                            """
                        ).collect()
                        try await Task.sleep(for: .milliseconds(100))
                        return !cache.isEnabled
                    }
                    group.cancelAll()
                }
                #expect(cache.statistics.subscribers == 0)
                // Meanwhile the ledger changes; once listening again the cache serves the new state.
                _ = try await store.append([SampleEvents.autoRenewOff(subscriber: "s1", key: "k2")])
                try await Self.eventually("the listener is back") { cache.isEnabled }
                #expect(try await reader.ledger(subscriberID: "s1").willRenew("pro", at: Self.afterAutoRenewOff) == false)
                #expect(try await reader.ledger(subscriberID: "s1").willRenew("pro", at: Self.afterAutoRenewOff) == false)
                #expect(cache.statistics.hits >= 1)
            }
        }
    }
}
