import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore

struct Keys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage API keys (stored as SHA-256 hashes; a key is shown once, when created).",
        subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a key; its secret is the last line printed.")

        @OptionGroup var database: DatabaseOptions

        @Option(help: "writer, reader, auditor, analyst or admin")
        var role: String

        @Option(help: "A label for people (who or what uses the key).")
        var name: String?

        func validate() throws {
            guard APIRole(rawValue: role) != nil else {
                throw ValidationError("--role must be one of \(APIRole.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }

        func run() async throws {
            guard let role = APIRole(rawValue: role) else { throw CommandFailure("unknown role '\(self.role)'") }
            let logger = database.makeLogger("subledger.keys")
            let name = self.name ?? "\(role.rawValue) key"
            let (key, secret) = try await withPostgresClient(try await database.url().clientConfiguration(), logger: logger) { client in
                try await database.requireCurrentSchema(client, logger: logger)
                return try await APIKeyStore(client: client, logger: logger).create(role: role, name: name)
            }
            print("created key \(key.keyID) (role \(key.role.rawValue), name \"\(key.name)\"); the secret is shown only now:")
            print(secret)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List keys (never their secrets).")

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            let logger = database.makeLogger("subledger.keys")
            let keys = try await withPostgresClient(try await database.url().clientConfiguration(), logger: logger) { client in
                try await APIKeyStore(client: client, logger: logger).list()
            }
            for key in keys {
                let state = key.revokedAt.map { "revoked \($0)" } ?? "active"
                print("\(key.keyID)  \(key.role.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0))  \(state)  \(key.name)")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a key by its id (from 'keys list').")

        @OptionGroup var database: DatabaseOptions

        @Argument(help: "The key id.")
        var keyID: String

        func validate() throws {
            guard UUID(uuidString: keyID) != nil else { throw ValidationError("'\(keyID)' is not a key id (a UUID)") }
        }

        func run() async throws {
            guard let id = UUID(uuidString: keyID) else { throw CommandFailure("'\(keyID)' is not a key id (a UUID)") }
            let logger = database.makeLogger("subledger.keys")
            let revoked = try await withPostgresClient(try await database.url().clientConfiguration(), logger: logger) { client in
                try await APIKeyStore(client: client, logger: logger).revoke(keyID: id)
            }
            guard revoked else { throw CommandFailure("no active key has id \(id)") }
            print("revoked \(id)")
        }
    }
}
