import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore
import PostgresNIO

struct Import: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        // `subledger import FILE.jsonl` (the default of `ImportCommands`) or `subledger import jsonl FILE.jsonl`.
        commandName: "jsonl",
        abstract: "Bulk-load historical events from JSON Lines (one event per line) with COPY; projections are rebuilt after.",
        discussion: """
            Each line is validated like a POST /v1/events body (the catalog fills in what a purchase leaves out), \
            keeps its own idempotency key (lines already imported are skipped, so an interrupted import can be \
            run again), and gets the ledger's positions and hash chain. A bad line stops the import naming its \
            line number; nothing of its batch is stored (earlier batches are). `subledger import revenuecat` reads \
            RevenueCat's exports the same way.
            """)

    @OptionGroup var database: DatabaseOptions

    @Argument(help: "The .jsonl file ('-' for standard input).")
    var file: String

    @Option(help: "Lines per transaction.")
    var batch = 5000

    func validate() throws {
        guard file == "-" || FileManager.default.isReadableFile(atPath: file) else {
            throw ValidationError("cannot read \(file)")
        }
    }

    func run() async throws {
        let logger = database.makeLogger("subledger.import")
        guard let handle = file == "-" ? FileHandle.standardInput : FileHandle(forReadingAtPath: file) else {
            throw CommandFailure("cannot open \(file)")
        }
        let batchSize = max(1, batch)
        let interactive = isatty(STDERR_FILENO) == 1
        let started = Date()
        let summary = try await withPostgresClient(try await database.url().clientConfiguration(maximumConnections: 4), logger: logger) { client in
            try await database.requireCurrentSchema(client, logger: logger)
            let store = EventStore(client: client, logger: logger)
            let intake = EventIntake(
                store: store, catalog: CatalogStore(client: client, logger: logger), database: Database(client: client, logger: logger))
            let reader = ImportBatchReader(lines: LineReader(handle: handle), batchSize: batchSize, intake: intake)
            let importer = BulkImport(store: store)
            var created = 0
            var present = 0
            var numbers: [Int] = []
            /// A store error of the batch of lines `numbers`, naming them (nothing of them was stored).
            func failure(_ error: any Error) -> any Error {
                guard let error = error as? StoreError else { return error }
                let span = "nothing of lines \(numbers[0])–\(numbers.last!) was stored"
                switch error {
                case .versionConflict(_, _, _, let index?), .idempotencyConflict(_, _, let index?):
                    return CommandFailure("line \(numbers[index]): \(error) (\(span))")
                default:
                    return CommandFailure("\(error) (\(span))")
                }
            }
            // Three stages overlap: the batch after next is read and validated, the next is prepared (positions,
            // chain, COPY rows) on what the current one will leave, and the current one is COPYed.
            var next = Task { try await reader.next() }
            defer { next.cancel() }
            var current = try await next.value
            var prepared: BulkImport.Prepared?
            if let batch = current {
                next = Task { try await reader.next() }
                numbers = batch.numbers
                do { prepared = try await importer.prepare(batch.events, after: nil) } catch { throw failure(error) }
            }
            while let batch = current, let writing = prepared {
                present += batch.duplicates
                let committing = Task { try await importer.commit(writing) }
                let following: ImportBatchReader.Batch?
                var preparedNext: Result<BulkImport.Prepared, any Error>?
                let clock = ContinuousClock()
                var waited = (read: Duration.zero, prepare: Duration.zero, commit: Duration.zero)
                var mark = clock.now
                do {
                    following = try await next.value
                    waited.read = clock.now - mark
                } catch {
                    // A bad line after this batch: this batch is still stored (or fails first), as without the overlap.
                    do { _ = try await committing.value } catch let stored { throw failure(stored) }
                    throw error
                }
                mark = clock.now
                if let following {
                    next = Task { try await reader.next() }
                    do {
                        preparedNext = .success(try await importer.prepare(following.events, after: writing.belief))
                    } catch {
                        preparedNext = .failure(error)
                    }
                }
                waited.prepare = clock.now - mark
                mark = clock.now
                let committed: BulkImport.Committed
                do { committed = try await committing.value } catch { throw failure(error) }
                waited.commit = clock.now - mark
                // Which stage the import waits for: reading, preparing the next batch, or the COPY and commit.
                logger.debug(
                    "import batch written",
                    metadata: [
                        "import.line": "\(numbers.last!)", "import.as_prepared": "\(committed.asPrepared)",
                        "import.read_wait": "\(waited.read)", "import.prepare": "\(waited.prepare)", "import.commit_wait": "\(waited.commit)",
                    ])
                created += committed.result.createdCount
                present += batch.events.count - committed.result.createdCount
                if interactive {
                    let rate = Double(created) / max(Date().timeIntervalSince(started), 0.001)
                    FileHandle.standardError.write(Data("\rimported \(created) events (line \(numbers.last!), \(Int(rate)) events/s)".utf8))
                }
                current = following
                guard let following, let preparedNext else { break }
                numbers = following.numbers
                do {
                    // Prepared on a batch that was computed again under the lock: prepared again on the log as it is.
                    prepared =
                        committed.asPrepared ? try preparedNext.get() : try await importer.prepare(following.events, after: nil)
                } catch { throw failure(error) }
            }
            present += reader.trailingDuplicates
            if interactive { FileHandle.standardError.write(Data("\nrebuilding projections…\n".utf8)) }
            let rebuilt = try await Rebuilder(client: client, logger: logger).rebuild()
            return (reader.lineNumber, created, present, rebuilt.subscribers)
        }
        let seconds = Date().timeIntervalSince(started)
        print(
            "imported \(summary.1) events (\(summary.2) already present) from \(summary.0) lines in \(String(format: "%.1f", seconds)) s; projections of \(summary.3) subscribers rebuilt"
        )
    }
}

/// Turns the file into validated batches, one call at a time.
///
/// `@unchecked Sendable`: the import hands it to one task after another (the next batch is read while the
/// previous one is written), never to two at once.
final class ImportBatchReader: @unchecked Sendable {
    struct Batch {
        var events: [NewEvent]
        var numbers: [Int]
        /// Lines skipped because an earlier line of the same batch is the same event.
        var duplicates: Int
    }

    private var lines: LineReader
    let batchSize: Int
    let intake: EventIntake
    private(set) var lineNumber = 0
    /// Duplicate lines after the last batch (none in practice: a batch ends on an event).
    private(set) var trailingDuplicates = 0

    init(lines: LineReader, batchSize: Int, intake: EventIntake) {
        self.lines = lines
        self.batchSize = batchSize
        self.intake = intake
    }

    /// The next batch, validated and filled in from the catalog, or nil at the end of the file.
    func next() async throws -> Batch? {
        var batch = Batch(events: [], numbers: [], duplicates: 0)
        var seen: [String: (line: Int, fingerprint: [UInt8])] = [:]
        while batch.events.count < batchSize, let line = lines.next() {
            lineNumber += 1
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
            let event: NewEvent
            do {
                let request = try AppendRequest.decode(line, validateData: false)
                guard !request.isBatch else { throw CommandFailure("line \(lineNumber): one event per line, not {\"events\": [...]}") }
                event = request.events[0]
            } catch let error as AppendRequest.DecodeError {
                switch error {
                case .malformed(let e): throw CommandFailure("line \(lineNumber): not valid JSON: \(e)")
                case .invalid(let e): throw CommandFailure("line \(lineNumber): \(e)")
                }
            }
            let key = "\(event.source)\u{0}\(event.idempotencyKey)"
            if let earlier = seen[key] {
                guard earlier.fingerprint == event.fingerprint else {
                    throw CommandFailure(
                        "line \(lineNumber): idempotency_key \"\(event.idempotencyKey)\" was used for a different event on line \(earlier.line)")
                }
                batch.duplicates += 1
                continue
            }
            seen[key] = (lineNumber, event.fingerprint)
            batch.events.append(event)
            batch.numbers.append(lineNumber)
        }
        guard !batch.events.isEmpty else {
            trailingDuplicates += batch.duplicates
            return nil
        }
        // The intake's own preparation (catalog fill, validation); an error names the line.
        do {
            try await intake.prepare(&batch.events) { "events[\($0)]" }
        } catch let error as EventValidationError {
            // `events[i].data.x` → `line N: data.x`
            let field = error.field
            guard field.hasPrefix("events["), let close = field.firstIndex(of: "]"),
                let i = Int(field[field.index(field.startIndex, offsetBy: 7)..<close]), batch.numbers.indices.contains(i)
            else { throw CommandFailure("\(error)") }
            let rest = field[field.index(after: close)...].drop { $0 == "." }
            throw CommandFailure("line \(batch.numbers[i]): \(rest): \(error.reason)")
        }
        return batch
    }
}

/// Reads a file line by line in 1 MiB chunks (constant memory for any file size).
struct LineReader {
    let handle: FileHandle
    var buffer: [UInt8] = []
    var start = 0
    var eof = false

    init(handle: FileHandle) { self.handle = handle }

    mutating func next() -> ArraySlice<UInt8>? {
        while true {
            if let newline = buffer[start...].firstIndex(of: 0x0A) {
                let line = buffer[start..<newline]
                start = newline + 1
                return line
            }
            if eof {
                guard start < buffer.count else { return nil }
                let line = buffer[start...]
                start = buffer.count
                return line
            }
            buffer.removeFirst(start)
            start = 0
            let chunk = handle.readData(ofLength: 1 << 20)
            if chunk.isEmpty { eof = true } else { buffer += chunk }
        }
    }
}
