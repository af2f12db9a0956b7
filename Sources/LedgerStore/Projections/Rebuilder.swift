import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// Recomputes every projection from the log, a chunk of subscribers per transaction.
///
/// Two connections work at once: a reader pages through the streams in subscriber order and folds them
/// (no lock: a plain read of committed events), while a writer stores the previous chunk under the append
/// lock. So PostgreSQL's reading and writing overlap with the fold. A chunk's fold can be stale only if an
/// append committed for one of its subscribers after the reader noted the last position; the writer checks
/// that under the lock (one index probe on `position`) and refolds those subscribers there, so a
/// concurrent append is never overwritten by a stale fold, and appends wait at most one chunk's write.
public struct Rebuilder: Sendable {
    public struct Progress: Sendable {
        public var subscribers: Int
        public var events: Int
        public var totalEvents: Int
    }

    let database: Database
    let chunkSize: Int

    public init(database: Database, chunkSize: Int = 2000) {
        self.database = database
        self.chunkSize = chunkSize
    }

    public init(client: PostgresClient, logger: Logger, chunkSize: Int = 2000) {
        self.init(database: Database(client: client, logger: logger), chunkSize: chunkSize)
    }

    /// One chunk as the reader leaves it for the writer.
    struct Chunk: Sendable {
        var subscribers: [String]
        var folded: [ProjectionWriter.Folded]
        var events: Int
        /// The last position committed before the chunk's events were read.
        var seenPosition: Int64
    }

    @discardableResult
    public func rebuild(progress: (@Sendable (Progress) -> Void)? = nil) async throws -> Progress {
        let logger = database.logger
        let total = try await database.withConnection { c in
            try await c.query("SELECT count(*) FROM events", logger: logger).collect()[0].decode(Int64.self)
        }
        try await database.transaction { c in
            try await c.query("SELECT pg_advisory_xact_lock(\(EventStore.appendLockKey))", logger: logger)
            try await c.query(
                "DELETE FROM windows w WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.subscriber_id = w.subscriber_id)",
                logger: logger)
            try await c.query(
                "DELETE FROM subscriber_state s WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.subscriber_id = s.subscriber_id)",
                logger: logger)
        }
        var done = Progress(subscribers: 0, events: 0, totalEvents: Int(total))
        var next: Task<Chunk?, any Error>? = Task { try await read(after: "") }
        defer { next?.cancel() }
        while let reading = next, let chunk = try await reading.value {
            let last = chunk.subscribers.last!
            next = chunk.subscribers.count < chunkSize ? nil : Task { try await read(after: last) }
            try await write(chunk)
            done.subscribers += chunk.subscribers.count
            done.events += chunk.events
            progress?(done)
        }
        return done
    }

    /// The next page of subscribers after `after` (by first event, in id order), their streams folded.
    private func read(after from: String) async throws -> Chunk? {
        let logger = database.logger
        let chunkSize = Int64(self.chunkSize)
        return try await database.withConnection { c -> Chunk? in
            let seen = try await c.query("SELECT coalesce(max(position), 0) FROM events", logger: logger)
                .collect()[0].decode(Int64.self)
            var subscribers: [String] = []
            let rows = try await c.query(
                """
                SELECT subscriber_id FROM events WHERE subscriber_id > \(from) AND version = 1
                ORDER BY subscriber_id LIMIT \(chunkSize)
                """, logger: logger)
            for try await s in rows.decode(String.self) { subscribers.append(s) }
            guard let last = subscribers.last else { return nil }
            let streams = try await ProjectionWriter(logger: logger).streams(
                """
                SELECT \(unescaped: EventRow.columns) FROM events
                WHERE subscriber_id > \(from) AND subscriber_id <= \(last) ORDER BY subscriber_id, version
                """, on: c)
            return Chunk(
                subscribers: subscribers, folded: ProjectionWriter.fold(streams),
                events: streams.values.reduce(0) { $0 + $1.count }, seenPosition: seen)
        }
    }

    /// Stores a folded chunk under the append lock, refolding there any of its subscribers that an append
    /// has touched since the chunk was read.
    private func write(_ chunk: Chunk) async throws {
        let logger = database.logger
        try await database.transaction { c in
            try await c.query("SELECT pg_advisory_xact_lock(\(EventStore.appendLockKey))", logger: logger)
            var moved: Set<String> = []
            let rows = try await c.query(
                """
                SELECT DISTINCT subscriber_id FROM events
                WHERE position > \(chunk.seenPosition) AND subscriber_id = ANY(\(TextArray(chunk.subscribers))::text[])
                """, logger: logger)
            for try await s in rows.decode(String.self) { moved.insert(s) }
            let writer = ProjectionWriter(logger: logger)
            try await writer.write(chunk.folded.filter { !moved.contains($0.subscriber) }, on: c)
            try await writer.refold(Array(moved), on: c)
        }
    }
}
