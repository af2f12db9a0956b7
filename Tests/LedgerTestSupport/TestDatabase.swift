import Foundation
import LedgerCore
import LedgerStore
import Logging
import PostgresNIO

/// A fresh, migrated PostgreSQL database per test, cloned from a template migrated once per run.
///
/// Integration tests run against the real PostgreSQL named by `DATABASE_URL` (tools/test starts the
/// project's private cluster and exports it); without it they fail, they are not skipped.
public enum TestDatabase {
    public static let logger: Logger = {
        var logger = Logger(label: "subledger.tests")
        logger.logLevel = .warning
        return logger
    }()

    public static func baseURL() throws -> DatabaseURL {
        guard let text = ProcessInfo.processInfo.environment["DATABASE_URL"], !text.isEmpty else {
            throw SetupError("DATABASE_URL is not set: run the tests with tools/test, which starts PostgreSQL")
        }
        return try DatabaseURL(text)
    }

    /// A superuser on the same cluster (`SUBLEDGER_SUPERUSER_URL`, exported by tools/pg env), for tests that
    /// must act behind the ledger's back.
    public static func superuserURL() throws -> DatabaseURL {
        guard let text = ProcessInfo.processInfo.environment["SUBLEDGER_SUPERUSER_URL"], !text.isEmpty else {
            throw SetupError("SUBLEDGER_SUPERUSER_URL is not set: run the tests with tools/test")
        }
        return try DatabaseURL(text)
    }

    /// The repository's `schema/` folder, found from this source file (tests never depend on the cwd).
    public static var schemaDirectory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("schema")
    }

    /// The repository's migrations and SQL functions.
    public static func schema() throws -> Schema {
        try Schema.load(directory: schemaDirectory)
    }

    /// The repository's migrations alone.
    public static func migrations() throws -> [Migration] {
        try schema().migrations
    }

    /// Runs `body` with a started client on a new database (as the owner role of `DATABASE_URL`), dropped afterwards.
    public static func with<T: Sendable>(
        role: String? = nil, _ body: @escaping @Sendable (PostgresClient, DatabaseURL) async throws -> T
    ) async throws -> T {
        try await withDatabase { url in
            try await run(url.clientConfiguration(role: role, maximumConnections: 40)) { client in
                try await body(client, url)
            }
        }
    }

    /// Whether the current task already holds a database slot (a test that opens a second database inside
    /// its first must not wait for a slot its own first one keeps taken).
    @TaskLocal static var holdsSlot = false

    /// Runs `body` with the URL of a new, migrated database, dropped afterwards.
    ///
    /// At most `DatabaseSlots.count` tests hold a database at once: Swift Testing starts every test together,
    /// and each test's server keeps a few pooled connections (appends, workers, monitors), so without a bound
    /// the suite's peak went past PostgreSQL's `max_connections` (200, tools/pg) and tests failed with
    /// "too many clients".
    @discardableResult
    public static func withDatabase<T: Sendable>(_ body: @escaping @Sendable (DatabaseURL) async throws -> T) async throws -> T {
        if holdsSlot { return try await withSlotDatabase(body) }
        await DatabaseSlots.shared.acquire()
        do {
            let result = try await $holdsSlot.withValue(true) { try await withSlotDatabase(body) }
            await DatabaseSlots.shared.release()
            return result
        } catch {
            await DatabaseSlots.shared.release()
            throw error
        }
    }

    private static func withSlotDatabase<T: Sendable>(_ body: @escaping @Sendable (DatabaseURL) async throws -> T) async throws -> T {
        let base = try baseURL()
        let template = try await Templates.shared.template(base: base)
        let name = "sl_test_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased())"
        try await Templates.shared.clone(template, to: name, base: base)
        let url = base.with(database: name)
        do {
            let result = try await body(url)
            try? await admin(base) { c in try await c.query("DROP DATABASE IF EXISTS \(unescaped: name) WITH (FORCE)") }
            return result
        } catch {
            try? await admin(base) { c in try await c.query("DROP DATABASE IF EXISTS \(unescaped: name) WITH (FORCE)") }
            throw error
        }
    }

    /// Runs `body` with a started client, shutting it down afterwards.
    @discardableResult
    public static func run<T: Sendable>(
        _ configuration: PostgresClient.Configuration, _ body: @escaping @Sendable (PostgresClient) async throws -> T
    ) async throws -> T {
        try await withPostgresClient(configuration, logger: logger, body)
    }

    static func admin(_ base: DatabaseURL, _ body: @escaping @Sendable (PostgresClient) async throws -> Void) async throws {
        _ = try await run(base.clientConfiguration(maximumConnections: 2)) { client in
            try await body(client)
            return true
        }
    }

    public struct SetupError: Error, CustomStringConvertible {
        public var description: String
        init(_ d: String) { description = d }
    }
}

/// Creates the migrated template database once per test process (named by the schema files' checksums).
actor Templates {
    static let shared = Templates()
    private var building: Task<String, any Error>?

    /// One build per process, however many tests ask at once (actor methods are reentrant at `await`).
    func template(base: DatabaseURL) async throws -> String {
        if let building { return try await building.value }
        let task = Task { try await Self.build(base: base) }
        building = task
        return try await task.value
    }

    private static func build(base: DatabaseURL) async throws -> String {
        let schema = try TestDatabase.schema()
        let fingerprint = String(UInt64(truncatingIfNeeded: schema.fingerprint.hashValueStable), radix: 16)
        let name = "sl_template_\(fingerprint)"
        let exists = try await TestDatabase.run(base.clientConfiguration(maximumConnections: 1)) { c in
            try await c.query("SELECT 1 FROM pg_database WHERE datname = \(name)").collect().count == 1
        }
        if !exists {
            let building = name + "_building_\(ProcessInfo.processInfo.processIdentifier)"
            try await TestDatabase.admin(base) { c in
                try await c.query("DROP DATABASE IF EXISTS \(unescaped: building) WITH (FORCE)")
                try await c.query("CREATE DATABASE \(unescaped: building)")
            }
            _ = try await TestDatabase.run(base.with(database: building).clientConfiguration(maximumConnections: 2)) { c in
                try await MigrationRunner(client: c, schema: schema, logger: TestDatabase.logger).migrate()
            }
            try await TestDatabase.admin(base) { c in
                try await c.query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = \(building) AND pid <> pg_backend_pid()",
                    logger: TestDatabase.logger)
                try await Task.sleep(for: .milliseconds(200))
                try await c.query("ALTER DATABASE \(unescaped: building) RENAME TO \(unescaped: name)", logger: TestDatabase.logger)
            }
        }
        return name
    }

    /// Clones serially: PostgreSQL refuses to copy a template that another session is connected to, and a
    /// client that just migrated it may still be closing its connections.
    func clone(_ template: String, to name: String, base: DatabaseURL) async throws {
        var attempt = 0
        while true {
            do {
                try await TestDatabase.admin(base) { c in
                    try await c.query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = \(template) AND pid <> pg_backend_pid()",
                        logger: TestDatabase.logger)
                    try await c.query("CREATE DATABASE \(unescaped: name) TEMPLATE \(unescaped: template)", logger: TestDatabase.logger)
                }
                return
            } catch let error as PSQLError {
                attempt += 1
                guard attempt < 20, error.sqlState == "55006" else {
                    throw TestDatabase.SetupError("cannot create test database \(name): \(error.serverMessage)")
                }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }
}

extension String {
    /// FNV-1a: stable across processes (Swift's `hashValue` is seeded per process).
    var hashValueStable: UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in utf8 {
            h ^= UInt64(b)
            h = h &* 0x0000_0100_0000_01B3
        }
        return h
    }
}

/// A counting semaphore for test databases (`TestDatabase.withDatabase`): `SUBLEDGER_TEST_DATABASES`, default 24.
actor DatabaseSlots {
    static let shared = DatabaseSlots(count: ProcessInfo.processInfo.environment["SUBLEDGER_TEST_DATABASES"].flatMap(Int.init) ?? 24)

    private var free: Int
    private var waiters: [CheckedContinuation<Void, Never>] = []

    init(count: Int) { free = max(1, count) }

    func acquire() async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation { waiters.append($0) }
    }

    func release() {
        if waiters.isEmpty {
            free += 1
        } else {
            waiters.removeFirst().resume()
        }
    }
}
