import GoogleStore
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@testable import LedgerServer

/// What the store modules start (`storeModules`): composition only, so the client never connects.
@Suite("Store modules")
struct StoreModuleTests {
    @Test("with the reconcile schedule on, Google's hourly voided-purchases read is not started beside it")
    func reconcileScheduleReplacesTheHourlyVoidedRead() throws {
        let google = try GooglePlayStandIn()
        let client = PostgresClient(
            configuration: .init(host: "127.0.0.1", port: 1, username: "nobody", password: nil, database: "none", tls: .disable),
            backgroundLogger: TestDatabase.logger)
        let database = Database(client: client, logger: TestDatabase.logger)
        for schedule in [nil, Duration.seconds(6 * 3600)] {
            var configuration = ServerConfiguration(google: try google.configuration(port: 1, reconcile: .seconds(3600)))
            configuration.reconcileInterval = schedule
            let (_, services) = try buildRouterAndServices(
                configuration: configuration, database: database, readRouter: ReadRouter(primary: database, replicas: []),
                schema: try TestDatabase.schema(), logger: TestDatabase.logger)
            #expect(services.contains { $0 is GoogleResolverService }, "\(String(describing: schedule))")
            #expect(services.contains { $0 is GoogleReconcileService } == (schedule == nil), "\(String(describing: schedule))")
        }
    }
}
