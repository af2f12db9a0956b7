import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Database outage")
struct UnavailableTests {
    @Test("with no database to reach, an append fails quickly as unavailable instead of waiting")
    func unreachableDatabaseIsUnavailable() async throws {
        var url = try TestDatabase.baseURL()
        url.port = 1  // nothing listens there
        let outcome = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { client in
            let store = EventStore(database: Database(client: client, logger: TestDatabase.logger, leaseTimeout: .milliseconds(300)))
            let started = ContinuousClock.now
            do {
                _ = try await store.append([SampleEvents.purchase(subscriber: "x", key: "x1")])
                return ("stored", ContinuousClock.now - started)
            } catch let error as StoreError {
                guard case .unavailable = error else { return ("\(error)", ContinuousClock.now - started) }
                return ("unavailable", ContinuousClock.now - started)
            }
        }
        #expect(outcome.0 == "unavailable")
        #expect(outcome.1 < .seconds(10))
    }

    @Test("a transaction whose server process goes away before COMMIT fails as unavailable, not as an internal error")
    func serverGoneBeforeCommitIsUnavailable() async throws {
        // ha-check saw the primary's FATAL ("terminating connection due to unexpected postmaster exit", 57P02)
        // arrive as the reply to COMMIT, through the driver's older error type. Here a deferred trigger holds
        // the COMMIT while the backend is terminated: its FATAL (57P01) is the reply to COMMIT.
        let outcome = try await TestDatabase.with { client, _ in
            try await client.query(
                """
                CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$
                """)
            try await client.query("CREATE TABLE held (x int)")
            try await client.query(
                """
                CREATE CONSTRAINT TRIGGER held_commit AFTER INSERT ON held DEFERRABLE INITIALLY DEFERRED
                FOR EACH ROW EXECUTE FUNCTION slow_commit()
                """)
            let database = Database(client: client, logger: TestDatabase.logger)
            do {
                try await database.transaction { connection in
                    let pid = try await connection.query("SELECT pg_backend_pid()", logger: TestDatabase.logger).collect().first!
                        .decode(Int32.self)
                    try await connection.query("INSERT INTO held VALUES (1)", logger: TestDatabase.logger)
                    Task {
                        try await Task.sleep(for: .milliseconds(500))
                        try await client.query("SELECT pg_terminate_backend(\(pid))")
                    }
                }
                return "committed"
            } catch let error as StoreError {
                guard case .unavailable = error else { return "\(error)" }
                return "unavailable"
            } catch {
                return "\(type(of: error)): \(error)"
            }
        }
        #expect(outcome == "unavailable")
    }
}
