import ArgumentParser
import LedgerStore

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Apply pending schema migrations, then every SQL function of schema/functions, in one transaction (refuses if an applied migration was edited)."
    )

    @OptionGroup var database: DatabaseOptions

    @Flag(help: "Only report which migrations are applied and pending, and which SQL functions changed.")
    var status = false

    func run() async throws {
        let logger = database.makeLogger("subledger.migrate")
        let url = try await database.url()
        let schema = try Schema.bundled()
        let status = self.status
        try await withPostgresClient(url.clientConfiguration(), logger: logger) { client in
            let runner = MigrationRunner(client: client, schema: schema, logger: logger)
            if status {
                let s = try await runner.status()
                print("applied: \(s.applied.map { String(format: "%04d", $0) }.joined(separator: ", "))")
                print("pending: \(s.pending.map { String(format: "%04d_%@", $0.version, $0.name) }.joined(separator: ", "))")
                print("functions pending: \(s.pendingFunctions.map(\.name).joined(separator: ", "))")
                for problem in s.problems { print("problem: \(problem)") }
                if !s.problems.isEmpty { throw ExitCode(1) }
                return
            }
            do {
                let outcome = try await runner.migrate()
                for f in outcome.functions { print("applied function \(f.name)") }
                if outcome.migrations.isEmpty {
                    print("schema is current (\(schema.migrations.count) migrations, \(schema.functions.count) functions)")
                } else {
                    for m in outcome.migrations { print("applied \(String(format: "%04d", m.version))_\(m.name)") }
                    // Projections are derived data and a migration may add or reshape them (0005 added the
                    // report facts): refold every stream so they match the new schema at once.
                    let rebuilt = try await Rebuilder(client: client, logger: logger).rebuild()
                    if rebuilt.events > 0 { print("rebuilt projections: \(rebuilt.subscribers) subscribers, \(rebuilt.events) events") }
                }
            } catch let error as MigrationError {
                throw CommandFailure("\(error)")
            }
        }
    }
}
