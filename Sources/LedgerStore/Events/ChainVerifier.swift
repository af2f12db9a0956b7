import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// The outcome of recomputing every subscriber's hash chain.
public struct ChainVerification: Sendable {
    /// One event whose stored link does not match what its content implies.
    public struct Break: Sendable, Hashable {
        public var eventID: UUID
        public var subscriberID: String
        public var version: Int64
        public var position: Int64
        public var reason: String
    }

    public var eventsChecked: Int
    public var streamsChecked: Int
    /// Breaks found, lowest position first (at most `ChainVerifier.maxReportedBreaks`).
    public var breaks: [Break]

    public var ok: Bool { breaks.isEmpty }
    /// The earliest (by position) event whose chain is broken.
    public var firstBroken: Break? { breaks.first }
}

/// Recomputes `hash = SHA-256(prev_hash ‖ canonical event)` for every event, stream by stream, streaming
/// the table in keyset pages so memory stays flat whatever the ledger's size.
public struct ChainVerifier: Sendable {
    public static let maxReportedBreaks = 100

    let database: Database
    let pageSize: Int
    var logger: Logger { database.logger }

    public init(database: Database, pageSize: Int = 5000) {
        self.database = database
        self.pageSize = pageSize
    }

    public init(client: PostgresClient, logger: Logger, pageSize: Int = 5000) {
        self.init(database: Database(client: client, logger: logger), pageSize: pageSize)
    }

    public func verify(progress: (@Sendable (Int) -> Void)? = nil) async throws -> ChainVerification {
        try await StoreError.mapping {
            var checked = 0
            var streams = 0
            var breaks: [ChainVerification.Break] = []
            var cursor: (String, Int64)? = nil
            var previous: RecordedEvent? = nil
            while true {
                let page = try await nextPage(after: cursor)
                for event in page {
                    checked += 1
                    let sameStream = previous?.subscriberID == event.subscriberID
                    if !sameStream { streams += 1 }
                    if let reason = Self.check(event, previous: sameStream ? previous : nil) {
                        breaks.append(
                            .init(
                                eventID: event.eventID, subscriberID: event.subscriberID, version: event.version,
                                position: event.position, reason: reason))
                    }
                    previous = event
                }
                progress?(checked)
                guard page.count == pageSize, let last = page.last else { break }
                cursor = (last.subscriberID, last.version)
            }
            breaks.sort { $0.position < $1.position }
            return ChainVerification(
                eventsChecked: checked, streamsChecked: streams, breaks: Array(breaks.prefix(Self.maxReportedBreaks)))
        }
    }

    /// Why `event` breaks its chain, or nil when its link holds.
    static func check(_ event: RecordedEvent, previous: RecordedEvent?) -> String? {
        let expectedVersion = (previous?.version ?? 0) + 1
        if event.version != expectedVersion {
            return "version \(event.version) follows version \(expectedVersion - 1): the stream has a gap"
        }
        let expectedPrev = previous?.hash ?? RecordedEvent.genesisHash
        if event.prevHash != expectedPrev {
            return "prev_hash does not match the hash of version \(expectedVersion - 1)"
        }
        if event.computedHash() != event.hash {
            return "content does not match its hash (the event was altered after it was recorded)"
        }
        return nil
    }

    private func nextPage(after cursor: (String, Int64)?) async throws -> [RecordedEvent] {
        let query: PostgresQuery
        if let (subscriber, version) = cursor {
            query = """
                SELECT \(unescaped: EventRow.columns) FROM events
                WHERE (subscriber_id, version) > (\(subscriber), \(version))
                ORDER BY subscriber_id, version LIMIT \(Int64(pageSize))
                """
        } else {
            query = "SELECT \(unescaped: EventRow.columns) FROM events ORDER BY subscriber_id, version LIMIT \(Int64(pageSize))"
        }
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
