import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// Recomputes every projection from the log, a chunk of subscribers per transaction.
///
/// Each chunk holds the append lock while it re-reads, folds and writes its subscribers, so a concurrent
/// append can never be overwritten by a stale fold; appends wait at most one chunk.
public struct Rebuilder: Sendable {
    public struct Progress: Sendable {
        public var subscribers: Int
        public var events: Int
        public var totalEvents: Int
    }

    let database: Database
    let chunkSize: Int

    public init(database: Database, chunkSize: Int = 500) {
        self.database = database
        self.chunkSize = chunkSize
    }

    public init(client: PostgresClient, logger: Logger, chunkSize: Int = 500) {
        self.init(database: Database(client: client, logger: logger), chunkSize: chunkSize)
    }

    @discardableResult
    public func rebuild(progress: (@Sendable (Progress) -> Void)? = nil) async throws -> Progress {
        let logger = database.logger
        let chunkSize = self.chunkSize
        let total = try await database.withConnection { c in
            try await c.query("SELECT count(*) FROM events", logger: logger).collect()[0].decode(Int64.self)
        }
        var done = Progress(subscribers: 0, events: 0, totalEvents: Int(total))
        try await database.transaction { c in
            try await c.query("SELECT pg_advisory_xact_lock(\(EventStore.appendLockKey))", logger: logger)
            try await c.query(
                "DELETE FROM windows w WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.subscriber_id = w.subscriber_id)",
                logger: logger)
            try await c.query(
                "DELETE FROM subscriber_state s WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.subscriber_id = s.subscriber_id)",
                logger: logger)
        }
        var after = ""
        while true {
            let from = after
            let (subscribers, events) = try await database.transaction { c -> ([String], Int) in
                try await c.query("SELECT pg_advisory_xact_lock(\(EventStore.appendLockKey))", logger: logger)
                var subscribers: [String] = []
                let rows = try await c.query(
                    """
                    SELECT subscriber_id FROM events WHERE subscriber_id > \(from) AND version = 1
                    ORDER BY subscriber_id LIMIT \(Int64(chunkSize))
                    """, logger: logger)
                for try await s in rows.decode(String.self) { subscribers.append(s) }
                let events = try await ProjectionWriter(logger: logger).refold(subscribers, on: c)
                return (subscribers, events)
            }
            guard let last = subscribers.last else { break }
            after = last
            done.subscribers += subscribers.count
            done.events += events
            progress?(done)
            if subscribers.count < chunkSize { break }
        }
        return done
    }
}
