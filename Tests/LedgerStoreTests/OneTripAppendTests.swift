import Foundation
import LedgerCore
import LedgerTestSupport
import PostgresNIO
import Testing

@testable import LedgerStore

/// Appends in one round trip (`AppendMemory`, `subledger_append`): the server's belief about the log is
/// checked by the database under the lock, and a wrong belief costs a detour, never a wrong row.
@Suite("One-trip appends")
struct OneTripAppendTests {
    @Test("after the first append, appends go in one trip, and what they store equals a rebuild's fold")
    func oneTripAfterFirst() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let events = GeneratedLedger.events(seed: 23, subscribers: 20, eventsPerSubscriber: 1...12)
            for event in events { _ = try await store.append([event]) }
            let tally = store.oneTripCounts
            #expect(tally.oneTrip == events.count - 1, "only the first append has no belief to use")
            #expect(tally.refused == 0)
            let feed = try await store.feed(afterPosition: 0, limit: 1000)
            #expect(feed.map(\.position) == Array(1...Int64(events.count)))
            try await Self.expectSound(feed, client)
        }
    }

    @Test("another process's append makes the belief wrong: refused, then the general path, versions still right")
    func otherProcessAppends() async throws {
        try await TestDatabase.with { client, _ in
            let mine = EventStore(client: client, logger: TestDatabase.logger)
            let theirs = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await mine.append([SampleEvents.purchase(subscriber: "a", key: "a1")])
            _ = try await mine.append([SampleEvents.autoRenewOff(subscriber: "a", key: "a2", expectedVersion: 1)])
            // The other process extends the stream this one remembers.
            _ = try await theirs.append([SampleEvents.purchase(subscriber: "a", key: "a3")])
            let next = try await mine.append([SampleEvents.purchase(subscriber: "a", key: "a4")])
            #expect(next.events.map(\.version) == [4])
            #expect(next.events.map(\.position) == [4])
            #expect(mine.oneTripCounts.refused == 1)
            // An expected version the stale belief would have refused is checked against the truth.
            let stale = try await mine.append([SampleEvents.autoRenewOff(subscriber: "a", key: "a5", expectedVersion: 4)])
            #expect(stale.events.map(\.version) == [5])
            await #expect(throws: StoreError.versionConflict(subscriberID: "a", expected: 2, actual: 5, index: nil)) {
                try await mine.append([SampleEvents.autoRenewOff(subscriber: "a", key: "a6", expectedVersion: 2)])
            }
            // A retry of an append already stored is an idempotent replay on the one-trip path too.
            let replay = try await mine.append([SampleEvents.purchase(subscriber: "a", key: "a4")])
            #expect(replay.isReplay)
            #expect(replay.events == next.events)
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
        }
    }

    @Test("a stream the server does not remember is read first and folded whole")
    func unrememberedStreams() async throws {
        try await TestDatabase.with { client, _ in
            let seeded = EventStore(client: client, logger: TestDatabase.logger)
            for i in 1...3 { _ = try await seeded.append([SampleEvents.purchase(subscriber: "old", key: "old\(i)")]) }
            let store = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await store.append([SampleEvents.purchase(subscriber: "x", key: "x1")])
            let appended = try await store.append([SampleEvents.purchase(subscriber: "old", key: "old4")])
            #expect(appended.events.map(\.version) == [4])
            #expect(store.oneTripCounts.oneTrip == 1)
            let windows = try await client.query("SELECT count(*) FROM windows WHERE subscriber_id = 'old'", logger: TestDatabase.logger)
                .collect().first!.decode(Int64.self)
            #expect(windows == 4, "the projection is folded from the whole stream, not from the new event alone")
        }
    }

    @Test("two processes appending at once to the same streams: every event once, gapless, chains and projection right")
    func concurrentProcesses() async throws {
        try await TestDatabase.with { client, _ in
            let stores = [EventStore(client: client, logger: TestDatabase.logger), EventStore(client: client, logger: TestDatabase.logger)]
            let n = 120
            try await stores[0].running { _ in
                try await stores[1].running { _ in
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        for i in 0..<n {
                            group.addTask {
                                _ = try await stores[i % 2].append([SampleEvents.purchase(subscriber: "c\(i % 5)", key: "c\(i)")])
                            }
                        }
                        try await group.waitForAll()
                    }
                }
            }
            let feed = try await stores[0].feed(afterPosition: 0, limit: 1000)
            #expect(feed.map(\.position) == Array(1...Int64(n)))
            #expect(Set(feed.map(\.idempotencyKey)).count == n)
            for s in 0..<5 {
                #expect(feed.filter { $0.subscriberID == "c\(s)" }.map(\.version) == Array(1...Int64(n / 5)))
            }
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
            let appended = try await RebuildTests.projection(client)
            try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
            #expect(try await RebuildTests.projection(client) == appended)
        }
    }

    @Test(
        "groups in flight together: every event once, gapless, chains and projection right, also when another process makes the beliefs under them wrong"
    )
    func pipelinedGroups() async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let pipelined = EventStore(database: database, pipelineEvents: 1)
            let other = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await pipelined.append([SampleEvents.purchase(subscriber: "p0", key: "first")])
            let n = 240
            try await pipelined.running { _ in
                try await other.running { _ in
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        for i in 0..<n {
                            group.addTask {
                                // One in twelve from the other process: the pipelined store's beliefs keep failing under it.
                                let store = i % 12 == 0 ? other : pipelined
                                _ = try await store.append([SampleEvents.purchase(subscriber: "p\(i % 7)", key: "p\(i)")])
                            }
                        }
                        try await group.waitForAll()
                    }
                }
            }
            #expect(pipelined.pipelineCounts.groups > 0, "some group was sent while another was in flight")
            #expect(pipelined.pipelineCounts.mostInFlight == 2)
            let feed = try await pipelined.feed(afterPosition: 0, limit: 1000)
            #expect(feed.map(\.position) == Array(1...Int64(n + 1)))
            #expect(Set(feed.map(\.idempotencyKey)).count == n + 1)
            for s in 0..<7 {
                let versions = feed.filter { $0.subscriberID == "p\(s)" }.map(\.version)
                #expect(versions == Array(1...Int64(versions.count)))
            }
            try await Self.expectSound(feed, client)
        }
    }

    /// Recorded times never go back along positions, the chains verify, and a rebuild's fold equals what the
    /// appends wrote.
    static func expectSound(_ feed: [RecordedEvent], _ client: PostgresClient) async throws {
        #expect(zip(feed, feed.dropFirst()).allSatisfy { $0.recordedAt <= $1.recordedAt })
        #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
        let appended = try await RebuildTests.projection(client)
        try await Rebuilder(client: client, logger: TestDatabase.logger).rebuild()
        #expect(try await RebuildTests.projection(client) == appended)
    }

    @Test("a group sent but not answered is believed; answers learnt out of order keep the newer state; a refusal drops it")
    func pendingBelief() {
        let memory = AppendMemory()
        let a1 = Self.recorded("a", version: 1, position: 1)
        let a2 = Self.recorded("a", version: 2, position: 2)
        let b1 = Self.recorded("b", version: 1, position: 3)
        memory.learn(end: .init(position: 1, recordedAt: .minimum), streams: ["a": [a1]], oneTrip: false)
        memory.propose(end: .init(position: 2, recordedAt: .minimum), streams: ["a": [a1, a2]])
        memory.propose(end: .init(position: 3, recordedAt: .minimum), streams: ["b": [b1]])
        var belief = memory.belief(for: ["a", "b"])!
        #expect(belief.end.position == 3)
        #expect(belief.streams["a"]?.count == 2)
        #expect(belief.streams["b"]?.count == 1)
        // The later group's answer first, then the earlier one's: the newer end and streams stay.
        memory.learn(end: .init(position: 3, recordedAt: .minimum), streams: ["b": [b1]], oneTrip: true)
        memory.learn(end: .init(position: 2, recordedAt: .minimum), streams: ["a": [a1, a2]], oneTrip: true)
        belief = memory.belief(for: ["a", "b"])!
        #expect(belief.end.position == 3)
        #expect(belief.streams["a"]?.count == 2)
        #expect(belief.streams["b"]?.count == 1)
        // A stale answer never shortens a stream.
        memory.learn(end: .init(position: 1, recordedAt: .minimum), streams: ["a": [a1]], oneTrip: false)
        #expect(memory.belief(for: ["a"])!.streams["a"]?.count == 2)
        memory.propose(end: .init(position: 4, recordedAt: .minimum), streams: ["a": [a1, a2]])
        memory.refused()
        #expect(memory.belief(for: ["a"]) == nil, "a refusal forgets the pending belief with the rest")
    }

    @Test("a kept fold stands for the previous stream only when it is that stream's fold (same last version and hash)")
    func keptFolds() {
        let (k1, k2) = (Self.recorded("k", version: 1, position: 1), Self.recorded("k", version: 2, position: 2))
        let other = ProjectionWriter.fold(
            ["o": [Self.recorded("o", version: 1, position: 3), Self.recorded("o", version: 2, position: 4)]], previous: [:])[0]
        #expect(other.ledger.windows.count == 2)
        // Another stream's fold, labelled as k's first event's: taken as is, not folded again.
        let kept = ProjectionWriter.Previous(ledger: other.ledger, facts: other.facts, version: 1, hash: k1.hash)
        let used = ProjectionWriter.fold(["k": [k1, k2]], previous: ["k": [k1]], known: ["k": kept])[0]
        #expect(used.previous?.ledger.windows.count == 2)
        // A kept fold of another head is ignored.
        var stale = kept
        stale.hash = [UInt8](repeating: 7, count: 32)
        let refolded = ProjectionWriter.fold(["k": [k1, k2]], previous: ["k": [k1]], known: ["k": stale])[0]
        #expect(refolded.previous?.ledger.windows.count == 1)
        #expect(refolded.asPrevious.version == 2)
        #expect(refolded.asPrevious.hash == k2.hash)
    }

    @Test("a group of many subscribers is folded in shares across cores, to the same folds as one pass")
    func parallelFold() async throws {
        var streams: [String: [StreamEvent]] = [:]
        var versions: [String: Int64] = [:]
        for (i, e) in GeneratedLedger.events(seed: 11, subscribers: 200, eventsPerSubscriber: 1...6).enumerated() {
            let version = versions[e.subscriberID, default: 0] + 1
            versions[e.subscriberID] = version
            let recorded = RecordedEvent(
                eventID: UUID(), subscriberID: e.subscriberID, version: version, position: Int64(i + 1), type: e.type,
                occurredAt: e.occurredAt, recordedAt: e.occurredAt, source: e.source, environment: e.environment,
                idempotencyKey: e.idempotencyKey, data: e.data, metadata: e.metadata, prevHash: RecordedEvent.genesisHash)
            streams[e.subscriberID, default: []].append(StreamEvent(recorded))
        }
        let previous = streams.compactMapValues { $0.count > 1 ? Array($0.dropLast()) : nil }
        #expect(streams.count >= 2 * AppendWriter.parallelFoldMinimum)
        let shared = try await AppendWriter.fold(streams, previous: previous)
        let single = ProjectionWriter.fold(streams, previous: previous)
        func key(_ f: [ProjectionWriter.Folded]) -> [String: [AnyHashable]] {
            Dictionary(
                uniqueKeysWithValues: f.map { ($0.subscriber, [$0.version, $0.ledger, $0.facts, $0.previous?.facts] as [AnyHashable]) })
        }
        #expect(shared.count == streams.count)
        #expect(key(shared) == key(single))
        // The rows encoded in shares and merged are the rows of one pass: the subscriber's own tables (the
        // report facts and cells are the rollup worker's).
        let (folded, rows) = try await AppendWriter.foldAndEncode(streams, previous: previous, known: [:])
        let one = ProjectionJSONRows(folded, patched: true, parts: .subscriber)
        #expect(rows.rollupText == nil && rows.text(.reportTransactions) == "[]")
        for table in ProjectionTable.allCases {
            let (a, b) = (try JSONParser.parse(rows.text(table)), try JSONParser.parse(one.text(table)))
            #expect(Set(a.arrayValue ?? []) == Set(b.arrayValue ?? []), "\(table.name)")
            #expect(a.arrayValue?.count == b.arrayValue?.count)
        }
        func cells(_ text: String) throws -> [String: Set<JSONValue>] {
            try (JSONParser.parse(text).objectValue ?? [:]).mapValues { Set($0.arrayValue ?? []) }
        }
        #expect(try cells(rows.rollupText ?? "{}") == cells(one.rollupText ?? "{}"))
        #expect(try cells(rows.deletionsText) == cells(one.deletionsText))
        #expect(try !cells(rows.deletionsText).values.allSatisfy(\.isEmpty), "some stored rows are replaced")
    }

    static func recorded(_ subscriber: String, version: Int64, position: Int64) -> StreamEvent {
        let e = SampleEvents.purchase(subscriber: subscriber, key: "\(subscriber)\(version)")
        return StreamEvent(
            RecordedEvent(
                eventID: UUID(), subscriberID: subscriber, version: version, position: position, type: e.type,
                occurredAt: e.occurredAt, recordedAt: e.occurredAt, source: e.source, environment: e.environment,
                idempotencyKey: e.idempotencyKey, data: e.data, metadata: e.metadata, prevHash: RecordedEvent.genesisHash))
    }

    @Test("an append writes only the projection rows that changed: earlier windows and transactions are not rewritten")
    func patchedRows() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            func purchase(_ day: Int) -> NewEvent {
                SampleEvents.purchase(subscriber: "long", key: "long\(day)", occurredAt: "2026-03-0\(day)T10:00:00Z")
            }
            func rows() async throws -> (windows: [String], transactions: [String]) {
                // The report facts are the rollup worker's, which patches them the same way.
                try await ReportRollupWorker.catchUpIfBehind(Database(client: client, logger: TestDatabase.logger))
                let windows = try await client.query(
                    "SELECT seq::text || '@' || xmin::text FROM windows WHERE subscriber_id = 'long' ORDER BY seq", logger: TestDatabase.logger
                ).collect().map { try $0.decode(String.self) }
                let transactions = try await client.query(
                    "SELECT start_us::text || '@' || xmin::text FROM report_transactions WHERE subscriber_id = 'long' ORDER BY start_us",
                    logger: TestDatabase.logger
                ).collect().map { try $0.decode(String.self) }
                return (windows, transactions)
            }
            for day in 1...6 { _ = try await store.append([purchase(day)]) }
            let before = try await rows()
            _ = try await store.append([purchase(7)])
            let after = try await rows()
            #expect(store.oneTripCounts.oneTrip == 6)
            #expect(after.windows.count == 7)
            #expect(Array(after.windows.prefix(6)) == before.windows, "the six earlier windows are the rows written before")
            #expect(Array(after.transactions.prefix(6)) == before.transactions)
            #expect(after.transactions.count == 7)
            // A late purchase (an earlier start) moves the windows after it: those are replaced, and the
            // projection still equals a rebuild's.
            _ = try await store.append([SampleEvents.purchase(subscriber: "long", key: "late", occurredAt: "2026-02-20T10:00:00Z")])
            #expect(try await rows().windows.count == 8)
            // A projection that is not the fold of the believed stream (as an import leaves it until its
            // rebuild) refuses the belief: the general path rewrites the subscriber whole.
            try await client.query("UPDATE subscriber_state SET version = 1 WHERE subscriber_id = 'long'", logger: TestDatabase.logger)
            try await client.query("DELETE FROM windows WHERE subscriber_id = 'long' AND seq = 0", logger: TestDatabase.logger)
            _ = try await store.append([purchase(8)])
            #expect(store.oneTripCounts.refused == 1)
            #expect(try await rows().windows.count == 9)
            let feed = try await store.feed(afterPosition: 0, limit: 100)
            try await Self.expectSound(feed, client)
        }
    }

    @Test("the memory stays within its budget of events")
    func memoryBounded() {
        let memory = AppendMemory(maxEvents: 10)
        let events = GeneratedLedger.events(seed: 5, subscribers: 8, eventsPerSubscriber: 3...3)
        let streams = Dictionary(
            grouping: events.enumerated().map { i, e in
                StreamEvent(
                    RecordedEvent(
                        eventID: UUID(), subscriberID: e.subscriberID, version: 1, position: Int64(i + 1), type: e.type,
                        occurredAt: e.occurredAt, recordedAt: e.occurredAt, source: e.source, environment: e.environment,
                        idempotencyKey: e.idempotencyKey, data: e.data, metadata: e.metadata, prevHash: RecordedEvent.genesisHash))
            }, by: \.subscriberID)
        memory.learn(end: .init(position: 24, recordedAt: .minimum), streams: streams, oneTrip: false)
        let held = memory.belief(for: Set(streams.keys))!.streams
        #expect(held.values.reduce(0) { $0 + $1.count } <= 10)
        #expect(!held.isEmpty)
    }

    @Test("the memory evicts the streams learnt longest ago, and learning a stream again keeps it")
    func memoryEvictsOldest() {
        let memory = AppendMemory(maxEvents: 30)
        func stream(_ subscriber: String) -> [StreamEvent] {
            let e = GeneratedLedger.events(seed: 9, subscribers: 1, eventsPerSubscriber: 1...1)[0]
            return [
                StreamEvent(
                    RecordedEvent(
                        eventID: UUID(), subscriberID: subscriber, version: 1, position: 1, type: e.type, occurredAt: e.occurredAt,
                        recordedAt: e.occurredAt, source: e.source, environment: e.environment, idempotencyKey: e.idempotencyKey,
                        data: e.data, metadata: e.metadata, prevHash: RecordedEvent.genesisHash))
            ]
        }
        // Thousands of learns through a budget of 30 one-event streams; "kept" is learnt again every round.
        for round in 0..<5_000 {
            let end = AppendWriter.LogEnd(position: Int64(round + 1), recordedAt: .minimum)
            memory.learn(end: end, streams: ["s\(round)": stream("s\(round)"), "kept": stream("kept")], oneTrip: true)
        }
        let asked = Set((4_960..<5_000).map { "s\($0)" } + ["kept"])
        let held = memory.belief(for: asked)!.streams
        #expect(held.count == 30)
        #expect(held["kept"] != nil)
        #expect(Set(held.keys) == Set((4_971..<5_000).map { "s\($0)" } + ["kept"]))
        #expect(memory.belief(for: ["s0", "s4000"])!.streams.isEmpty)
    }
}
