import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// Recomputes every projection from the log into fresh tables and swaps them in (schema 0006).
///
/// One transaction does it all, so a failed rebuild leaves the projections as they were. A reader streams
/// every event once, in subscriber order, from a REPEATABLE READ snapshot (the log up to position `seen`),
/// folds each subscriber as its stream ends, and hands the rows over in batches that the writer COPYs into
/// index-less shadow tables while the reader goes on. The shadows' indexes are then built by sorting, and only
/// then is the append lock taken: the shadows replace the tables and the subscribers that appends touched
/// after `seen` are refolded there. Appends wait for the swap and that catch-up, not for the rebuild; readers
/// read the old tables until the swap. See docs/event-store.md, "Rebuild".
public struct Rebuilder: Sendable {
    public struct Progress: Sendable {
        public var subscribers: Int
        public var events: Int
        public var totalEvents: Int
    }

    /// Serializes rebuilds (they share the shadow tables' names).
    static let rebuildLockKey: Int64 = 0x5355_424C_5245_4255

    let database: Database
    let chunkSize: Int

    /// `chunkSize`: subscribers per COPY batch handed from the reader to the writer.
    public init(database: Database, chunkSize: Int = 2000) {
        self.database = database
        self.chunkSize = max(1, chunkSize)
    }

    public init(client: PostgresClient, logger: Logger, chunkSize: Int = 2000) {
        self.init(database: Database(client: client, logger: logger), chunkSize: chunkSize)
    }

    @discardableResult
    public func rebuild(progress: (@Sendable (Progress) -> Void)? = nil) async throws -> Progress {
        let logger = database.logger
        let database = self.database
        let chunkSize = self.chunkSize
        let clock = ContinuousClock()
        let started = clock.now
        @Sendable func phase(_ name: String) {
            logger.debug("rebuild phase done", metadata: ["rebuild.phase": "\(name)", "rebuild.elapsed": "\(clock.now - started)"])
        }
        return try await database.transaction { writer in
            try await writer.query("SELECT pg_advisory_xact_lock(\(Self.rebuildLockKey))", logger: logger)
            try await writer.query("SELECT subledger_rebuild_prepare()", logger: logger)
            // The shadows' column types, for the binary COPY of every row.
            let catalog = try await BinaryCopy.ColumnTypes.load(
                (ProjectionTable.allCases.map(\.name) + RollupRows.tables).map { "rebuild_" + $0 }, on: writer, logger: logger)
            let (seen, done, rollup) = try await database.withConnection { reader in
                try await Self.load(
                    from: reader, into: writer, catalog: catalog, chunkSize: chunkSize, logger: logger, progress: progress)
            }
            for rows in RollupRows.rows(rollup, { BinaryRows(table: "rebuild_" + $0, catalog: catalog) }) {
                try await rows.copy(on: writer, logger: logger)
            }
            phase("load")
            // Each index is built by one sort; with the default 64 MB a million-row sort spills to disk.
            try await writer.query("SET LOCAL maintenance_work_mem = '256MB'", logger: logger)
            try await writer.query("SELECT subledger_rebuild_index()", logger: logger)
            phase("index")
            // Column statistics for the new tables, so that the first reports after a rebuild (an import) are
            // planned on them: before autovacuum got to it, MRR on ten million events took 0.7 s instead of 10 ms.
            var tables: [String] = []
            for try await table in try await writer.query("SELECT unnest(subledger_projection_tables())", logger: logger)
                .decode(String.self)
            {
                tables.append(table)
            }
            for table in tables { try await writer.query("ANALYZE \(unescaped: "rebuild_" + table)", logger: logger) }
            phase("analyze")
            try await writer.query("SELECT pg_advisory_xact_lock(\(EventStore.appendLockKey))", logger: logger)
            try await writer.query("SELECT subledger_rebuild_swap()", logger: logger)
            // The new report facts and cells hold every event up to `seen`: `ReportRollupWorker` follows the log
            // from there. The subscribers' own tables are brought to the log's end here, under the append lock.
            try await writer.query("DELETE FROM report_rollup_queue", logger: logger)
            var moved: [String] = []
            let rows = try await writer.query(
                "SELECT DISTINCT subscriber_id FROM events WHERE position > \(seen)", logger: logger)
            for try await s in rows.decode(String.self) { moved.append(s) }
            try await ProjectionWriter(logger: logger).refold(moved, on: writer)
            try await writer.query("UPDATE report_rollup_state SET complete = true, applied_position = \(seen)", logger: logger)
            // The day cells' queue was replaced, not moved on: the reporting currency cells are computed afresh
            // (`ConvertedRevenueCells.refresh`, which the CLI runs after a rebuild and the server's worker runs).
            try await writer.query("UPDATE report_fx_cells SET complete = false", logger: logger)
            try await writer.query("UPDATE report_fx_ltv_state SET complete = false", logger: logger)
            // Delivered at commit: every server's entitlement cache forgets the old tables' ledgers.
            try await writer.query(
                "SELECT pg_notify(\(ProjectionChanges.channel), \(ProjectionChanges.resetPayload))", logger: logger)
            phase("swap")
            return done
        }
    }

    /// Streams the log from one snapshot, folds it and COPYs the rows into the shadow tables; returns the last
    /// position of that snapshot and what was folded.
    ///
    /// Three stages overlap: this task reads rows and cuts them into batches of whole streams; up to
    /// `foldersInFlight` tasks decode and fold batches in parallel; one writer COPYs the folded batches in
    /// order. Memory holds at most a few batches.
    private static func load(
        from reader: PostgresConnection, into writer: PostgresConnection, catalog: BinaryCopy.ColumnTypes, chunkSize: Int,
        logger: Logger,
        progress: (@Sendable (Progress) -> Void)?
    ) async throws -> (Int64, Progress, ReportRollup) {
        try await reader.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
        var folding: [Task<FoldedBatch, any Error>] = []
        var writing: Task<Void, any Error>?
        do {
            let (seen, total) = try await reader.query(
                "SELECT coalesce(max(position), 0), count(*) FROM events", logger: logger
            ).collect()[0].decode((Int64, Int64).self)
            var done = Progress(subscribers: 0, events: 0, totalEvents: Int(total))
            var rollup = ReportRollup()
            var batch: [PostgresRow] = []
            var subscribersInBatch = 0
            var lastSubscriber: ByteBuffer?

            func write(_ folded: Task<FoldedBatch, any Error>) async throws {
                let result = try await folded.value
                try await writing?.value
                done.subscribers += result.rows.subscribers
                done.events += result.events
                rollup.add(result.rollup)
                progress?(done)
                writing = Task { try await result.rows.copy(on: writer, logger: logger) }
            }
            func handOver() async throws {
                let rows = batch
                batch = []
                subscribersInBatch = 0
                folding.append(Task { try fold(rows, catalog: catalog) })
                if folding.count > foldersInFlight { try await write(folding.removeFirst()) }
            }

            let rows = try await reader.query(
                "SELECT \(unescaped: EventRow.foldColumns) FROM events ORDER BY subscriber_id, version", logger: logger)
            for try await row in rows {
                var cells = row.makeIterator()
                let subscriber = cells.next()?.bytes
                if subscriber != lastSubscriber {
                    if subscribersInBatch >= chunkSize { try await handOver() }
                    subscribersInBatch += 1
                    lastSubscriber = subscriber
                }
                batch.append(row)
            }
            if !batch.isEmpty { try await handOver() }
            while !folding.isEmpty { try await write(folding.removeFirst()) }
            try await writing?.value
            try await reader.query("COMMIT", logger: logger)
            return (seen, done, rollup)
        } catch {
            for task in folding { task.cancel() }
            _ = try? await writing?.value
            _ = try? await reader.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    /// Batches being folded while the next is read and the previous written (the machine's cores are shared
    /// with PostgreSQL's reading and writing backends).
    private static let foldersInFlight = 2

    private struct FoldedBatch: Sendable {
        var rows: ProjectionCopyRows
        var events: Int
        /// The rollups' cells of the batch's subscribers, summed.
        var rollup: ReportRollup
    }

    /// Decodes a batch of whole streams (rows in subscriber and version order) and folds each stream.
    private static func fold(_ rows: [PostgresRow], catalog: BinaryCopy.ColumnTypes) throws -> FoldedBatch {
        var out = ProjectionCopyRows(catalog: catalog, prefix: "rebuild_")
        var rollup = ReportRollup()
        var stream: [FoldEvent] = []
        func flush() {
            guard let last = stream.last else { return }
            let ledger = Fold.fold(stream)
            let facts = SubscriberFacts.derive(events: stream, ledger: ledger)
            rollup.add(facts)
            out.append(
                ProjectionWriter.Folded(
                    subscriber: last.subscriberID, version: last.version, ledger: ledger, facts: facts))
            stream.removeAll(keepingCapacity: true)
        }
        for row in rows {
            let event = try EventRow.decodeForFold(row)
            if let last = stream.last, last.subscriberID != event.subscriberID { flush() }
            stream.append(event)
        }
        flush()
        return FoldedBatch(rows: out, events: rows.count, rollup: rollup)
    }
}
