import Foundation
import LedgerCore
import LedgerTestSupport
import PostgresNIO
import Testing

@testable import LedgerStore

@Suite("SQL functions")
struct SchemaFunctionTests {
    /// The names a script defines (`CREATE [OR REPLACE] FUNCTION name(`), one per definition.
    static func definedNames(_ sql: String) -> [String] {
        SQLScript.statements(sql).compactMap { statement in
            let words = statement.split(whereSeparator: \.isWhitespace).map { $0.lowercased() }
            let at: Int
            if words.starts(with: ["create", "function"]) {
                at = 2
            } else if words.starts(with: ["create", "or", "replace", "function"]) {
                at = 4
            } else {
                return nil
            }
            guard at < words.count else { return nil }
            return String(words[at].prefix { $0 != "(" })
        }
    }

    @Test("every SQL function is defined once in schema/functions, and no migration after 0021 defines one")
    func oneFilePerFunction() throws {
        let schema = try TestDatabase.schema()
        #expect(!schema.functions.isEmpty)
        let definitions = schema.functions.flatMap { Self.definedNames($0.sql) }
        #expect(definitions.sorted() == schema.functions.map(\.name))
        #expect(Set(definitions).count == definitions.count)
        // Migrations up to 0021 are history (they ran on existing databases); later ones keep tables and data.
        for migration in schema.migrations where migration.version > 21 {
            #expect(Self.definedNames(migration.sql).isEmpty, "migration \(migration.version) defines a function: move it to schema/functions")
        }
        // Every function a migration ever defined has its file (none was dropped for good so far).
        let historical = Set(schema.migrations.flatMap { Self.definedNames($0.sql) })
        #expect(historical.subtracting(definitions).isEmpty)
    }

    @Test("a function file must hold one CREATE OR REPLACE FUNCTION of its own name")
    func fileRules() {
        #expect(SchemaFunction.problem(name: "f", sql: "-- why\nCREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;") == nil)
        #expect(SchemaFunction.problem(name: "f", sql: "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;") != nil)
        #expect(SchemaFunction.problem(name: "f", sql: "CREATE OR REPLACE FUNCTION g() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;") != nil)
        #expect(SchemaFunction.problem(name: "f", sql: "CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$; SELECT 1;") != nil)
        #expect(SchemaFunction.problem(name: "F-x", sql: "CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;") != nil)
    }

    @Test("after migrate, the database's functions are exactly the files': applying them again changes no definition")
    func liveFunctionsEqualFiles() async throws {
        try await TestDatabase.with { client, _ in
            let schema = try TestDatabase.schema()
            let logger = TestDatabase.logger
            try await client.withConnection { c in
                func definitions() async throws -> [String: String] {
                    var out: [String: String] = [:]
                    let rows = try await c.query(
                        """
                        SELECT p.proname::text, pg_get_functiondef(p.oid) FROM pg_proc p
                        JOIN pg_namespace n ON n.oid = p.pronamespace
                        WHERE n.nspname = 'public' AND p.proname LIKE 'subledger\\_%'
                        """, logger: logger)
                    for try await (name, definition) in rows.decode((String, String).self) {
                        #expect(out[name] == nil, "\(name) is overloaded")
                        out[name] = definition
                    }
                    return out
                }
                let live = try await definitions()
                #expect(live.keys.sorted() == schema.functions.map(\.name), "a live subledger_ function has no file, or a file no function")
                try await c.query("BEGIN", logger: logger)
                for function in schema.functions {
                    for statement in SQLScript.statements(function.sql) {
                        try await c.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                }
                let reapplied = try await definitions()
                try await c.query("ROLLBACK", logger: logger)
                for function in schema.functions {
                    #expect(live[function.name] == reapplied[function.name], "\(function.name) in the database differs from its file")
                }
            }
            let recorded = try await client.query("SELECT name, checksum FROM schema_functions ORDER BY name")
                .collect().map { try $0.decode((String, String).self) }
            #expect(recorded.map(\.0) == schema.functions.map(\.name))
            #expect(recorded.map(\.1) == schema.functions.map(\.checksum))
        }
    }

    @Test("a changed function file is pending until migrate applies and records it; a removed one is forgotten")
    func changedFunctionIsPending() async throws {
        try await TestDatabase.with { client, _ in
            var schema = try TestDatabase.schema()
            let index = try #require(schema.functions.firstIndex { $0.name == "subledger_projection_tables" })
            schema.functions[index] = SchemaFunction(name: "subledger_projection_tables", sql: schema.functions[index].sql + "\n-- a comment\n")
            schema.functions.append(
                SchemaFunction(
                    name: "subledger_probe",
                    sql: "CREATE OR REPLACE FUNCTION subledger_probe() RETURNS int LANGUAGE sql AS $$ SELECT 7 $$;"))
            let runner = MigrationRunner(client: client, schema: schema, logger: TestDatabase.logger)
            let status = try await runner.status()
            #expect(!status.isCurrent)
            #expect(status.pendingFunctions.map(\.name) == ["subledger_projection_tables", "subledger_probe"])
            #expect(status.refusal == "2 SQL function(s) of schema/functions not applied; run 'subledger migrate' first")
            let outcome = try await runner.migrate()
            #expect(outcome.migrations.isEmpty)
            #expect(outcome.functions.map(\.name) == ["subledger_projection_tables", "subledger_probe"])
            #expect(try await runner.status().isCurrent)
            #expect(try await client.query("SELECT subledger_probe()").collect()[0].decode(Int.self) == 7)

            schema.functions.removeLast()
            let without = MigrationRunner(client: client, schema: schema, logger: TestDatabase.logger)
            #expect(try await without.migrate().functions.isEmpty)
            #expect(try await client.query("SELECT count(*) FROM schema_functions WHERE name = 'subledger_probe'").collect()[0].decode(Int.self) == 0)
        }
    }

    @Test("the one-trip statement binds subledger_append's arguments, in number and type")
    func oneTripBindingsMatchTheFunction() async throws {
        try await TestDatabase.with { client, _ in
            let logger = TestDatabase.logger
            let declared = try await client.query(
                "SELECT pronargs::int, ARRAY(SELECT unnest(proargtypes::regtype[])::text) FROM pg_proc WHERE proname = 'subledger_append'",
                logger: logger
            ).collect()
            #expect(declared.count == 1, "subledger_append is not defined exactly once")
            let (count, types) = try declared[0].decode((Int, [String]).self)
            // A belief no log has (position -1): the function checks it first and writes nothing.
            let statement = AppendStatements.OneTrip(
                lockKey: EventStore.appendLockKey, expectedPosition: -1, subscribers: ["s"], believedVersions: [0],
                believedHashes: [Array(repeating: 0, count: 32)], recordedAt: Timestamp(microseconds: 0), rows: [], fingerprints: [],
                texts: AppendWriter.RowTexts(), projection: ProjectionJSONRows([]))
            #expect(try statement.makeBindings().count == count)
            let bound = try await client.withConnection { c in
                var written: [Bool] = []
                for try await refused in try await c.execute(statement, logger: logger) { written.append(refused) }
                #expect(written == [false])
                // The types PostgresNIO declared for the prepared statement: those of the Swift bindings.
                return try await c.query(
                    "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = \(AppendStatements.OneTrip.name)", logger: logger
                ).collect().first?.decode([String].self)
            }
            #expect(bound == types)
        }
    }
}
