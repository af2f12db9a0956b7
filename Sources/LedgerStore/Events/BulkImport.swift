import Foundation
import LedgerCore
import Logging
import NIOCore
import PostgresNIO

/// A bulk import's batches, computed outside the append lock so that the next batch's Swift work (positions,
/// hash chain, COPY rows) runs while PostgreSQL COPYs the one before (docs/event-store.md, "Import").
///
/// `prepare` reads the heads of the batch's streams, its stored keys and the log's end (no lock), lays the
/// batch on top of what the batch before it will leave (`Belief`, not committed yet) and encodes its rows.
/// `commit` takes the append lock and COPYs the rows only if the log still ends where the batch was computed
/// to follow; otherwise (another writer appended meanwhile, or the batch before did not commit as prepared)
/// the batch is written as `EventStore.importBatch` writes it, computed under the lock. Either way each batch
/// is one transaction: all of it or nothing, and a key already stored is skipped, so a re-run stores nothing twice.
public struct BulkImport: Sendable {
    let store: EventStore

    public init(store: EventStore) { self.store = store }

    /// What a prepared batch leaves once committed as prepared: the next batch is computed on it.
    public struct Belief: Sendable {
        /// The log's end before the batch and after it.
        var before: Int64
        var end: Int64
        var recordedAt: Timestamp
        /// The heads of the batch's streams after it, and the keys it stores.
        var heads: [String: AppendWriter.StreamHead]
        var keys: [AppendWriter.IdempotencyKey: (RecordedEvent, [UInt8])]
    }

    /// A batch ready to commit.
    public struct Prepared: Sendable {
        let events: [NewEvent]
        /// The outcome if committed as prepared; nil when it must be computed under the lock (a conflict,
        /// which the lock's view reports with its authority, or a belief the log had already moved past).
        let result: AppendResult?
        /// The log's end the rows follow: checked under the lock.
        let expectedEnd: Int64
        /// The rows as binary COPY tuples of `events` (nil when every event is stored already).
        let rows: BinaryRows?
        public let belief: Belief
    }

    /// What `commit` did.
    public struct Committed: Sendable {
        public var result: AppendResult
        /// False when the batch was computed again under the lock: a batch prepared on its belief must be
        /// prepared again.
        public var asPrepared: Bool
    }

    /// Computes a batch on top of `after` (the batch committing before it, if any).
    public func prepare(_ events: [NewEvent], after previous: Belief?) async throws -> Prepared {
        precondition(!events.isEmpty, "an import batch needs at least one event")
        let writer = AppendWriter(logger: store.logger)
        let subscribers = Set(events.map(\.subscriberID))
        // The heads and the end first, the keys after: a key stored in between comes with a later position,
        // which the end check under the lock refuses.
        let (heads, end, clock, stored, catalog) = try await StoreError.mapping {
            try await store.database.withConnection { connection in
                let (heads, end, clock) = try await writer.tail(subscribers, on: connection)
                let stored = try await writer.storedByIdempotencyKey(events, on: connection)
                return (heads, end, clock, stored, try await BinaryCopy.ColumnTypes.load(["events"], on: connection, logger: store.logger))
            }
        }
        var basis = (heads: heads, end: end, recordedAt: clock, stored: stored)
        var usable = true
        if let previous {
            // The read saw the log either without the previous batch (and nothing else since) or with it.
            usable = end == previous.before || end == previous.end
            basis.heads.merge(previous.heads) { _, believed in believed }
            basis.stored.merge(previous.keys) { _, believed in believed }
            basis.end = previous.end
            basis.recordedAt = max(clock, previous.recordedAt)
        }
        var group = AppendWriter.GroupState(heads: basis.heads, position: basis.end, recordedAt: basis.recordedAt, stored: basis.stored)
        var result: AppendResult?
        if usable {
            do {
                result = try group.take(AppendJob(events: events, replays: .strict), lookUpKeys: true)
            } catch is StoreError {
                result = nil
            }
        }
        var keys: [AppendWriter.IdempotencyKey: (RecordedEvent, [UInt8])] = [:]
        for (row, fingerprint) in zip(group.rows, group.fingerprints) {
            keys[AppendWriter.IdempotencyKey(source: row.source, key: row.idempotencyKey)] = (row, fingerprint)
        }
        let belief = Belief(
            before: basis.end, end: group.position, recordedAt: basis.recordedAt,
            heads: group.heads.filter { subscribers.contains($0.key) }, keys: keys)
        let rows =
            result == nil || group.rows.isEmpty
            ? nil : AppendWriter.copyRows(group.rows, fingerprints: group.fingerprints, texts: group.texts, catalog: catalog)
        return Prepared(events: events, result: result, expectedEnd: basis.end, rows: rows, belief: belief)
    }

    /// Commits a prepared batch: its rows if the log still ends where they follow, else the batch computed
    /// under the lock.
    public func commit(_ prepared: Prepared) async throws -> Committed {
        let logger = store.logger
        if let result = prepared.result {
            let written: Bool
            if let rows = prepared.rows {
                store.memory.forget()
                defer { store.onCommit(Dictionary(prepared.events.map { ($0.subscriberID, Int64(0)) }, uniquingKeysWith: { a, _ in a })) }
                written = try await StoreError.mapping {
                    try await store.database.transaction { connection in
                        try await connection.query("SELECT pg_advisory_xact_lock(\(EventStore.appendLockKey))", logger: logger)
                        let end = try await connection.query("SELECT coalesce(max(position), 0) FROM events", logger: logger)
                            .collect()[0].decode(Int64.self)
                        guard end == prepared.expectedEnd else { return false }
                        try await rows.copy(on: connection, logger: logger)
                        return true
                    }
                }
            } else {
                written = true  // every event stored already: nothing to write
            }
            if written { return Committed(result: result, asPrepared: true) }
            logger.debug("import batch computed again under the lock", metadata: ["import.expected_end": "\(prepared.expectedEnd)"])
        }
        return Committed(result: try await store.importBatch(prepared.events), asPrepared: false)
    }
}
