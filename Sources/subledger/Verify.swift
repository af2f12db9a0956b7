import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore

struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Recompute every subscriber's hash chain; exits non-zero and names the first broken event.")

    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let logger = database.makeLogger("subledger.verify")
        let interactive = isatty(STDERR_FILENO) == 1
        let result = try await withPostgresClient(try database.url().clientConfiguration(), logger: logger) { client in
            try await ChainVerifier(client: client, logger: logger).verify { checked in
                if interactive { FileHandle.standardError.write(Data("\rchecked \(checked) events".utf8)) }
            }
        }
        if interactive { FileHandle.standardError.write(Data("\n".utf8)) }
        print("events checked: \(result.eventsChecked), streams: \(result.streamsChecked)")
        guard let broken = result.firstBroken else {
            print("ok: every chain verifies")
            return
        }
        print("BROKEN: \(result.breaks.count) event(s); first: event \(broken.eventID.uuidString.lowercased()) (subscriber \(broken.subscriberID), version \(broken.version), position \(broken.position)): \(broken.reason)")
        throw ExitCode(2)
    }
}
