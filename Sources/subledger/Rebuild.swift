import ArgumentParser
import Foundation
import LedgerStore

struct Rebuild: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Recompute every projection (windows, entitlement state) from the event log.")

    @OptionGroup var database: DatabaseOptions

    @Option(help: "Subscribers per transaction.")
    var chunk = 2000

    func run() async throws {
        let logger = database.makeLogger("subledger.rebuild")
        let interactive = isatty(STDERR_FILENO) == 1
        let chunk = self.chunk
        let started = Date()
        let done = try await withPostgresClient(try await database.url().clientConfiguration(), logger: logger) { client in
            try await database.requireCurrentSchema(client, logger: logger)
            return try await Rebuilder(client: client, logger: logger, chunkSize: chunk).rebuild { p in
                if interactive {
                    let pct = p.totalEvents == 0 ? 100 : p.events * 100 / p.totalEvents
                    FileHandle.standardError.write(
                        Data("\rrebuilding: \(p.subscribers) subscribers, \(p.events)/\(p.totalEvents) events (\(pct)%)".utf8))
                }
            }
        }
        if interactive { FileHandle.standardError.write(Data("\n".utf8)) }
        let seconds = Date().timeIntervalSince(started)
        print("rebuilt \(done.subscribers) subscribers from \(done.events) events in \(String(format: "%.1f", seconds)) s")
    }
}
