import Logging
import PostgresNIO

/// Where the database stands against the migrations this binary carries.
public struct MigrationStatus: Sendable {
    public var applied: [Int]
    public var pending: [Migration]
    public var problems: [MigrationError]

    /// All applied, none edited: the service may run.
    public var isCurrent: Bool { pending.isEmpty && problems.isEmpty }

    /// Why the service and the one-shot commands must not run on this schema, in words that say what to do;
    /// nil when it is current. The one description `serve`, the CLI and `/ready` give.
    public var refusal: String? {
        if let problem = problems.first { return "\(problem)" }
        return pending.isEmpty ? nil : "\(pending.count) migration(s) pending; run 'subledger migrate' first"
    }
}

/// Applies `schema/` migrations: all pending ones in one transaction, each recorded with its checksum.
public struct MigrationRunner: Sendable {
    /// Serializes concurrent `migrate` runs against one database.
    static let lockKey: Int64 = 0x5355_424C_4D49_4752

    let database: Database
    let migrations: [Migration]
    var logger: Logger { database.logger }

    public init(database: Database, migrations: [Migration]) {
        self.database = database
        self.migrations = migrations
    }

    public init(client: PostgresClient, migrations: [Migration], logger: Logger) {
        self.init(database: Database(client: client, logger: logger), migrations: migrations)
    }

    public func status() async throws -> MigrationStatus {
        try await database.withConnection { connection in
            let exists =
                try await connection.query(
                    "SELECT to_regclass('schema_migrations') IS NOT NULL", logger: logger
                ).collect().first?.decode(Bool.self) ?? false
            let applied = exists ? try await appliedRows(connection) : []
            return compare(applied)
        }
    }

    /// Applies what is pending; refuses (and applies nothing) if an applied file was edited.
    @discardableResult
    public func migrate() async throws -> [Migration] {
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
            let status = compare(try await appliedRows(connection))
            if let problem = status.problems.first { throw problem }
            for migration in status.pending {
                logger.info(
                    "applying migration",
                    metadata: ["migration.version": "\(migration.version)", "migration.name": "\(migration.name)"])
                for statement in SQLScript.statements(migration.sql) {
                    do {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    } catch let error as PSQLError {
                        throw MigrationError.failed(
                            version: migration.version, name: migration.name, statement: statement,
                            underlying: error.serverMessage)
                    }
                }
                try await connection.query(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (\(migration.version), \(migration.name), \(migration.checksum))",
                    logger: logger)
            }
            if !status.pending.isEmpty {
                try await connection.query("GRANT SELECT ON schema_migrations TO subledger_app", logger: logger)
            }
            return status.pending
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

    private func compare(_ applied: [(Int, String, String)]) -> MigrationStatus {
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
            problems: problems)
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
