import Foundation
import LedgerCore
import Logging
import NIOCore
import PostgresNIO

/// One caller's append: its events (all or nothing) and how it treats a reused idempotency key.
struct AppendJob: Sendable {
    var events: [NewEvent]
    var replays: EventStore.ReplayPolicy
    /// Refuse the job when one of its subscribers was merged (`StoreError.subscriberMerged`): checked against the
    /// streams the append holds (under the lock, or believed and verified by the one-trip statement), so the
    /// check costs no query and no merge can slip in between.
    var refusesMerged = false
}

/// The append transaction's body for a group of jobs: under the append lock, each job is checked in arrival
/// order against the stored streams and the jobs before it, as if they had run one after another.
///
/// A job that conflicts fails alone (its outcome is the error) and takes none of its events into the group;
/// the others are written in one multi-row INSERT (or COPY for imports) and the touched subscribers'
/// projections are refolded once for the whole group.
struct AppendWriter {
    let logger: Logger

    /// Thrown on the fast path (keys not looked up) when a version check fails: that may be the retry of an
    /// append that already succeeded, which only a look-up of the keys can tell.
    struct NeedsKeyLookup: Error {}

    /// An append would take a subscriber's stream past `Limits.maxEventsPerSubscriber` events or
    /// `Limits.maxWindowsPerSubscriber` windows; the group is retried job by job so that only that job fails.
    struct StreamTooLarge: Error {
        var subscriberID: String
        var events: Int
        var windows: Int

        var validationError: EventValidationError {
            EventValidationError(
                field: "subscriber_id",
                reason:
                    "the stream of \"\(subscriberID)\" would hold \(events) events and \(windows) windows; a subscriber holds at most \(Limits.maxEventsPerSubscriber) events and \(Limits.maxWindowsPerSubscriber) windows"
            )
        }
    }

    /// What a group's transaction did: each job's outcome, and where it leaves the log's end and the
    /// touched streams (whole, when the append read them), for `AppendMemory` once the commit is known.
    struct Written: Sendable {
        var outcomes: [Result<AppendResult, StoreError>]
        var end: LogEnd
        var streams: [String: [StreamEvent]]
        /// The touched streams' new folds (one-trip appends), kept for the next append's previous fold.
        var folds: [String: ProjectionWriter.Previous] = [:]
    }

    func append(
        _ jobs: [AppendJob], lookUpKeys: Bool, bulk: Bool = false, on connection: PostgresConnection
    ) async throws -> Written {
        try await connection.query("SELECT pg_advisory_xact_lock(\(EventStore.appendLockKey))", logger: logger)
        let all = jobs.flatMap(\.events)
        let stored = lookUpKeys ? try await storedByIdempotencyKey(all, on: connection) : [:]
        let subscribers = Set(all.map(\.subscriberID))
        // Imports leave the projection to a rebuild: heads suffice. Appends read the touched streams whole,
        // with the tail, so the projection is folded from them plus the new rows without reading again.
        var (heads, lastPosition, recordedAt) = ([String: StreamHead](), Int64(0), Timestamp(microseconds: 0))
        var streams: [String: [StreamEvent]] = [:]
        if bulk {
            (heads, lastPosition, recordedAt) = try await tail(subscribers, on: connection)
        } else {
            (streams, lastPosition, recordedAt) = try await tailWithStreams(subscribers, on: connection)
            for (subscriber, events) in streams {
                heads[subscriber] = StreamHead(version: events.last!.version, hash: events.last!.hash)
            }
        }

        var group = GroupState(heads: heads, position: lastPosition, recordedAt: recordedAt, stored: stored, merged: Self.merged(streams, for: jobs))
        let outcomes = try group.take(jobs, lookUpKeys: lookUpKeys)
        // The recorded time this group used (or would have): never before the log's last event's.
        let end = LogEnd(position: group.position, recordedAt: recordedAt)
        guard !group.rows.isEmpty else { return Written(outcomes: outcomes, end: end, streams: streams) }
        if bulk {
            try await copy(group.rows, fingerprints: group.fingerprints, texts: group.texts, on: connection)
            return Written(outcomes: outcomes, end: end, streams: [:])
        }
        try await insert(group.rows, fingerprints: group.fingerprints, texts: group.texts, on: connection)
        let touched = Self.extend(streams, with: group.rows)
        try await ProjectionWriter(logger: logger).write(try await Self.fold(touched, previous: [:]), parts: .subscriber, on: connection)
        streams.merge(touched) { _, new in new }
        return Written(outcomes: outcomes, end: end, streams: streams)
    }

    /// The touched streams with the group's rows appended (only the streams that got rows).
    static func extend(_ streams: [String: [StreamEvent]], with rows: [RecordedEvent]) -> [String: [StreamEvent]] {
        var touched: [String: [StreamEvent]] = [:]
        for row in rows where touched[row.subscriberID] == nil {
            touched[row.subscriberID] = streams[row.subscriberID] ?? []
        }
        for row in rows { touched[row.subscriberID, default: []].append(StreamEvent(row)) }
        return touched
    }

    /// Folds the touched streams for the projection, refusing a stream past the limits: a stream's whole
    /// fold is rewritten under the append lock, so its size bounds how long one append can make every
    /// other writer wait (docs/limits.md).
    ///
    /// A group of many subscribers is folded in shares, one task per core (`inShares`).
    static func fold(
        _ touched: [String: [StreamEvent]], previous: [String: [StreamEvent]], known: [String: ProjectionWriter.Previous] = [:]
    ) async throws -> [ProjectionWriter.Folded] {
        let folded = await inShares(touched) { ProjectionWriter.fold($0, previous: previous, known: known) }.flatMap { $0 }
        try checkLimits(folded, touched)
        return folded
    }

    /// `fold`, and the folds' projection rows (only the changed ones) encoded in the same shares.
    static func foldAndEncode(
        _ touched: [String: [StreamEvent]], previous: [String: [StreamEvent]], known: [String: ProjectionWriter.Previous]
    ) async throws -> ([ProjectionWriter.Folded], ProjectionJSONRows) {
        let shares = await inShares(touched) { share in
            let folded = ProjectionWriter.fold(share, previous: previous, known: known)
            return (folded, ProjectionJSONRows(folded, patched: true, parts: .subscriber))
        }
        var rows = shares[0].1
        for share in shares.dropFirst() { rows.merge(share.1) }
        let folded = shares.flatMap(\.0)
        try checkLimits(folded, touched)
        return (folded, rows)
    }

    /// Runs `work` on shares of the touched streams, one task per core when the group touches many
    /// subscribers: a group's computation is on the path of every request waiting behind it, and each
    /// subscriber's fold reads only its own stream. At least one share, even for no streams.
    private static func inShares<T: Sendable>(
        _ touched: [String: [StreamEvent]], _ work: @escaping @Sendable (ArraySlice<(key: String, value: [StreamEvent])>) -> T
    ) async -> [T] {
        let streams = Array(touched)
        let parts = streams.count < parallelFoldMinimum ? 1 : min(foldCores, streams.count / parallelFoldMinimum * 2)
        guard parts > 1 else { return [work(streams[...])] }
        let size = (streams.count + parts - 1) / parts
        return await withTaskGroup(of: (Int, T).self) { group in
            for (i, start) in stride(from: 0, to: streams.count, by: size).enumerated() {
                let share = streams[start..<min(start + size, streams.count)]
                group.addTask { (i, work(share)) }
            }
            var results: [(Int, T)] = []
            for await result in group { results.append(result) }
            return results.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }

    /// Refuses a stream past the limits.
    private static func checkLimits(_ folded: [ProjectionWriter.Folded], _ touched: [String: [StreamEvent]]) throws {
        for f in folded {
            let events = touched[f.subscriber]?.count ?? 0
            if events > Limits.maxEventsPerSubscriber || f.ledger.windows.count > Limits.maxWindowsPerSubscriber {
                throw StreamTooLarge(subscriberID: f.subscriber, events: events, windows: f.ledger.windows.count)
            }
        }
    }

    /// Subscribers a group must touch before its fold is split across cores (a task per share costs more than
    /// folding a few subscribers).
    static let parallelFoldMinimum = 32
    static let foldCores = max(1, ProcessInfo.processInfo.activeProcessorCount)

    /// The group in one round trip (`schema/functions/subledger_append.sql`), computed from what the server believes
    /// the log's end and the touched streams are (`belief`: every touched stream whole, empty when believed
    /// new). Returns nil, having written nothing, when the database disagrees with a belief. Keys are not
    /// looked up: a reused key raises the unique violation, a failed version check `NeedsKeyLookup`.
    /// `sending` is told, right before the statement goes, where the group would leave the log and the
    /// touched streams if it commits.
    func appendInOneTrip(
        _ jobs: [AppendJob], end: LogEnd, streams: [String: [StreamEvent]], folds: [String: ProjectionWriter.Previous] = [:],
        stored: [IdempotencyKey: (RecordedEvent, [UInt8])]? = nil, now: Timestamp, on connection: PostgresConnection,
        sending: (LogEnd, [String: [StreamEvent]], [String: ProjectionWriter.Previous]) -> Void = { _, _, _ in }
    ) async throws -> Written? {
        var heads: [String: StreamHead] = [:]
        for (subscriber, events) in streams {
            heads[subscriber] = events.last.map { StreamHead(version: $0.version, hash: $0.hash) }
        }
        let recordedAt = max(now, end.recordedAt)
        var group = GroupState(
            heads: heads, position: end.position, recordedAt: recordedAt, stored: stored ?? [:], merged: Self.merged(streams, for: jobs))
        let outcomes = try group.take(jobs, lookUpKeys: stored != nil)
        let rows = group.rows
        guard !rows.isEmpty else { return Written(outcomes: outcomes, end: end, streams: streams) }
        let touched = Self.extend(streams, with: rows)
        let (folded, projection) = try await Self.foldAndEncode(touched, previous: streams, known: folds)
        let newFolds = Dictionary(folded.map { ($0.subscriber, $0.asPrevious) }, uniquingKeysWith: { a, _ in a })
        let subscribers = folded.map(\.subscriber)
        let believed = subscribers.map { streams[$0]?.last }
        let newEnd = LogEnd(position: group.position, recordedAt: recordedAt)
        let statement = AppendStatements.OneTrip(
            lockKey: EventStore.appendLockKey, expectedPosition: end.position, subscribers: subscribers,
            believedVersions: believed.map { $0?.version ?? 0 }, believedHashes: believed.map { $0?.hash ?? RecordedEvent.genesisHash },
            recordedAt: recordedAt, rows: rows, fingerprints: group.fingerprints, texts: group.texts, projection: projection)
        sending(newEnd, touched, newFolds)
        var written: Bool?
        for try await result in try await connection.execute(statement, logger: logger) { written = result }
        guard written == true else { return nil }
        return Written(outcomes: outcomes, end: newEnd, streams: touched, folds: newFolds)
    }

    /// A store message's append inside the message's own transaction (`StoreTransaction.append`), with as few
    /// round trips under the append lock as it allows: the keys are looked up before the lock (a key another
    /// writer stores meanwhile raises the unique violation, and the message's transaction runs again), then
    /// the lock and the tail in one statement (`subledger_append_tail`), then the rows in one statement
    /// (`subledger_append`, whose checks then hold). The lock stays held to the transaction's end; a message
    /// whose facts were all stored already writes nothing and takes no lock.
    func appendInTransaction(_ jobs: [AppendJob], now: Timestamp, on connection: PostgresConnection) async throws -> InTransaction {
        let all = jobs.flatMap(\.events)
        let stored = try await storedByIdempotencyKey(all, on: connection)
        if all.allSatisfy({ stored[IdempotencyKey($0)] != nil }) {
            var group = GroupState(heads: [:], position: 0, recordedAt: now, stored: stored)
            return .replayed(try group.take(jobs, lookUpKeys: true))
        }
        let subscribers = Set(all.map(\.subscriberID))
        var (end, streams) = try await lockedTail(subscribers, on: connection)
        for subscriber in subscribers where streams[subscriber] == nil { streams[subscriber] = [] }
        if let written = try await appendInOneTrip(jobs, end: end, streams: streams, stored: stored, now: now, on: connection) {
            return .written(written)
        }
        // Under the lock the tail read is the truth; should the projection disagree with it, the general way.
        return .written(try await append(jobs, lookUpKeys: true, on: connection))
    }

    /// What `appendInTransaction` did.
    enum InTransaction {
        /// Rows written (the append lock is held): each job's outcome, what the log and the touched streams are now.
        case written(Written)
        /// Every fact was already stored: nothing written, no lock taken; each job's outcome.
        case replayed([Result<AppendResult, StoreError>])

        var outcomes: [Result<AppendResult, StoreError>] {
            switch self {
            case .written(let w): w.outcomes
            case .replayed(let outcomes): outcomes
            }
        }
    }

    /// Takes the append lock and reads the log's end and the given streams whole, in one round trip.
    private func lockedTail(_ subscribers: Set<String>, on connection: PostgresConnection) async throws
        -> (LogEnd, [String: [StreamEvent]])
    {
        var end = LogEnd(position: 0, recordedAt: Timestamp(microseconds: 0))
        var streams: [String: [StreamEvent]] = [:]
        var first = true
        let rows = try await connection.query(
            """
            SELECT recorded_at, \(unescaped: EventRow.streamColumns)
            FROM subledger_append_tail(\(EventStore.appendLockKey), \(TextArray(Array(subscribers)))::text[])
            """, logger: logger)
        for try await row in rows {
            guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
            let recordedAt = try cells.timestamp()
            let event = try EventRow.decodeForStream(&cells)
            if first {
                // The function returns the log's last event first.
                end = LogEnd(position: event.position, recordedAt: recordedAt)
                first = false
            } else {
                streams[event.subscriberID, default: []].append(event)
            }
        }
        return (end, streams)
    }

    /// The subscribers of `streams` that were merged, and where to; not looked for when no job asks.
    static func merged(_ streams: [String: [StreamEvent]], for jobs: [AppendJob]) -> [String: String] {
        var merged: [String: String] = [:]
        guard jobs.contains(where: \.refusesMerged) else { return merged }
        for (subscriber, events) in streams {
            for e in events {
                if case .merged(let m) = e.fold.payload { merged[subscriber] = m.into }
            }
        }
        return merged
    }

    /// The streams' heads, positions and keys as the jobs taken so far leave them.
    struct GroupState {
        var heads: [String: StreamHead]
        var position: Int64
        let recordedAt: Timestamp
        /// Keys already stored, then the keys of the jobs taken, with their fingerprints.
        var stored: [IdempotencyKey: (RecordedEvent, [UInt8])]
        /// Merged subscribers of the streams read or believed, then of the jobs taken (imports read no streams
        /// and refuse nothing).
        var merged: [String: String] = [:]
        var rows: [RecordedEvent] = []
        var fingerprints: [[UInt8]] = []
        /// Each row's data and metadata as canonical JSON: written once, for its hash and its stored text.
        var texts: RowTexts = RowTexts()

        /// Takes the jobs in order, each with its own outcome: a job's conflict fails that job alone.
        mutating func take(_ jobs: [AppendJob], lookUpKeys: Bool) throws -> [Result<AppendResult, StoreError>] {
            var outcomes: [Result<AppendResult, StoreError>] = []
            outcomes.reserveCapacity(jobs.count)
            for job in jobs {
                do {
                    outcomes.append(.success(try take(job, lookUpKeys: lookUpKeys)))
                } catch let error as StoreError {
                    outcomes.append(.failure(error))
                }
            }
            return outcomes
        }

        /// Checks a job against the state and takes its new events, or throws its conflict and takes nothing.
        mutating func take(_ job: AppendJob, lookUpKeys: Bool) throws -> AppendResult {
            let events = job.events
            var results: [RecordedEvent] = []
            results.reserveCapacity(events.count)
            var touched: [String: StreamHead] = [:]
            var fresh: [(RecordedEvent, [UInt8], data: [UInt8], metadata: [UInt8])] = []
            var next = position
            if job.refusesMerged, let e = events.first(where: { merged[$0.subscriberID] != nil }) {
                throw StoreError.subscriberMerged(subscriber: e.subscriberID, into: merged[e.subscriberID]!)
            }
            let ids = RandomEventIDs.make(events.count)
            for (i, event) in events.enumerated() {
                let index = events.count > 1 ? i : nil
                if let (known, fingerprint) = stored[IdempotencyKey(event)] {
                    guard fingerprint == event.fingerprint || job.replays == .keepStored else {
                        throw StoreError.idempotencyConflict(source: event.source, key: event.idempotencyKey, index: index)
                    }
                    results.append(known)
                    continue
                }
                let head =
                    touched[event.subscriberID] ?? heads[event.subscriberID]
                    ?? StreamHead(version: 0, hash: RecordedEvent.genesisHash)
                if let expected = event.expectedVersion, expected != head.version {
                    if !lookUpKeys { throw NeedsKeyLookup() }
                    throw StoreError.versionConflict(
                        subscriberID: event.subscriberID, expected: expected, actual: head.version, index: index)
                }
                next += 1
                let data = event.canonicalData
                let metadata = event.canonicalMetadata
                let recorded = RecordedEvent(
                    eventID: ids[i], subscriberID: event.subscriberID, version: head.version + 1, position: next,
                    type: event.type, occurredAt: event.occurredAt, recordedAt: recordedAt, source: event.source,
                    environment: event.environment, idempotencyKey: event.idempotencyKey, data: event.data,
                    metadata: event.metadata, prevHash: head.hash, canonicalData: data, canonicalMetadata: metadata)
                touched[event.subscriberID] = StreamHead(version: recorded.version, hash: recorded.hash)
                results.append(recorded)
                fresh.append((recorded, event.fingerprint, data, metadata))
            }
            heads.merge(touched) { _, new in new }
            position = next
            for (row, fingerprint, data, metadata) in fresh {
                if row.type == .merged, let into = row.data[EventDataKey.into]?.stringValue { merged[row.subscriberID] = into }
                stored[IdempotencyKey(source: row.source, key: row.idempotencyKey)] = (row, fingerprint)
                rows.append(row)
                fingerprints.append(fingerprint)
                texts.data.append(data)
                texts.metadata.append(metadata)
            }
            return AppendResult(events: results, createdCount: fresh.count)
        }
    }

    private func insert(_ rows: [RecordedEvent], fingerprints: [[UInt8]], texts: RowTexts, on connection: PostgresConnection) async throws {
        let recordedAt = rows[0].recordedAt.rfc3339
        try await connection.query(
            """
            INSERT INTO events (subscriber_id, version, position, event_id, type, occurred_at, recorded_at, source,
                                environment, idempotency_key, data, metadata, fingerprint, prev_hash, hash)
            SELECT s, v, p, id, t, o::timestamptz, \(recordedAt)::timestamptz, src, env, k, d::jsonb, m::jsonb, f, ph, h
            FROM unnest(\(TextArray(rows.map(\.subscriberID)))::text[], \(Int64Array(rows.map(\.version)))::int8[],
                        \(Int64Array(rows.map(\.position)))::int8[], \(UUIDArray(rows.map(\.eventID)))::uuid[],
                        \(TextArray(rows.map(\.type.rawValue)))::text[], \(TextArray(rows.map(\.occurredAt.rfc3339)))::text[],
                        \(TextArray(rows.map(\.source)))::text[], \(TextArray(rows.map(\.environment.rawValue)))::text[],
                        \(TextArray(rows.map(\.idempotencyKey)))::text[],
                        \(UTF8TextArray(texts.data))::text[], \(UTF8TextArray(texts.metadata))::text[],
                        \(ByteaArray(fingerprints))::bytea[], \(ByteaArray(rows.map(\.prevHash)))::bytea[],
                        \(ByteaArray(rows.map(\.hash)))::bytea[])
                 AS u(s, v, p, id, t, o, src, env, k, d, m, f, ph, h)
            """, logger: logger)
    }

    /// Writes rows with `COPY events FROM STDIN` in the binary format.
    private func copy(_ rows: [RecordedEvent], fingerprints: [[UInt8]], texts: RowTexts, on connection: PostgresConnection) async throws {
        let catalog = try await BinaryCopy.ColumnTypes.load(["events"], on: connection, logger: logger)
        try await Self.copyRows(rows, fingerprints: fingerprints, texts: texts, catalog: catalog).copy(on: connection, logger: logger)
    }

    /// The rows as binary COPY tuples of `events` (`catalog` holds its column types).
    static func copyRows(_ rows: [RecordedEvent], fingerprints: [[UInt8]], texts: RowTexts, catalog: BinaryCopy.ColumnTypes) -> BinaryRows {
        var out = BinaryRows(table: "events", catalog: catalog, capacity: rows.count * 700)
        for (i, (row, fingerprint)) in zip(rows, fingerprints).enumerated() {
            out.beginRow()
            out.text("subscriber_id", row.subscriberID)
            out.integer("version", row.version)
            out.integer("position", row.position)
            out.uuid("event_id", row.eventID)
            out.text("type", row.type.rawValue)
            out.timestamp("occurred_at", row.occurredAt)
            out.timestamp("recorded_at", row.recordedAt)
            out.text("source", row.source)
            out.text("environment", row.environment.rawValue)
            out.text("idempotency_key", row.idempotencyKey)
            out.json("data", canonical: texts.data[i])
            out.json("metadata", canonical: texts.metadata[i])
            out.bytes("fingerprint", fingerprint)
            out.bytes("prev_hash", row.prevHash)
            out.bytes("hash", row.hash)
            out.endRow()
        }
        return out
    }

    struct StreamHead {
        var version: Int64
        var hash: [UInt8]
    }

    /// The log's last position, and a time no earlier than its last event's recorded time (the next
    /// append's recorded time is the clock's, but never before it).
    struct LogEnd: Sendable, Equatable {
        var position: Int64
        var recordedAt: Timestamp
    }

    /// Rows' data and metadata as canonical JSON, in row order.
    struct RowTexts {
        var data: [[UInt8]] = []
        var metadata: [[UInt8]] = []
    }

    struct IdempotencyKey: Hashable {
        var source: String
        var key: String
        init(_ e: NewEvent) { (source, key) = (e.source, e.idempotencyKey) }
        init(source: String, key: String) { (self.source, self.key) = (source, key) }
    }

    /// The last position (0 for an empty log) and this append's recorded time: the clock,
    /// but never before the last event's (positions and recorded times both only grow). Selected from
    /// `lastEvent`, the one-row end of the tail queries' UNIONs.
    static let lastPositionAndClock =
        "coalesce(last.position, 0), greatest(clock_timestamp(), last.recorded_at)"
    static let lastEvent = """
        (SELECT 1) one LEFT JOIN LATERAL (SELECT position, recorded_at FROM events ORDER BY position DESC LIMIT 1) last ON true
        """

    /// The heads of the given streams, the last position and the recorded time for this append, in one query.
    func tail(_ subscribers: Set<String>, on connection: PostgresConnection) async throws
        -> ([String: StreamHead], Int64, Timestamp)
    {
        var heads: [String: StreamHead] = [:]
        var lastPosition: Int64 = 0
        var recordedAt = Timestamp(microseconds: 0)
        let rows = try await connection.query(
            """
            SELECT h.subscriber_id, h.version, h.hash, NULL::int8, NULL::timestamptz
            FROM (SELECT DISTINCT ON (subscriber_id) subscriber_id, version, hash FROM events
                  WHERE subscriber_id = ANY(\(TextArray(Array(subscribers)))::text[]) ORDER BY subscriber_id, version DESC) h
            UNION ALL
            SELECT NULL, NULL, NULL, \(unescaped: Self.lastPositionAndClock) FROM \(unescaped: Self.lastEvent)
            """, logger: logger)
        for try await (subscriber, version, hash, position, recorded) in rows.decode(
            (String?, Int64?, ByteBuffer?, Int64?, Timestamp?).self)
        {
            if let subscriber, let version, let hash {
                heads[subscriber] = StreamHead(version: version, hash: Array(buffer: hash))
            } else if let position, let recorded {
                lastPosition = position
                recordedAt = recorded
            }
        }
        return (heads, lastPosition, recordedAt)
    }

    /// The given streams whole (in version order), the last position and the recorded time for this
    /// append, in one query.
    private func tailWithStreams(_ subscribers: Set<String>, on connection: PostgresConnection) async throws
        -> ([String: [StreamEvent]], Int64, Timestamp)
    {
        var streams: [String: [StreamEvent]] = [:]
        var lastPosition: Int64 = 0
        var recordedAt = Timestamp(microseconds: 0)
        let rows = try await connection.query(
            """
            (SELECT NULL::int8, NULL::timestamptz, \(unescaped: EventRow.streamColumns) FROM events
             WHERE subscriber_id = ANY(\(TextArray(Array(subscribers)))::text[]) ORDER BY subscriber_id, version)
            UNION ALL
            (SELECT \(unescaped: Self.lastPositionAndClock), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
             FROM \(unescaped: Self.lastEvent))
            """, logger: logger)
        for try await row in rows {
            guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
            if let position = try cells.optionalInt64() {
                lastPosition = position
                recordedAt = try cells.timestamp()
            } else {
                _ = try cells.optionalTimestamp()
                let event = try EventRow.decodeForStream(&cells)
                streams[event.subscriberID, default: []].append(event)
            }
        }
        return (streams, lastPosition, recordedAt)
    }

    func storedByIdempotencyKey(_ events: [NewEvent], on connection: PostgresConnection) async throws
        -> [IdempotencyKey: (RecordedEvent, [UInt8])]
    {
        var found: [IdempotencyKey: (RecordedEvent, [UInt8])] = [:]
        let rows = try await connection.query(
            """
            SELECT \(unescaped: EventRow.columns), fingerprint FROM events e
            JOIN unnest(\(TextArray(events.map(\.source)))::text[], \(TextArray(events.map(\.idempotencyKey)))::text[])
                 AS k(k_source, k_key)
              ON e.source = k.k_source AND e.idempotency_key = k.k_key
            """, logger: logger)
        for try await row in rows {
            let event = try EventRow.decode(row)
            found[IdempotencyKey(source: event.source, key: event.idempotencyKey)] = (event, try Self.lastColumn(row))
        }
        return found
    }

    private static func lastColumn(_ row: PostgresRow) throws -> [UInt8] {
        var last: PostgresCell?
        for cell in row { last = cell }
        guard let cell = last, let bytes = try cell.decode(ByteBuffer?.self) else { return [] }
        return Array(buffer: bytes)
    }
}
