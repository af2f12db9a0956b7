import Foundation
import LedgerCore
import Logging
import NIOCore
import PostgresNIO

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
public struct EventStore: Sendable {
    /// The key of the advisory lock every append (API, import) holds while it assigns positions.
    public static let appendLockKey: Int64 = 0x5355_424C_4150_5044

    let database: Database
    var logger: Logger { database.logger }

    public init(database: Database) {
        self.database = database
    }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    /// Appends all events or none. Events whose (`source`, `idempotency_key`) is already stored with the
    /// same fingerprint are returned as stored; a different fingerprint is a conflict.
    ///
    /// The common case (all keys new) does not look the keys up first: BEGIN, lock, one read of stream
    /// heads and the last position, one INSERT, the projection's re-fold (read, delete, insert, upsert),
    /// COMMIT. Only when the unique index reports a reused key, or a version check fails (which may be the
    /// retry of an append that already succeeded), is the append redone comparing with what is stored.
    public func append(_ events: [NewEvent], replays: ReplayPolicy = .strict) async throws -> AppendResult {
        precondition(!events.isEmpty, "append needs at least one event")
        return try await StoreError.mapping {
            let firstTry: AppendResult?
            do {
                firstTry = try await database.transaction { connection in
                    try await append(events, lookUpKeys: false, on: connection)
                }
            } catch let error as PSQLError where error.isUniqueViolation(of: "events_idempotency_key") {
                firstTry = nil
            } catch is NeedsKeyLookup {
                firstTry = nil
            }
            if let firstTry { return firstTry }
            return try await database.transaction { connection in
                try await append(events, lookUpKeys: true, replays: replays, on: connection)
            }
        }
    }

    /// What an already-used idempotency key with a different fingerprint means.
    public enum ReplayPolicy: Sendable {
        /// A conflict (409): the API's contract for clients that send their own events.
        case strict
        /// The stored event stands: store adapters learn the same fact from several payloads (a notification
        /// and a receipt) that differ in their raw metadata.
        case keepStored
    }

    /// Appends one batch of a bulk import: same validation of keys and versions, same positions and hash
    /// chain, but rows go in with COPY and the projections are left to a rebuild after the import.
    /// All or nothing, like any append.
    public func importBatch(_ events: [NewEvent]) async throws -> AppendResult {
        precondition(!events.isEmpty, "an import batch needs at least one event")
        return try await StoreError.mapping {
            try await database.transaction { connection in
                try await append(events, lookUpKeys: true, bulk: true, on: connection)
            }
        }
    }

    private func append(
        _ events: [NewEvent], lookUpKeys: Bool, replays: ReplayPolicy = .strict, bulk: Bool = false,
        on connection: PostgresConnection
    ) async throws -> AppendResult {
        try await connection.query("SELECT pg_advisory_xact_lock(\(Self.appendLockKey))", logger: logger)

        let existing = lookUpKeys ? try await storedByIdempotencyKey(events, on: connection) : [:]
        var results: [RecordedEvent?] = Array(repeating: nil, count: events.count)
        var fresh: [Int] = []
        for (i, event) in events.enumerated() {
            if let (stored, fingerprint) = existing[IdempotencyKey(event)] {
                guard fingerprint == event.fingerprint || replays == .keepStored else {
                    throw StoreError.idempotencyConflict(
                        source: event.source, key: event.idempotencyKey, index: events.count > 1 ? i : nil)
                }
                results[i] = stored
            } else {
                fresh.append(i)
            }
        }
        guard !fresh.isEmpty else { return AppendResult(events: results.map { $0! }, createdCount: 0) }

        var (heads, lastPosition, recordedAt) = try await tail(Set(fresh.map { events[$0].subscriberID }), on: connection)
        var position = lastPosition
        var rows: [RecordedEvent] = []
        rows.reserveCapacity(fresh.count)
        for i in fresh {
            let event = events[i]
            let head = heads[event.subscriberID] ?? StreamHead(version: 0, hash: RecordedEvent.genesisHash)
            if let expected = event.expectedVersion, expected != head.version {
                if !lookUpKeys { throw NeedsKeyLookup() }
                throw StoreError.versionConflict(
                    subscriberID: event.subscriberID, expected: expected, actual: head.version,
                    index: events.count > 1 ? i : nil)
            }
            position += 1
            let recorded = RecordedEvent(
                eventID: UUID(), subscriberID: event.subscriberID, version: head.version + 1, position: position,
                type: event.type, occurredAt: event.occurredAt, recordedAt: recordedAt, source: event.source,
                environment: event.environment, idempotencyKey: event.idempotencyKey, data: event.data,
                metadata: event.metadata, prevHash: head.hash)
            heads[event.subscriberID] = StreamHead(version: recorded.version, hash: recorded.hash)
            results[i] = recorded
            rows.append(recorded)
        }
        if bulk {
            try await copy(rows, fingerprints: fresh.map { events[$0].fingerprint }, on: connection)
        } else {
            try await insert(rows, fingerprints: fresh.map { events[$0].fingerprint }, on: connection)
            try await ProjectionWriter(logger: logger).refold(Array(Set(rows.map(\.subscriberID))), on: connection)
        }
        return AppendResult(events: results.map { $0! }, createdCount: rows.count)
    }

    private func insert(_ rows: [RecordedEvent], fingerprints: [[UInt8]], on connection: PostgresConnection) async throws {
        let recordedAt = rows[0].recordedAt.rfc3339
        try await connection.query(
            """
            INSERT INTO events (subscriber_id, version, position, event_id, type, occurred_at, recorded_at, source,
                                environment, idempotency_key, data, metadata, fingerprint, prev_hash, hash)
            SELECT s, v, p, id, t, o::timestamptz, \(recordedAt)::timestamptz, src, env, k, d::jsonb, m::jsonb, f, ph, h
            FROM unnest(\(rows.map(\.subscriberID))::text[], \(rows.map(\.version))::int8[], \(rows.map(\.position))::int8[],
                        \(rows.map(\.eventID))::uuid[], \(rows.map(\.type.rawValue))::text[],
                        \(rows.map(\.occurredAt.rfc3339))::text[], \(rows.map(\.source))::text[],
                        \(rows.map(\.environment.rawValue))::text[], \(rows.map(\.idempotencyKey))::text[],
                        \(rows.map { JSONValue.object($0.data).canonicalString() })::text[],
                        \(rows.map { JSONValue.object($0.metadata).canonicalString() })::text[],
                        \(fingerprints.map { ByteBuffer(bytes: $0) })::bytea[],
                        \(rows.map { ByteBuffer(bytes: $0.prevHash) })::bytea[],
                        \(rows.map { ByteBuffer(bytes: $0.hash) })::bytea[])
                 AS u(s, v, p, id, t, o, src, env, k, d, m, f, ph, h)
            """, logger: logger)
    }

    private struct NeedsKeyLookup: Error {}

    /// Writes rows with `COPY events FROM STDIN` (text format), in chunks of about 1 MiB.
    private func copy(_ rows: [RecordedEvent], fingerprints: [[UInt8]], on connection: PostgresConnection) async throws {
        try await connection.copyFrom(
            table: "events",
            columns: [
                "subscriber_id", "version", "position", "event_id", "type", "occurred_at", "recorded_at", "source",
                "environment", "idempotency_key", "data", "metadata", "fingerprint", "prev_hash", "hash",
            ], logger: logger
        ) { writer in
            var buffer = ByteBuffer()
            for (row, fingerprint) in zip(rows, fingerprints) {
                let fields = [
                    row.subscriberID, String(row.version), String(row.position), row.eventID.uuidString.lowercased(),
                    row.type.rawValue, row.occurredAt.rfc3339, row.recordedAt.rfc3339, row.source, row.environment.rawValue,
                    row.idempotencyKey, JSONValue.object(row.data).canonicalString(), JSONValue.object(row.metadata).canonicalString(),
                    "\\x" + Hex.encode(fingerprint), "\\x" + Hex.encode(row.prevHash), "\\x" + Hex.encode(row.hash),
                ]
                buffer.writeString(fields.map(Self.copyEscaped).joined(separator: "\t"))
                buffer.writeString("\n")
                if buffer.readableBytes > 1 << 20 {
                    try await writer.write(buffer)
                    buffer.clear()
                }
            }
            if buffer.readableBytes > 0 { try await writer.write(buffer) }
        }
    }

    /// COPY text format: backslash, tab, newline and carriage return are escaped (so a bytea's `\x…` hex
    /// form arrives as `\\x…`, as COPY expects).
    static func copyEscaped(_ field: String) -> String {
        var out = ""
        out.reserveCapacity(field.utf8.count)
        for c in field.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\t": out += "\\t"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    struct StreamHead {
        var version: Int64
        var hash: [UInt8]
    }

    struct IdempotencyKey: Hashable {
        var source: String
        var key: String
        init(_ e: NewEvent) { (source, key) = (e.source, e.idempotencyKey) }
        init(source: String, key: String) { (self.source, self.key) = (source, key) }
    }

    /// The heads of the given streams, the last position and the recorded time for this append, in one query.
    private func tail(_ subscribers: Set<String>, on connection: PostgresConnection) async throws
        -> ([String: StreamHead], Int64, Timestamp)
    {
        var heads: [String: StreamHead] = [:]
        var lastPosition: Int64 = 0
        var recordedAt = Timestamp(microseconds: 0)
        let rows = try await connection.query(
            """
            SELECT h.subscriber_id, h.version, h.hash, NULL::int8, NULL::int8
            FROM (SELECT DISTINCT ON (subscriber_id) subscriber_id, version, hash FROM events
                  WHERE subscriber_id = ANY(\(Array(subscribers))::text[]) ORDER BY subscriber_id, version DESC) h
            UNION ALL
            SELECT NULL, NULL, NULL, coalesce(last.position, 0),
                   (extract(epoch FROM greatest(clock_timestamp(), last.recorded_at)) * 1000000)::int8
            FROM (SELECT 1) one LEFT JOIN LATERAL
                 (SELECT position, recorded_at FROM events ORDER BY position DESC LIMIT 1) last ON true
            """, logger: logger)
        for try await (subscriber, version, hash, position, recorded) in rows.decode(
            (String?, Int64?, ByteBuffer?, Int64?, Int64?).self)
        {
            if let subscriber, let version, let hash {
                heads[subscriber] = StreamHead(version: version, hash: Array(buffer: hash))
            } else if let position, let recorded {
                lastPosition = position
                recordedAt = Timestamp(microseconds: recorded)
            }
        }
        return (heads, lastPosition, recordedAt)
    }

    private func storedByIdempotencyKey(_ events: [NewEvent], on connection: PostgresConnection) async throws
        -> [IdempotencyKey: (RecordedEvent, [UInt8])]
    {
        var found: [IdempotencyKey: (RecordedEvent, [UInt8])] = [:]
        let rows = try await connection.query(
            """
            SELECT \(unescaped: EventRow.columns), fingerprint FROM events e
            JOIN unnest(\(events.map(\.source))::text[], \(events.map(\.idempotencyKey))::text[]) AS k(k_source, k_key)
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

    /// One subscriber's stream, oldest first, after `version` (paged by version).
    public func stream(subscriberID: String, afterVersion: Int64, limit: Int) async throws -> [RecordedEvent] {
        try await StoreError.mapping {
            try await collect(
                """
                SELECT \(unescaped: EventRow.columns) FROM events
                WHERE subscriber_id = \(subscriberID) AND version > \(afterVersion) ORDER BY version LIMIT \(Int64(limit))
                """)
        }
    }

    /// The global feed in position order. Gap-safe: positions are assigned and committed in order (see the type's doc).
    public func feed(afterPosition: Int64, limit: Int) async throws -> [RecordedEvent] {
        try await StoreError.mapping {
            try await collect(
                """
                SELECT \(unescaped: EventRow.columns) FROM events
                WHERE position > \(afterPosition) ORDER BY position LIMIT \(Int64(limit))
                """)
        }
    }

    /// A page of the feed restricted to events recorded in `[from, to)` (either bound optional), for exports.
    public func feed(afterPosition: Int64, limit: Int, recordedFrom: Timestamp?, recordedTo: Timestamp?) async throws -> [RecordedEvent] {
        let from = (recordedFrom ?? .minimum).rfc3339
        let to = recordedTo.map(\.rfc3339) ?? "infinity"
        return try await StoreError.mapping {
            try await collect(
                """
                SELECT \(unescaped: EventRow.columns) FROM events
                WHERE position > \(afterPosition) AND recorded_at >= \(from)::timestamptz AND recorded_at < \(to)::timestamptz
                ORDER BY position LIMIT \(Int64(limit))
                """)
        }
    }

    private func collect(_ query: PostgresQuery) async throws -> [RecordedEvent] {
        let logger = self.logger
        return try await database.withConnection { connection in
            var out: [RecordedEvent] = []
            for try await row in try await connection.query(query, logger: logger) {
                out.append(try EventRow.decode(row))
            }
            return out
        }
    }
}
