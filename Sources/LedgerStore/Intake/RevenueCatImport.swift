import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// `subledger import revenuecat`: RevenueCat transactions exports through the import path of `subledger import`
/// (the intake's `prepare`, then COPY in batches, then one rebuild of the projections).
///
/// Each row is read and mapped on its own (`RevenueCatRow`, `RevenueCatMapping`), and every event it maps to
/// is validated right there, so that a bad row is named by its line, column and field (and, with
/// `skipBadRows`, left out and reported without losing the rows around it). Facts already stored stand as
/// stored (`ReplayPolicy.keepStored`): importing a file again appends nothing, and a later delivery of updated
/// rows appends only the facts that are new.
public struct RevenueCatImport: Sendable {
    public struct Options: Sendable {
        public var batchSize: Int
        public var skipBadRows: Bool
        /// When the export's knowledge stands for rows without `updated_at` (see `RevenueCatMapping`).
        public var asOf: Timestamp

        public init(batchSize: Int = 5000, skipBadRows: Bool = false, asOf: Timestamp) {
            self.batchSize = max(1, batchSize)
            self.skipBadRows = skipBadRows
            self.asOf = asOf
        }
    }

    /// A file to read: its name (for messages) and its bytes, chunk by chunk (empty at the end).
    public struct Input: Sendable {
        public var name: String
        public var read: @Sendable () -> [UInt8]

        public init(name: String, read: @escaping @Sendable () -> [UInt8]) {
            self.name = name
            self.read = read
        }
    }

    public struct BadRow: Sendable, Hashable, CustomStringConvertible {
        public var file: String
        public var error: RevenueCatRowError
        public var description: String { "\(file): \(error)" }
    }

    public struct Summary: Sendable {
        public var files: [(name: String, version: String, rows: Int)] = []
        public var rows = 0
        public var events = 0
        public var created = 0
        public var alreadyPresent: Int { events - created }
        public var badRows: [BadRow] = []
        public var subscribersRebuilt = 0
    }

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    public struct Progress: Sendable {
        public var file: String
        public var line: Int
        public var rows: Int
        public var created: Int
    }

    let client: PostgresClient
    let logger: Logger

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    public func run(
        _ inputs: [Input], options: Options, progress: (@Sendable (Progress) -> Void)? = nil
    ) async throws -> Summary {
        let database = Database(client: client, logger: logger)
        let store = EventStore(client: client, logger: logger)
        let intake = EventIntake(store: store, catalog: CatalogStore(client: client, logger: logger), database: database)
        var summary = Summary()
        for input in inputs {
            var reader = try Self.reader(for: input)
            guard let headerRecord = try Self.record(&reader, file: input.name) else {
                throw Failure(description: "\(input.name): the file is empty (a RevenueCat export starts with its header line)")
            }
            let header: RevenueCatHeader
            do {
                header = try RevenueCatHeader(headerRecord.fields)
            } catch {
                throw Failure(description: "\(input.name): \(error)")
            }
            logger.info(
                "importing a RevenueCat export",
                metadata: ["file": "\(input.name)", "version": "\(header.version.rawValue)", "columns": "\(header.names.count)"])
            var rows = 0
            var batch: [NewEvent] = []
            var lines: [Int] = []
            func flush() async throws {
                guard !batch.isEmpty else { return }
                defer {
                    batch.removeAll(keepingCapacity: true)
                    lines.removeAll(keepingCapacity: true)
                }
                do {
                    try await intake.prepare(&batch) { "events[\($0)]" }
                } catch let error as EventValidationError {
                    throw Failure(description: "\(input.name): \(Self.lineOf(error, lines: lines)): \(error)")
                }
                let result: AppendResult
                do {
                    result = try await store.importBatch(batch, replays: .keepStored)
                } catch let error as StoreError {
                    throw Failure(
                        description: "\(input.name): \(error) (nothing of lines \(lines.first!)–\(lines.last!) was stored; earlier lines were)")
                }
                summary.created += result.createdCount
                summary.events += batch.count
                progress?(Progress(file: input.name, line: lines.last!, rows: summary.rows + rows, created: summary.created))
            }
            while let record = try Self.record(&reader, file: input.name) {
                rows += 1
                let mapped: [NewEvent]
                do {
                    mapped = try Self.events(record, header: header, asOf: options.asOf)
                } catch let error {
                    guard options.skipBadRows else { throw Failure(description: "\(input.name): \(error)") }
                    summary.badRows.append(BadRow(file: input.name, error: error))
                    logger.warning("skipped a bad row", metadata: ["file": "\(input.name)", "error": "\(error)"])
                    continue
                }
                batch += mapped
                lines += Array(repeating: record.line, count: mapped.count)
                if batch.count >= options.batchSize { try await flush() }
            }
            try await flush()
            summary.rows += rows
            summary.files.append((input.name, header.version.rawValue, rows))
        }
        if summary.created > 0 {
            summary.subscribersRebuilt = try await Rebuilder(client: client, logger: logger).rebuild().subscribers
        }
        logger.info(
            "RevenueCat import done",
            metadata: [
                "rows": "\(summary.rows)", "created": "\(summary.created)", "present": "\(summary.alreadyPresent)",
                "bad_rows": "\(summary.badRows.count)",
            ])
        return summary
    }

    /// One row's events, each validated as the intake will (so a refusal names the row).
    static func events(_ record: CSVRecordReader.Record, header: RevenueCatHeader, asOf: Timestamp) throws(RevenueCatRowError) -> [NewEvent] {
        let row = try RevenueCatRow(fields: record.fields, line: record.line, header: header)
        let events: [NewEvent]
        do {
            events = try RevenueCatMapping.events(for: row, asOf: asOf)
        } catch {
            var e = error
            if e.column == nil { e.column = header.column(e.field).map { $0 + 1 } }
            throw e
        }
        for event in events {
            do {
                try EventDataValidator.validate(type: event.type, data: event.data, occurredAt: event.occurredAt, path: "data")
            } catch {
                throw RevenueCatRowError(
                    line: record.line, column: nil, field: "its \(event.type.rawValue) event's \(error.field)", reason: error.reason)
            }
        }
        return events
    }

    static func lineOf(_ error: EventValidationError, lines: [Int]) -> String {
        let field = error.field
        guard field.hasPrefix("events["), let close = field.firstIndex(of: "]"),
            let i = Int(field[field.index(field.startIndex, offsetBy: 7)..<close]), lines.indices.contains(i)
        else { return "a batch" }
        return "line \(lines[i])"
    }

    static func record(_ reader: inout CSVRecordReader, file: String) throws -> CSVRecordReader.Record? {
        do {
            return try reader.next()
        } catch {
            throw Failure(description: "\(file): \(error)")
        }
    }

    /// A reader whose delimiter is the header's: RevenueCat writes `,` (CSV) or `;` (older deliveries).
    static func reader(for input: Input) throws -> CSVRecordReader {
        let first = input.read()
        let headerLine = first.prefix { $0 != 0x0A }
        let semicolons = headerLine.count(where: { $0 == UInt8(ascii: ";") })
        let commas = headerLine.count(where: { $0 == UInt8(ascii: ",") })
        let pending = PendingChunk(first)
        return CSVRecordReader(delimiter: semicolons > commas ? UInt8(ascii: ";") : UInt8(ascii: ",")) {
            pending.take() ?? input.read()
        }
    }
}

/// The first chunk, read to find the delimiter, handed to the reader once.
private final class PendingChunk: @unchecked Sendable {
    private var chunk: [UInt8]?
    init(_ chunk: [UInt8]) { self.chunk = chunk }
    func take() -> [UInt8]? {
        defer { chunk = nil }
        return chunk
    }
}
