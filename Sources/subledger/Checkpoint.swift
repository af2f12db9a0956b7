import ArgumentParser
import LedgerCore
import LedgerStore

struct SealCheckpoint: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "checkpoint",
        abstract: "Seal a checkpoint: a Merkle root over every stream head at the current position, printed for auditors.")

    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let logger = database.makeLogger("subledger.checkpoint")
        let sealed = try await withPostgresClient(try await database.url().clientConfiguration(), logger: logger) { client in
            try await database.requireCurrentSchema(client, logger: logger)
            return try await CheckpointStore(client: client, logger: logger).seal()
        }
        print("checkpoint \(sealed.checkpointID) at position \(sealed.position): \(sealed.streams) streams, \(sealed.events) events")
        print("merkle root \(Hex.encode(sealed.merkleRoot))")
    }
}
