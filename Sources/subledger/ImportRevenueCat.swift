import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore
import PostgresNIO

/// `subledger import FILE.jsonl` (JSON Lines, the default) and `subledger import revenuecat FILE.csv…`.
struct ImportCommands: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Bulk-load history: the ledger's own JSON Lines (the default), or RevenueCat's exports.",
        subcommands: [Import.self, ImportRevenueCat.self],
        defaultSubcommand: Import.self)
}

/// `subledger import revenuecat FILE.csv…`: RevenueCat's scheduled transactions exports (versions 5–7).
struct ImportRevenueCat: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revenuecat",
        abstract: "Import RevenueCat's scheduled transactions exports (data export versions 5, 6 and 7, CSV).",
        discussion: """
            Each row becomes the ledger events it stands for (purchase or renewal with its own period and money, \
            refund, auto-renew off, billing issue, expiration), source the row's store, subscriber the row's \
            rc_original_app_user_id, through the same path as `subledger import` (validation, COPY, one rebuild \
            of the projections at the end). Keys come from the stores' transaction ids: importing a file again \
            appends nothing, and a later delivery of updated rows appends only what is new. A bad row stops the \
            import naming its line, column and field (earlier batches stay stored: fix the row and run it again); \
            with --skip-bad-rows it is written to the --bad-rows report instead. The mapping: docs/switching.md.
            """)

    @OptionGroup var database: DatabaseOptions

    @Argument(help: "The export files (.csv; '-' for standard input), in delivery order.")
    var files: [String]

    @Option(help: "Events per transaction.")
    var batch = 5000

    @Flag(help: "Leave out rows that cannot be read or mapped, and list them in the --bad-rows report.")
    var skipBadRows = false

    @Option(help: "Where --skip-bad-rows lists the rows it left out (one line each: file, line, column, field, reason).")
    var badRows = "revenuecat-bad-rows.txt"

    @Option(
        help: ArgumentHelp(
            "When the export's knowledge stands, for rows without updated_at (RFC 3339; default: now).",
            discussion: "A subscription whose period ended by then with auto-renew off or a billing issue gets its expiration."))
    var asOf: String?

    func validate() throws {
        guard !files.isEmpty else { throw ValidationError("name at least one export file") }
        for file in files where file != "-" && !FileManager.default.isReadableFile(atPath: file) {
            throw ValidationError("cannot read \(file)")
        }
        if let asOf, (try? Timestamp(rfc3339: asOf)) == nil { throw ValidationError("--as-of must be an RFC 3339 time") }
    }

    func run() async throws {
        let logger = database.makeLogger("subledger.import.revenuecat")
        let asOfTime = try asOf.map { try Timestamp(rfc3339: $0) } ?? Timestamp(microseconds: Int64(Date().timeIntervalSince1970 * 1_000_000))
        var inputs: [RevenueCatImport.Input] = []
        for file in files {
            guard let handle = file == "-" ? FileHandle.standardInput : FileHandle(forReadingAtPath: file) else {
                throw CommandFailure("cannot open \(file)")
            }
            let chunks = ChunkSource(handle: handle)
            inputs.append(RevenueCatImport.Input(name: file == "-" ? "standard input" : file) { chunks.next() })
        }
        let interactive = isatty(STDERR_FILENO) == 1
        let started = Date()
        let summary: RevenueCatImport.Summary
        let progress: (@Sendable (RevenueCatImport.Progress) -> Void)?
        if interactive {
            progress = { p in
                let rate = Double(p.rows) / max(Date().timeIntervalSince(started), 0.001)
                let line = "\r\(p.file): line \(p.line), \(p.rows) rows, \(p.created) new events (\(Int(rate)) rows/s)   "
                FileHandle.standardError.write(Data(line.utf8))
            }
        } else {
            progress = nil
        }
        let options = RevenueCatImport.Options(batchSize: batch, skipBadRows: skipBadRows, asOf: asOfTime)
        let configuration = try await database.url().clientConfiguration(maximumConnections: 4)
        let files = inputs
        do {
            summary = try await withPostgresClient(configuration, logger: logger) { client in
                try await database.requireCurrentSchema(client, logger: logger)
                return try await RevenueCatImport(client: client, logger: logger).run(files, options: options, progress: progress)
            }
        } catch let failure as RevenueCatImport.Failure {
            if interactive { FileHandle.standardError.write(Data("\n".utf8)) }
            throw CommandFailure(failure.description)
        }
        if interactive { FileHandle.standardError.write(Data("\n".utf8)) }
        if skipBadRows {
            let report = summary.badRows.map { "\($0)\n" }.joined()
            guard FileManager.default.createFile(atPath: badRows, contents: Data(report.utf8)) else {
                throw CommandFailure("cannot write the bad rows report \(badRows)")
            }
        }
        let seconds = Date().timeIntervalSince(started)
        for file in summary.files { print("\(file.name): data export version \(file.version), \(file.rows) rows") }
        print(
            "imported \(summary.created) events (\(summary.alreadyPresent) already present) from \(summary.rows) rows in "
                + "\(String(format: "%.1f", seconds)) s (\(Int(Double(summary.rows) / max(seconds, 0.001))) rows/s); "
                + "projections of \(summary.subscribersRebuilt) subscribers rebuilt")
        if skipBadRows { print("\(summary.badRows.count) bad rows left out, listed in \(badRows)") }
    }
}

/// A file's bytes in 1 MiB chunks.
final class ChunkSource: @unchecked Sendable {
    let handle: FileHandle
    init(handle: FileHandle) { self.handle = handle }
    func next() -> [UInt8] { [UInt8](handle.readData(ofLength: 1 << 20)) }
}
