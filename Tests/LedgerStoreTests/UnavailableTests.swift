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
}
