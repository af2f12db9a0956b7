import ArgumentParser
import Foundation
import GoogleStore
import LedgerCore
import LedgerStore

/// `subledger google import FILE`: purchase tokens (or order ids) of Google Play purchases made before the
/// ledger heard of them, each verified with the Play Developer API and recorded as a submitted purchase.
struct GoogleImport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Record Google Play purchases listed by purchase token or order id, as POST /v1/stores/google/purchases does.",
        discussion: """
            FILE holds one purchase token or order id (GPA.…) a line, or CSV with a header naming purchase_token and/or \
            order_id, and optionally product_id, subscriber_id and package_name. Each purchase is verified with \
            purchases.subscriptionsv2.get (or purchases.products.get for a one-time product, whose product_id the line \
            must give) and recorded under its subscriber: the line's subscriber_id, else the purchase's \
            obfuscatedExternalAccountId, else the subscriber its token is already linked to. Keys come from Google's \
            order ids: importing the file again appends nothing. A bad line stops the import naming its line (the lines \
            before it are recorded: fix it and run the same command again); with --skip-bad-rows it is listed in the \
            --bad-rows report instead. docs/google.md.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup(title: "Google Play") var google: GoogleOptions

    @Argument(help: "The file of purchases ('-' for standard input).")
    var file: String

    @Option(help: "The package the purchases are of (default: the file's package_name column, else the only --google-package-name).")
    var package: String?

    @Flag(help: "Leave out lines that cannot be read or verified, and list them in the --bad-rows report.")
    var skipBadRows = false

    @Option(help: "Where --skip-bad-rows lists the lines it left out (one a line: file, line, reason).")
    var badRows = "google-bad-rows.txt"

    /// Checked while parsing, so that what is missing is said with this command's usage.
    func validate() throws {
        if file != "-" && !FileManager.default.isReadableFile(atPath: file) { throw ValidationError("cannot read \(file)") }
        guard try google.configuration().serviceAccount != nil else { throw Self.noAccount }
    }

    static let noAccount = ValidationError(
        "set --google-service-account-file (or SUBLEDGER_GOOGLE_SERVICE_ACCOUNT_FILE): each purchase is verified with Google")

    /// What an import did.
    struct Summary: Sendable {
        /// Purchase lines read (a header, blank lines and comments are not counted).
        var lines = 0
        /// Purchases recorded (or found already recorded).
        var recorded = 0
        /// Ledger events the purchases added, and those that were already stored.
        var created = 0
        var alreadyPresent = 0
        /// `<file>: line <n>: <why>`, for the lines left out.
        var badRows: [String] = []
    }

    func run() async throws {
        let interactive = isatty(STDERR_FILENO) == 1
        let summary = try await execute { done, total in
            if interactive { FileHandle.standardError.write(Data("\r\(done)/\(total) purchases   ".utf8)) }
        }
        if interactive { FileHandle.standardError.write(Data("\n".utf8)) }
        if skipBadRows {
            guard FileManager.default.createFile(atPath: badRows, contents: Data(summary.badRows.map { "\($0)\n" }.joined().utf8)) else {
                throw CommandFailure("cannot write the bad rows report \(badRows)")
            }
        }
        print(
            "read \(summary.lines) purchases: \(summary.recorded) recorded, \(summary.created) new events "
                + "(\(summary.alreadyPresent) already present), \(summary.badRows.count) bad lines")
        if skipBadRows && !summary.badRows.isEmpty { print("bad lines left out, listed in \(badRows)") }
    }

    /// The import itself, for `run` and the tests; a bad line without --skip-bad-rows is a `CommandFailure` naming it.
    func execute(progress: @escaping @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> Summary {
        let logger = database.makeLogger("subledger.google")
        let name = file == "-" ? "standard input" : file
        let data: Data
        if file == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            // Refused before it is read when it is larger than the limit.
            let size = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
            guard size <= GoogleImportFile.maxBytes, let read = FileManager.default.contents(atPath: file) else {
                throw ValidationError("cannot read \(file), or it is larger than \(GoogleImportFile.maxBytes >> 20) MiB")
            }
            data = read
        }
        guard data.count <= GoogleImportFile.maxBytes else {
            throw ValidationError("\(name) is larger than \(GoogleImportFile.maxBytes >> 20) MiB: split it")
        }
        let lines = GoogleImportFile.parse(String(decoding: data, as: UTF8.self))
        var configuration = try google.configuration()
        guard configuration.serviceAccount != nil else { throw Self.noAccount }
        if let package { configuration.packageNames.insert(package) }
        let fallbackPackage = package ?? (configuration.packageNames.count == 1 ? configuration.packageNames.first : nil)
        configuration.reconcileInterval = nil
        let config = configuration
        let skip = skipBadRows
        return try await withPostgresClient(try await database.url().clientConfiguration(maximumConnections: 4), logger: logger) { pg in
            try await database.requireCurrentSchema(pg, logger: logger)
            return try await AppleAPIOptions.withIntake(pg, logger: logger) { intake in
                let play = GooglePlay(configuration: config, intake: intake, logger: logger)
                var summary = Summary()
                func bad(_ line: Int, _ reason: String) throws {
                    let text = "\(name): line \(line): \(reason)"
                    guard skip else { throw CommandFailure(text) }
                    summary.badRows.append(text)
                }
                for (i, result) in lines.enumerated() {
                    progress(i, lines.count)
                    summary.lines += 1
                    let l: GoogleImportLine
                    switch result {
                    case .failure(let problem):
                        try bad(problem.line, problem.reason)
                        continue
                    case .success(let line): l = line
                    }
                    guard let pkg = l.packageName ?? fallbackPackage, config.packageNames.contains(pkg) else {
                        try bad(
                            l.line,
                            l.packageName.map { "package_name \($0) is not configured (--google-package-name)" } ?? "no package: give --package")
                        continue
                    }
                    let head = try await intake.store.head()
                    do {
                        let (_, events) = try await play.importPurchase(l, package: pkg)
                        summary.recorded += 1
                        let created = events.filter { $0.position > head }.count
                        summary.created += created
                        summary.alreadyPresent += events.count - created
                    } catch let refusal as GooglePlay.ImportRefusal {
                        try bad(l.line, refusal.description)
                    } catch let error as GooglePlayError {
                        // Google unreachable (after the client's retries): stop; a re-run goes on from here.
                        throw CommandFailure("\(name): line \(l.line): \(error); the lines before it are recorded: run the import again")
                    }
                }
                progress(lines.count, lines.count)
                return summary
            }
        }
    }
}
