import Foundation
import LedgerCore
import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle

/// What an append did: the events in request order, and how many of them are new.
public struct AppendResult: Sendable {
    public var events: [RecordedEvent]
    public var createdCount: Int

    /// Every event was already stored under its idempotency key: an idempotent replay.
    public var isReplay: Bool { createdCount == 0 }
}

/// The append-only event store on PostgreSQL.
///
/// Appends are serialized by one transaction-scoped advisory lock taken before positions are assigned, so
/// positions are gapless and commit in order: a reader that has seen position `p` has seen everything
/// below it. The lock is released only after the commit is visible (PostgreSQL ends the transaction in the
/// proc array before releasing its locks), which is what makes the feed gap-safe.
/// See docs/event-store.md for the choice and its cost.
///
/// A `Service`: its `run()` is the append engine's loop (`GroupCommitter`), which the server runs in its
/// ServiceGroup and a one-shot command around its work (`running`). Without it, a lone append still commits
/// in its caller's task; an append that would wait behind another fails (`GroupCommitter.NotRunning`).
public struct EventStore: Service {
    /// The key of the advisory lock every append (API, import) holds while it assigns positions.
    public static let appendLockKey: Int64 = 0x5355_424C_4150_5044

    /// Told which subscribers an append touched, each with the highest position it stored for them (0 when
    /// the outcome is unknown), once its transaction has ended (committed or not, since an outage can leave
    /// the outcome unknown) and before its caller hears of it.
    public typealias CommitObserver = @Sendable ([String: Int64]) -> Void

    let database: Database
    let committer: GroupCommitter
    let memory: AppendMemory
    let onCommit: CommitObserver
    /// `recorded_at` of the appends a transaction makes (`transaction`); the group committer holds its own copy.
    let clock: WallClock
    /// Store messages' transactions that arriving messages may join (`sharedTransaction`).
    let sharing = SharedTransactions()
    public var logger: Logger { database.logger }

    /// `onCommit` lets in-memory readers (`LedgerCache`) forget what an append changed before it answers;
    /// `clock` gives one-trip appends their `recorded_at` (never before the log's last, as the database checks).
    public init(database: Database, clock: WallClock = .system, onCommit: @escaping CommitObserver = { _ in }) {
        self.init(database: database, pipelineEvents: 16, clock: clock, onCommit: onCommit)
    }

    /// `pipelineEvents`: how many events must wait before a group is sent behind one in flight (tests set 1).
    init(database: Database, pipelineEvents: Int, clock: WallClock = .system, onCommit: @escaping CommitObserver = { _ in }) {
        self.database = database
        self.onCommit = onCommit
        self.clock = clock
        let memory = AppendMemory()
        self.memory = memory
        self.committer = GroupCommitter(pipelineEvents: pipelineEvents) { jobs, sent in
            let outcomes = await Self.commit(jobs, database: database, memory: memory, clock: clock, sent: sent)
            var changes: [String: Int64] = [:]
            for (job, outcome) in zip(jobs, outcomes) {
                if case .success(let result) = outcome {
                    for e in result.events { changes[e.subscriberID] = max(changes[e.subscriberID] ?? 0, e.position) }
                }
                for e in job.events where changes[e.subscriberID] == nil { changes[e.subscriberID] = 0 }
            }
            onCommit(changes)
            return outcomes
        }
    }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    /// The append engine's loop: commits the groups that waiting appends form until a graceful shutdown has
    /// drained them and the groups in flight, or until cancelled. Runs once per store.
    public func run() async throws {
        try await committer.run()
    }

    /// Runs `body` with the append engine running, and stops it after (one-shot commands and tests, which have
    /// no ServiceGroup). Everything `body` awaited has its outcome by then.
    public func running<T>(_ body: (EventStore) async throws -> T) async throws -> T {
        try await committer.running { try await body(self) }
    }

    /// Appends all events or none. Events whose (`source`, `idempotency_key`) is already stored with the
    /// same fingerprint are returned as stored; a different fingerprint is a conflict.
    ///
    /// Concurrent appends are committed together (`GroupCommitter`), each keeping its own all-or-nothing
    /// outcome. The common case (all keys new) does not look the keys up first: BEGIN, lock, one read of
    /// stream heads and the last position, one INSERT, the projection's refold, COMMIT. Only when the
    /// unique index reports a reused key, or a version check fails (which may be the retry of an append
    /// that already succeeded), is the group redone comparing with what is stored.
    /// `refusingMerged`: fail with `StoreError.subscriberMerged` when a subscriber of the events was merged.
    public func append(_ events: [NewEvent], replays: ReplayPolicy = .strict, refusingMerged: Bool = false) async throws -> AppendResult {
        precondition(!events.isEmpty, "append needs at least one event")
        return try await committer.submit(AppendJob(events: events, replays: replays, refusesMerged: refusingMerged))
    }

    /// What an already-used idempotency key with a different fingerprint means.
    public enum ReplayPolicy: Sendable {
        /// A conflict (409): the API's contract for clients that send their own events.
        case strict
        /// The stored event stands: store adapters learn the same fact from several payloads (a notification
        /// and a receipt) that differ in their raw metadata.
        case keepStored
    }

    /// How many transactions have committed how many appends through this store (group commit at work).
    public var groupCommitCounts: (transactions: Int, appends: Int) {
        let (groups, jobs) = committer.counts
        return (groups, jobs)
    }

    /// Groups sent while another was in flight, and the most in flight at once.
    var pipelineCounts: (groups: Int, mostInFlight: Int) { committer.pipelined }

    /// How many groups went in one round trip, and how often the database refused this process's belief
    /// about the log (another process had appended) so that the group took the general path.
    public var oneTripCounts: (oneTrip: Int, refused: Int) { memory.tally }

    /// Appends one batch of a bulk import: same validation of keys and versions, same positions and hash
    /// chain, but rows go in with COPY and the projections are left to a rebuild after the import.
    /// All or nothing, like any append.
    public func importBatch(_ events: [NewEvent], replays: ReplayPolicy = .strict) async throws -> AppendResult {
        precondition(!events.isEmpty, "an import batch needs at least one event")
        let writer = AppendWriter(logger: logger)
        defer { onCommit(Dictionary(events.map { ($0.subscriberID, Int64(0)) }, uniquingKeysWith: { a, _ in a })) }
        memory.forget()
        return try await StoreError.mapping {
            try await database.transaction { connection in
                try await writer.append([AppendJob(events: events, replays: replays)], lookUpKeys: true, bulk: true, on: connection)
                    .outcomes[0]
            }.get()
        }
    }

    /// Commits a group of appends in one transaction, each with its own outcome, down the ladder of
    /// `CommitRung`: first in one round trip from what this process believes (`AppendMemory`), when it
    /// believes anything; otherwise, or when the database refuses the belief, the general way (a transaction
    /// that reads the tail under the lock), looking keys up when one was reused. A conflict fails only its own
    /// job (`AppendWriter`). Any other statement error rolls the group back, so the jobs are then committed
    /// one by one, and only the job that causes it fails. An outage fails every job of the group at once:
    /// their outcome is unknown to the caller, who retries with the same idempotency keys. `sent` is called
    /// once the group is sent in one round trip and `memory` holds what it believes the group leaves, so
    /// that the next group can be computed.
    static func commit(
        _ jobs: [AppendJob], database: Database, memory: AppendMemory, clock: WallClock = .system,
        sent: @escaping @Sendable () -> Void = {}
    ) async -> [Result<AppendResult, any Error>] {
        let writer = AppendWriter(logger: database.logger)
        var rung = CommitRung.oneTrip
        while true {
            let outcome: CommitRung.Outcome
            var failure: any Error = StoreError.unavailable("no outcome")
            do {
                switch rung {
                case .oneTrip:
                    let trip = try await StoreError.mapping {
                        try await oneTrip(jobs, writer: writer, database: database, memory: memory, clock: clock, sent: sent)
                    }
                    guard case .refused = trip else { return trip.outcomes.map { $0.mapError { $0 as any Error } } }
                    outcome = .refused
                case .general, .keyLookup:
                    let lookUpKeys = rung == .keyLookup
                    let outcomes = try await StoreError.mapping {
                        try await general(jobs, lookUpKeys: lookUpKeys, writer: writer, database: database, memory: memory)
                    }
                    return outcomes.map { $0.mapError { $0 as any Error } }
                case .oneByOne:
                    var outcomes: [Result<AppendResult, any Error>] = []
                    for job in jobs { outcomes += await commit([job], database: database, memory: memory, clock: clock) }
                    return outcomes
                }
            } catch {
                outcome = CommitRung.Outcome(error)
                failure = (error as? AppendWriter.StreamTooLarge)?.validationError ?? error
            }
            let step = CommitRung.step(after: rung, outcome, jobs: jobs.count)
            if step.forgetsBelief { memory.forget() }
            guard let next = step.next else { return Array(repeating: .failure(failure), count: jobs.count) }
            rung = next
        }
    }

    private enum OneTrip {
        case written([Result<AppendResult, StoreError>])
        /// Nothing believed, or the database refused the belief: the general way, keys not looked up.
        case refused

        var outcomes: [Result<AppendResult, StoreError>] {
            guard case .written(let outcomes) = self else { return [] }
            return outcomes
        }
    }

    /// The group in one round trip, when this process believes where the log ends. Streams it does not
    /// remember are read first (outside the lock; the database checks their heads under it).
    private static func oneTrip(
        _ jobs: [AppendJob], writer: AppendWriter, database: Database, memory: AppendMemory, clock: WallClock,
        sent: @escaping @Sendable () -> Void
    ) async throws -> OneTrip {
        let subscribers = Set(jobs.flatMap { $0.events.map(\.subscriberID) })
        guard let belief = memory.belief(for: subscribers) else { return .refused }
        let logger = database.logger
        // One lease for the read of unremembered streams and the append.
        let written = try await database.withConnection { connection -> AppendWriter.Written? in
            var streams = belief.streams
            let missing = subscribers.subtracting(streams.keys)
            if !missing.isEmpty {
                let read =
                    if missing.count == 1, let subscriber = missing.first {
                        try await AppendStatements.streams(AppendStatements.Stream(subscriber: subscriber), on: connection, logger: logger)
                    } else {
                        try await AppendStatements.streams(AppendStatements.Streams(subscribers: Array(missing)), on: connection, logger: logger)
                    }
                for subscriber in missing { streams[subscriber] = read[subscriber] ?? [] }
            }
            // The recorded time: this server's clock, never before the log's last event's (the database checks).
            return try await writer.appendInOneTrip(
                jobs, end: belief.end, streams: streams, folds: belief.folds, now: clock.now(), on: connection
            ) {
                memory.propose(end: $0, streams: $1, folds: $2)
                sent()
            }
        }
        guard let written else {
            memory.refused()
            return .refused
        }
        memory.learn(end: written.end, streams: written.streams, folds: written.folds, oneTrip: true)
        return .written(written.outcomes)
    }

    /// The group in a transaction that reads the tail under the lock; teaches `memory` what it committed.
    private static func general(
        _ jobs: [AppendJob], lookUpKeys: Bool, writer: AppendWriter, database: Database, memory: AppendMemory
    ) async throws -> [Result<AppendResult, StoreError>] {
        let written = try await database.transaction { try await writer.append(jobs, lookUpKeys: lookUpKeys, on: $0) }
        memory.learn(end: written.end, streams: written.streams, oneTrip: false)
        return written.outcomes
    }

    /// One subscriber's stream, oldest first, after `version` (paged by version).
    public func stream(subscriberID: String, afterVersion: Int64, limit: Int, on source: Database? = nil) async throws -> [RecordedEvent] {
        try await StoreError.mapping {
            try await collect(
                on: source,
                """
                SELECT \(unescaped: EventRow.columns) FROM events
                WHERE subscriber_id = \(subscriberID) AND version > \(afterVersion) ORDER BY version LIMIT \(Int64(limit))
                """)
        }
    }

    /// The event a source stored under an idempotency key, if any (a store adapter reading back the fact it
    /// recorded for a store id, e.g. a transaction's paid period).
    public func event(source: String, idempotencyKey: String, on database: Database? = nil) async throws -> RecordedEvent? {
        try await StoreError.mapping {
            try await collect(
                on: database,
                """
                SELECT \(unescaped: EventRow.columns) FROM events WHERE source = \(source) AND idempotency_key = \(idempotencyKey)
                """
            ).first
        }
    }

    /// The global feed in position order. Gap-safe: positions are assigned and committed in order (see the type's doc).
    public func feed(afterPosition: Int64, limit: Int, on source: Database? = nil) async throws -> [RecordedEvent] {
        try await StoreError.mapping {
            try await collect(
                on: source,
                """
                SELECT \(unescaped: EventRow.columns) FROM events
                WHERE position > \(afterPosition) ORDER BY position LIMIT \(Int64(limit))
                """)
        }
    }

    /// A page of the feed restricted to events recorded in `[from, to)` (either bound optional), for exports.
    public func feed(
        afterPosition: Int64, limit: Int, recordedFrom: Timestamp?, recordedTo: Timestamp?, on source: Database? = nil
    ) async throws -> [RecordedEvent] {
        let from = recordedFrom ?? .minimum
        let to = recordedTo ?? .maximum
        return try await StoreError.mapping {
            try await collect(
                on: source,
                """
                SELECT \(unescaped: EventRow.columns) FROM events
                WHERE position > \(afterPosition) AND recorded_at >= \(from) AND recorded_at < \(to)
                ORDER BY position LIMIT \(Int64(limit))
                """)
        }
    }

    private func collect(on source: Database?, _ query: PostgresQuery) async throws -> [RecordedEvent] {
        let logger = self.logger
        return try await (source ?? database).withConnection { connection in
            var out: [RecordedEvent] = []
            for try await row in try await connection.query(query, logger: logger) {
                out.append(try EventRow.decode(row))
            }
            return out
        }
    }
}
