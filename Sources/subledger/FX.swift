import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore
import PostgresNIO

struct FX: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fx",
        abstract: "Exchange rates for reports in one reporting currency (docs/reports.md, \"Reporting currency\").",
        subcommands: [FXImport.self])
}

struct FXImport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Store exchange rates from a CSV in the European Central Bank's history layout (Date,USD,JPY,… per 1 EUR).",
        discussion: """
            The same parser, limits and store as PUT /v1/fx/rates: rates new or different from the stored ones \
            become one new version (a stored rate is never changed); a file that changes nothing creates no \
            version. ECB's file: https://www.ecb.europa.eu/stats/eurofxref/eurofxref-hist.zip (unzipped); a \
            sample is in tools/data/fx/.
            """)

    @OptionGroup var database: DatabaseOptions

    @Argument(help: "The CSV file ('-' for standard input).")
    var file: String

    func run() async throws {
        let logger = database.makeLogger("subledger.fx")
        let data: Data
        if file == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            guard let read = FileManager.default.contents(atPath: file) else { throw CommandFailure("cannot read \(file)") }
            data = read
        }
        let rows: [FXRateRow]
        do {
            rows = try FXUpload.ecbCSV(Array(data))
        } catch {
            throw CommandFailure("\(file): \(error); nothing was stored")
        }
        let label = String((file == "-" ? "stdin" : (file as NSString).lastPathComponent).prefix(200))
        let (result, computed) = try await withPostgresClient(try await database.url().clientConfiguration(maximumConnections: 2), logger: logger) {
            client in
            try await database.requireCurrentSchema(client, logger: logger)
            let result = try await FXStore(client: client, logger: logger).upload(rows, origin: "cli", label: label)
            // The reporting currency cells follow the new version before this returns: if a server's worker is at it,
            // wait for it, then do what is left.
            let cells = Database(client: client, logger: logger)
            let computed = try await ConvertedRevenueCells(database: cells).refresh(waiting: true)
            // And the LTV cells (schema 0038), computed afresh at the new version.
            let ltv = try await ConvertedLTVCells(database: cells).refresh(waiting: true)
            return (result, computed + ltv.map { "\($0) LTV" })
        }
        if result.created {
            print(
                "stored rate version \(result.version ?? 0): \(result.added) new, \(result.corrected) corrected, \(result.unchanged) unchanged of \(result.rates) rates"
            )
        } else {
            print("nothing new: all \(result.rates) rates are stored already (version \(result.version.map(String.init) ?? "none"))")
        }
        if !computed.isEmpty {
            let names = computed.map { $0 == ConvertedRevenueDays.ownCurrencies ? "own currencies" : $0 }
            print("reporting currency cells computed: \(names.joined(separator: ", "))")
        }
    }
}
