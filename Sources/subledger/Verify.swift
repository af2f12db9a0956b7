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
        let (result, sealed) = try await withPostgresClient(try await database.url().clientConfiguration(), logger: logger) { client in
            try await database.requireCurrentSchema(client, logger: logger)
            let chains = try await ChainVerifier(client: client, logger: logger).verify { checked in
                if interactive { FileHandle.standardError.write(Data("\rchecked \(checked) events".utf8)) }
            }
            return (chains, try await CheckpointStore(client: client, logger: logger).verify())
        }
        if interactive { FileHandle.standardError.write(Data("\n".utf8)) }
        print("events checked: \(result.eventsChecked), streams: \(result.streamsChecked), checkpoints: \(sealed.checked)")
        if !sealed.broken.isEmpty {
            print("BROKEN CHECKPOINTS: \(sealed.broken.map(String.init).joined(separator: ", ")) no longer match the stored stream heads")
        }
        guard let broken = result.firstBroken else {
            if !sealed.broken.isEmpty { throw ExitCode(2) }
            print("ok: every chain verifies")
            return
        }
        print(
            "BROKEN: \(result.breaks.count) event(s); first: event \(broken.eventID.lowercasedString) (subscriber \(broken.subscriberID), version \(broken.version), position \(broken.position)): \(broken.reason)"
        )
        throw ExitCode(2)
    }
}
