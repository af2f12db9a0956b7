import Foundation
import LedgerCore
import LedgerTestSupport
import PostgresNIO
import ServiceLifecycle
import Synchronization
import Testing

@testable import LedgerStore

/// Group commit (`GroupCommitter`, `EventStore.commit`): appends that share one transaction keep their own
/// outcomes. `EventStore.commit` is called directly to make a group deterministically; the concurrent tests
/// go through `append` as the API does.
@Suite("Group commit")
struct GroupCommitTests {
    static func job(_ events: NewEvent...) -> AppendJob { AppendJob(events: events, replays: .strict) }

    /// An event PostgreSQL refuses as a statement error (jsonb cannot hold `\u0000`), unlike a conflict,
    /// which the writer detects itself.
    static func poisoned(subscriber: String, key: String) -> NewEvent {
        var event = SampleEvents.purchase(subscriber: subscriber, key: key)
        event.metadata["note"] = .string("nul \u{0} byte")
        return event
    }

    @Test("concurrent single appends share transactions, with gapless positions and intact chains")
    func concurrentAppendsShareTransactions() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let n = 64
            let results = try await store.running { _ in
                try await withThrowingTaskGroup(of: AppendResult.self) { group in
                    for i in 0..<n {
                        group.addTask { try await store.append([SampleEvents.purchase(subscriber: "g\(i % 8)", key: "g\(i)")]) }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
            }
            #expect(results.count == n)
            #expect(results.allSatisfy { $0.createdCount == 1 })
            #expect(Set(results.map { $0.events[0].position }) == Set(1...Int64(n)))
            let counts = store.groupCommitCounts
            #expect(counts.appends == n)
            #expect(counts.transactions < n, "64 concurrent appends should not need 64 transactions")
            let feed = try await store.feed(afterPosition: 0, limit: 100)
            #expect(Set(feed.map(\.recordedAt)).count == counts.transactions)
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
        }
    }

    @Test("one transaction for a group; versions follow arrival order within it")
    func oneGroupOneTransaction() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let outcomes = await EventStore.commit(
                [
                    Self.job(SampleEvents.purchase(subscriber: "h", key: "h1")),
                    Self.job(SampleEvents.autoRenewOff(subscriber: "h", key: "h2", expectedVersion: 1)),
                    Self.job(SampleEvents.purchase(subscriber: "i", key: "i1"), SampleEvents.purchase(subscriber: "h", key: "h3")),
                ], database: store.database, memory: store.memory)
            let results = try outcomes.map { try $0.get() }
            #expect(results.map { $0.events.map(\.version) } == [[1], [2], [1, 3]])
            #expect(results.flatMap { $0.events.map(\.position) } == [1, 2, 3, 4])
            #expect(Set(results.flatMap { $0.events.map(\.recordedAt) }).count == 1)
        }
    }

    @Test("a bad request, a conflict and a stale version among good ones each fail alone")
    func badRequestFailsAlone() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await store.append([SampleEvents.purchase(subscriber: "j", key: "j0")])
            let outcomes = await EventStore.commit(
                [
                    Self.job(SampleEvents.purchase(subscriber: "k", key: "k1")),
                    Self.job(Self.poisoned(subscriber: "k", key: "k-bad")),
                    Self.job(SampleEvents.purchase(subscriber: "j", key: "j0", price: 1)),
                    Self.job(SampleEvents.autoRenewOff(subscriber: "j", key: "j1", expectedVersion: 5)),
                    Self.job(SampleEvents.purchase(subscriber: "k", key: "k2"), SampleEvents.purchase(subscriber: "l", key: "l1")),
                ], database: store.database, memory: store.memory)
            #expect((try? outcomes[0].get())?.events.map(\.version) == [1])
            #expect(throws: PSQLError.self) { try outcomes[1].get() }
            #expect(throws: StoreError.idempotencyConflict(source: "web", key: "j0", index: nil)) { try outcomes[2].get() }
            #expect(throws: StoreError.versionConflict(subscriberID: "j", expected: 5, actual: 1, index: nil)) { try outcomes[3].get() }
            #expect((try? outcomes[4].get())?.events.map(\.version) == [2, 1])
            let feed = try await store.feed(afterPosition: 0, limit: 100)
            #expect(feed.map(\.idempotencyKey) == ["j0", "k1", "k2", "l1"])
            #expect(feed.map(\.position) == [1, 2, 3, 4])
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
        }
    }

    @Test("a merged subscriber is refused in the append itself: stored or merged earlier in the same group, the job fails alone")
    func mergedSubscriberFailsAlone() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let merge = { (s: String, key: String) in
                SampleEvents.event(subscriber: s, type: "merged", key: key, occurredAt: "2026-03-02T10:00:00Z", data: ["into": "n-into"])
            }
            _ = try await store.append([SampleEvents.purchase(subscriber: "m-old", key: "mo1"), merge("m-old", "mo-merge")])
            var refusing = Self.job(SampleEvents.purchase(subscriber: "m-old", key: "mo2"))
            refusing.refusesMerged = true
            var refusingLater = Self.job(SampleEvents.purchase(subscriber: "m-new", key: "mn2"))
            refusingLater.refusesMerged = true
            // On the one-trip rung (this store remembers the streams it wrote) and, after the belief is forgotten,
            // on the general rung reading the streams under the lock.
            for forget in [false, true] {
                if forget { store.memory.forget() }
                let suffix = forget ? "-g" : ""
                var first = refusing
                first.events[0].idempotencyKey += suffix
                var later = refusingLater
                later.events[0].idempotencyKey += suffix
                let outcomes = await EventStore.commit(
                    [
                        first, Self.job(SampleEvents.purchase(subscriber: "m-other", key: "mx\(suffix)")),
                        Self.job(merge("m-new", "mn-merge\(suffix)")), later,
                        Self.job(SampleEvents.purchase(subscriber: "m-old", key: "mo-unchecked\(suffix)")),
                    ], database: store.database, memory: store.memory)
                #expect(throws: StoreError.subscriberMerged(subscriber: "m-old", into: "n-into")) { try outcomes[0].get() }
                #expect((try? outcomes[1].get())?.createdCount == 1)
                #expect((try? outcomes[2].get())?.createdCount == 1)
                #expect(throws: StoreError.subscriberMerged(subscriber: "m-new", into: "n-into")) { try outcomes[3].get() }
                #expect((try? outcomes[4].get())?.createdCount == 1, "appends that do not ask are not refused (the identity workflow's own)")
            }
            let keys = try await store.feed(afterPosition: 0, limit: 100).map(\.idempotencyKey)
            #expect(!keys.contains("mo2") && !keys.contains("mn2") && !keys.contains("mo2-g") && !keys.contains("mn2-g"))
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
        }
    }

    @Test("idempotent replays inside a group: the same key twice is stored once; a different body conflicts")
    func replaysInsideGroup() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let outcomes = await EventStore.commit(
                [
                    Self.job(SampleEvents.purchase(subscriber: "m", key: "m1")),
                    Self.job(SampleEvents.purchase(subscriber: "m", key: "m1")),
                    Self.job(SampleEvents.purchase(subscriber: "m", key: "m1", price: 5)),
                    Self.job(SampleEvents.purchase(subscriber: "m", key: "m2"), SampleEvents.purchase(subscriber: "m", key: "m1")),
                ], database: store.database, memory: store.memory)
            let first = try outcomes[0].get()
            let replay = try outcomes[1].get()
            #expect(first.createdCount == 1)
            #expect(replay.isReplay)
            #expect(replay.events == first.events)
            #expect(throws: StoreError.idempotencyConflict(source: "web", key: "m1", index: nil)) { try outcomes[2].get() }
            let mixed = try outcomes[3].get()
            #expect(mixed.createdCount == 1)
            #expect(mixed.events[1] == first.events[0])
            #expect(try await store.feed(afterPosition: 0, limit: 100).map(\.idempotencyKey) == ["m1", "m2"])

            // Concurrently through the queue: each key stored once whatever the grouping.
            let results = try await store.running { _ in
                try await withThrowingTaskGroup(of: AppendResult.self) { group in
                    for i in 0..<40 {
                        group.addTask { try await store.append([SampleEvents.purchase(subscriber: "n", key: "n\(i / 2)")]) }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
            }
            #expect(results.filter { $0.createdCount == 1 }.count == 20)
            #expect(try await store.stream(subscriberID: "n", afterVersion: 0, limit: 100).count == 20)
        }
    }
}

/// The append engine as a service: a graceful shutdown in the middle of a burst.
@Suite("Group commit: shutdown")
struct GroupCommitShutdownTests {
    @Test("a graceful shutdown during a burst commits what was queued and in flight: every acknowledged append is stored, nothing else")
    func shutdownLosesNoAcknowledgedAppend() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(database: Database(client: client, logger: TestDatabase.logger), pipelineEvents: 1)
            let group = ServiceGroup(services: [store], gracefulShutdownSignals: [], logger: TestDatabase.logger)
            let outcomes = try await withThrowingTaskGroup(of: [String: Bool].self) { tasks in
                tasks.addTask {
                    try await group.run()
                    return [:]
                }
                while !store.committer.isRunning { try await Task.sleep(for: .milliseconds(1)) }
                let n = 300
                for i in 0..<n {
                    tasks.addTask {
                        let key = "burst-\(i)"
                        do {
                            _ = try await store.append([SampleEvents.purchase(subscriber: "b\(i % 9)", key: key)])
                            return [key: true]
                        } catch StoreError.unavailable {
                            return [key: false]
                        }
                    }
                    if i == n / 3 {
                        // Mid-burst: appends are queued and a group is in flight.
                        while store.groupCommitCounts.appends < 20 { try await Task.sleep(for: .milliseconds(1)) }
                        await group.triggerGracefulShutdown()
                    }
                }
                return try await tasks.reduce(into: [:]) { $0.merge($1) { a, _ in a } }
            }
            let acknowledged = Set(outcomes.filter(\.value).map(\.key))
            #expect(acknowledged.count >= 20)
            #expect(outcomes.count == 300)
            let stored = try await store.feed(afterPosition: 0, limit: 1000).map(\.idempotencyKey)
            #expect(Set(stored) == acknowledged, "refused appends are not stored, acknowledged ones all are")
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
            await #expect(throws: StoreError.self) { try await store.append([SampleEvents.purchase(subscriber: "late", key: "late")]) }
        }
    }
}

/// Which jobs a group takes (no database: the commit closure records the groups).
@Suite("Group commit: light jobs first within a weight budget")
struct GroupSelectionTests {
    static func heavy(_ key: String) -> AppendJob {
        var event = SampleEvents.purchase(subscriber: key, key: key)
        var data = event.data
        data["entitlements"] = .array((0..<64).map { .string("e\($0)") })
        event.data = data
        return AppendJob(events: [event], replays: .strict)
    }

    @Test("the next group is sent only once the one in flight says it was sent, and at most two are in flight")
    func pipeline() async throws {
        let inFlight = Mutex((now: 0, most: 0, started: 0))
        let open = Mutex((firstMaySend: false, gate: false))
        let committer = GroupCommitter(pipelineEvents: 1) { jobs, sent in
            let n = inFlight.withLock { s -> Int in
                s.now += 1
                s.most = max(s.most, s.now)
                s.started += 1
                return s.started
            }
            while n == 1, !open.withLock({ $0.firstMaySend }) { try? await Task.sleep(for: .milliseconds(2)) }
            sent()
            while !open.withLock({ $0.gate }) { try? await Task.sleep(for: .milliseconds(2)) }
            inFlight.withLock { $0.now -= 1 }
            return jobs.map { _ in .failure(CancellationError()) }
        }
        try await committer.running {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { _ = try? await committer.submit(Self.light("first")) }
                while inFlight.withLock({ $0.started }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
                for i in 0..<20 { group.addTask { _ = try? await committer.submit(Self.light("j\(i)")) } }
                try await Task.sleep(for: .milliseconds(100))
                #expect(inFlight.withLock { $0.started } == 1, "nothing is computed on top of a group not yet sent")
                open.withLock { $0.firstMaySend = true }
                while inFlight.withLock({ $0.started }) < 2 { try await Task.sleep(for: .milliseconds(5)) }
                try await Task.sleep(for: .milliseconds(100))
                #expect(inFlight.withLock { $0.started } == 2, "a third waits for a slot")
                open.withLock { $0.gate = true }
                try await group.waitForAll()
            }
        }
        #expect(inFlight.withLock { $0.most } == 2)
        #expect(committer.pipelined.groups >= 1)
        #expect(committer.counts.jobs == 21)
    }

    static func light(_ key: String) -> AppendJob {
        AppendJob(events: [SampleEvents.purchase(subscriber: key, key: key)], replays: .strict)
    }

    @Test("an ordinary append queued behind heavy ones goes into the next group, and no group exceeds the budget")
    func lightFirst() async throws {
        let recorded = Mutex<[[String]]>([])
        let gate = AsyncStream<Void>.makeStream()
        let committer = GroupCommitter(maxEvents: 2000, maxWeight: 200) { jobs, _ in
            recorded.withLock { $0.append(jobs.map { $0.events[0].idempotencyKey }) }
            if recorded.withLock({ $0.count }) == 1 { for await _ in gate.stream { break } }  // hold the first group
            return jobs.map { _ in .failure(CancellationError()) }
        }
        try await committer.running {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { _ = try? await committer.submit(Self.heavy("first")) }
                while recorded.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(5)) }
                for i in 0..<10 { group.addTask { _ = try? await committer.submit(Self.heavy("h\(i)")) } }
                try await Task.sleep(for: .milliseconds(100))
                group.addTask {
                    _ = try? await committer.submit(AppendJob(events: [SampleEvents.purchase(subscriber: "o", key: "ordinary")], replays: .strict))
                }
                try await Task.sleep(for: .milliseconds(100))
                gate.continuation.yield()
                gate.continuation.finish()
                try await group.waitForAll()
            }
        }
        let groups = recorded.withLock { $0 }
        #expect(groups.count >= 3)
        #expect(groups[1].contains("ordinary"), "groups: \(groups)")
        // 64 each: at most three heavy jobs fit a budget of 200 (with the light one beside them).
        #expect(groups.dropFirst().allSatisfy { $0.filter { $0 != "ordinary" }.count <= 3 })
        #expect(Set(groups.flatMap { $0 }).count == 12)
    }
}
