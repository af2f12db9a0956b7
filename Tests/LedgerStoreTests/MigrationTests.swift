import Foundation
import LedgerCore
import LedgerTestSupport
import PostgresNIO
import Testing

@testable import LedgerStore

@Suite("Migrations")
struct MigrationTests {
    @Test("schema files are numbered and split into statements")
    func filesLoad() throws {
        let migrations = try TestDatabase.migrations()
        #expect(migrations.first?.version == 1)
        #expect(migrations.map(\.version) == Array(1...migrations.count))
        #expect(migrations.allSatisfy { $0.checksum.count == 64 })
    }

    @Test("the projection write finds the rows it replaces through the subscriber indexes, whatever the cached plan thinks")
    func projectionWriteUsesIndexes() async throws {
        try await TestDatabase.with { client, _ in
            let config = try await client.query(
                "SELECT array_to_string(proconfig, ',') FROM pg_proc WHERE proname = 'subledger_projection_write'",
                logger: TestDatabase.logger
            ).collect().map { try $0.decode(String?.self) }
            #expect(config == ["enable_seqscan=off"])
        }
    }

    @Test("migrate applies pending files once, records checksums, and refuses an edited applied file")
    func migrateAndRefuseEdits() async throws {
        try await TestDatabase.with { client, url in
            let schema = try TestDatabase.schema()
            let migrations = schema.migrations
            // The template is already migrated: nothing pending, status current.
            let runner = MigrationRunner(client: client, schema: schema, logger: TestDatabase.logger)
            #expect(try await runner.status().isCurrent)
            let again = try await runner.migrate()
            #expect(again.migrations.isEmpty && again.functions.isEmpty)
            let recorded = try await client.query("SELECT version, checksum FROM schema_migrations ORDER BY version")
                .collect().map { try $0.decode((Int, String).self) }
            #expect(recorded.map(\.0) == migrations.map(\.version))
            #expect(recorded.map(\.1) == migrations.map(\.checksum))

            var edited = schema
            edited.migrations[0] = Migration(version: 1, name: migrations[0].name, sql: migrations[0].sql + "\n-- an innocent comment\n")
            let refusing = MigrationRunner(client: client, schema: edited, logger: TestDatabase.logger)
            let status = try await refusing.status()
            #expect(!status.isCurrent)
            #expect(status.problems.count == 1)
            await #expect(throws: MigrationError.self) { try await refusing.migrate() }
        }
    }

    @Test("a failing migration applies nothing, not even the pending files before it")
    func failingMigrationIsAtomic() async throws {
        try await TestDatabase.with { client, _ in
            var schema = try TestDatabase.schema()
            let next = (schema.migrations.map(\.version).max() ?? 0) + 1
            schema.migrations.append(Migration(version: next, name: "good", sql: "CREATE TABLE probe_good (x int);"))
            schema.migrations.append(Migration(version: next + 1, name: "bad", sql: "CREATE TABLE probe_bad (x int); SELECT no_such_function();"))
            let runner = MigrationRunner(client: client, schema: schema, logger: TestDatabase.logger)
            let error = await #expect(throws: MigrationError.self) { try await runner.migrate() }
            #expect("\(error!)".contains("no_such_function"))
            let tables = try await client.query(
                "SELECT count(*) FROM pg_tables WHERE tablename IN ('probe_good', 'probe_bad')"
            ).collect()[0].decode(Int64.self)
            #expect(tables == 0)
            #expect(try await runner.status().pending.map(\.version) == [next, next + 1])

            // Fixed, it applies both in one go.
            schema.migrations[schema.migrations.count - 1] = Migration(version: next + 1, name: "bad", sql: "CREATE TABLE probe_bad (x int);")
            let fixed = MigrationRunner(client: client, schema: schema, logger: TestDatabase.logger)
            #expect(try await fixed.migrate().migrations.map(\.version) == [next, next + 1])
            #expect(try await fixed.status().isCurrent)
        }
    }

    @Test("the SQL splitter keeps dollar-quoted bodies, strings and comments intact")
    func splitter() throws {
        let sql = """
            -- comment; with semicolon
            CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$;
            INSERT INTO t VALUES ('a;b', 'it''s'); /* block; comment */
            SELECT $tag$ ; $$ ; $tag$;
            """
        let statements = SQLScript.statements(sql)
        #expect(statements.count == 3)
        #expect(statements[0].hasSuffix("END $$"))
        #expect(statements[1] == "INSERT INTO t VALUES ('a;b', 'it''s')")
        #expect(statements[2] == "SELECT $tag$ ; $$ ; $tag$")
    }
}
