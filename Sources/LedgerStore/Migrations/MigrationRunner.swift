import Logging
import PostgresNIO

/// Where the database stands against the migrations and SQL functions this binary carries.
public struct MigrationStatus: Sendable {
    public var applied: [Int]
    public var pending: [Migration]
    /// Function files whose checksum the database has not recorded (new or changed since the last `migrate`).
    public var pendingFunctions: [SchemaFunction] = []
    public var problems: [MigrationError]

    /// All applied, none edited: the service may run.
    public var isCurrent: Bool { pending.isEmpty && pendingFunctions.isEmpty && problems.isEmpty }

    /// Why the service and the one-shot commands must not run on this schema, in words that say what to do;
    /// nil when it is current. The one description `serve`, the CLI and `/ready` give.
    public var refusal: String? {
        if let problem = problems.first { return "\(problem)" }
        if !pending.isEmpty { return "\(pending.count) migration(s) pending; run 'subledger migrate' first" }
        if !pendingFunctions.isEmpty {
            return "\(pendingFunctions.count) SQL function(s) of schema/functions not applied; run 'subledger migrate' first"
        }
        return nil
    }
}

/// What one `migrate` applied: the pending migrations, and the function files that were new or changed
/// (every function file is applied each time; these are the ones whose recorded checksum moved).
public struct MigrationOutcome: Sendable {
    public var migrations: [Migration]
    public var functions: [SchemaFunction]
}

/// Applies `schema/`: all pending migrations, then every function file of `schema/functions/`, in one
/// transaction, each recorded with its checksum (`schema_migrations`, `schema_functions`).
public struct MigrationRunner: Sendable {
    /// Serializes concurrent `migrate` runs against one database.
    static let lockKey: Int64 = 0x5355_424C_4D49_4752

    let database: Database
    let schema: Schema
    var migrations: [Migration] { schema.migrations }
    var logger: Logger { database.logger }

    public init(database: Database, schema: Schema) {
        self.database = database
        self.schema = schema
    }

    public init(client: PostgresClient, schema: Schema, logger: Logger) {
        self.init(database: Database(client: client, logger: logger), schema: schema)
    }

    public func status() async throws -> MigrationStatus {
        try await database.withConnection { connection in
            let tables = try await connection.query(
                "SELECT to_regclass('schema_migrations') IS NOT NULL, to_regclass('schema_functions') IS NOT NULL", logger: logger
            ).collect().first?.decode((Bool, Bool).self)
            let applied = tables?.0 == true ? try await appliedRows(connection) : []
            let functions = tables?.1 == true ? try await functionRows(connection) : [:]
            return compare(applied, functions: functions)
        }
    }

    /// Applies what is pending and every function file; refuses (and applies nothing) if an applied
    /// migration was edited.
    @discardableResult
    public func migrate() async throws -> MigrationOutcome {
        try await database.transaction { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.lockKey))", logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version    integer     PRIMARY KEY,
                    name       text        NOT NULL,
                    checksum   text        NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """, logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS schema_functions (
                    name       text        PRIMARY KEY,
                    checksum   text        NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """, logger: logger)
            let status = compare(try await appliedRows(connection), functions: try await functionRows(connection))
            if let problem = status.problems.first { throw problem }
            for migration in status.pending {
                logger.info(
                    "applying migration",
                    metadata: ["migration.version": "\(migration.version)", "migration.name": "\(migration.name)"])
                try await run(migration.sql, on: connection) {
                    MigrationError.failed(version: migration.version, name: migration.name, statement: $0, underlying: $1)
                }
                try await connection.query(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (\(migration.version), \(migration.name), \(migration.checksum))",
                    logger: logger)
            }
            // After the migrations, which create the tables the functions name and drop a function whose
            // signature changes; all of them each time, so the database's bodies are the files'.
            for function in schema.functions {
                try await run(function.sql, on: connection) {
                    MigrationError.functionFailed(name: function.name, statement: $0, underlying: $1)
                }
            }
            for function in status.pendingFunctions {
                logger.info("applied changed SQL function", metadata: ["function.name": "\(function.name)"])
                try await connection.query(
                    """
                    INSERT INTO schema_functions (name, checksum) VALUES (\(function.name), \(function.checksum))
                    ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = now()
                    """, logger: logger)
            }
            let names = schema.functions.map(\.name)
            try await connection.query("DELETE FROM schema_functions WHERE NOT (name = ANY(\(names)))", logger: logger)
            if !status.pending.isEmpty || !status.pendingFunctions.isEmpty {
                try await connection.query("GRANT SELECT ON schema_migrations, schema_functions TO subledger_app", logger: logger)
            }
            return MigrationOutcome(migrations: status.pending, functions: status.pendingFunctions)
        }
    }

    /// Runs a script's statements, turning PostgreSQL's refusal into `failure(statement, message)`.
    private func run(
        _ script: String, on connection: PostgresConnection, failure: (String, String) -> MigrationError
    ) async throws {
        for statement in SQLScript.statements(script) {
            do {
                try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            } catch let error as PSQLError {
                throw failure(statement, error.serverMessage)
            }
        }
    }

    private func appliedRows(_ connection: PostgresConnection) async throws -> [(Int, String, String)] {
        var rows: [(Int, String, String)] = []
        for try await (version, name, checksum) in try await connection.query(
            "SELECT version, name, checksum FROM schema_migrations ORDER BY version", logger: logger
        ).decode((Int, String, String).self) {
            rows.append((version, name, checksum))
        }
        return rows
    }

    private func functionRows(_ connection: PostgresConnection) async throws -> [String: String] {
        var rows: [String: String] = [:]
        for try await (name, checksum) in try await connection.query("SELECT name, checksum FROM schema_functions", logger: logger)
            .decode((String, String).self)
        {
            rows[name] = checksum
        }
        return rows
    }

    private func compare(_ applied: [(Int, String, String)], functions: [String: String]) -> MigrationStatus {
        var problems: [MigrationError] = []
        let byVersion = Dictionary(migrations.map { ($0.version, $0) }, uniquingKeysWith: { first, _ in first })
        for (version, name, checksum) in applied {
            guard let file = byVersion[version] else {
                problems.append(.unknownApplied(version: version, name: name))
                continue
            }
            if file.checksum != checksum { problems.append(.edited(version: version, name: file.name)) }
        }
        let appliedVersions = Set(applied.map(\.0))
        return MigrationStatus(
            applied: applied.map(\.0), pending: migrations.filter { !appliedVersions.contains($0.version) },
            pendingFunctions: schema.functions.filter { functions[$0.name] != $0.checksum }, problems: problems)
    }
}

extension PSQLError {
    /// The server's own message (PSQLError's description hides it on purpose, to keep data out of logs).
    public var serverMessage: String {
        if let message = serverInfo?[.message] {
            return message + (serverInfo?[.detail].map { " (\($0))" } ?? "")
        }
        return "\(code)"
    }

    public var sqlState: String? { serverInfo?[.sqlState] }
}
