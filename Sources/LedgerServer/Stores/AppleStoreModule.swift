import AppleStore
import Hummingbird
import LedgerStore
import ServiceLifecycle

/// The App Store: notification and receipt routes (API key), and the Server API's background work when
/// configured (notification-history backfill, answers to consumption requests).
struct AppleStoreModule: StoreModule {
    let routes: AppleStoreRoutes
    let services: [any Service]
    let reconciliation: (any StoreReconciliation)?

    init(_ context: StoreContext) throws {
        let apple = context.configuration.apple
        let verifier = try appleVerifier(apple)
        let reader = AppleNotificationReader(verifier: verifier, bundleID: apple.bundleID, maxAge: apple.maxAge)
        routes = AppleStoreRoutes(
            reader: reader, intake: context.intake, router: context.readRouter, maxBodyBytes: context.configuration.maxBodyBytes,
            clock: context.configuration.clock)
        var services: [any Service] = []
        if let backfill = apple.backfill {
            services.append(
                AppleBackfillService(
                    backfill: AppleBackfill(client: backfill.client, reader: reader, intake: context.intake, logger: context.logger),
                    marks: StoreSyncMarks(database: context.database), interval: backfill.interval, logger: context.logger))
        }
        if let consumption = apple.consumption {
            services.append(
                AppleConsumptionResponder(
                    client: consumption.client, sandboxClient: apple.sandboxClient, policy: consumption.policy,
                    database: context.database, logger: context.logger))
        }
        self.services = services
        reconciliation = apple.reconcileClient.map {
            AppleReconciliation(client: $0, verifier: verifier, bundleID: apple.bundleID)
        }
    }

    func register(v1: RouterGroup<LedgerRequestContext>, root: Router<LedgerRequestContext>) {
        routes.register(on: v1)
    }
}

/// The App Store payload reader: Apple's root (or the configured test roots), the bundle, the age limit.
func appleReader(_ apple: AppleConfiguration) throws -> AppleNotificationReader {
    AppleNotificationReader(verifier: try appleVerifier(apple), bundleID: apple.bundleID, maxAge: apple.maxAge)
}

/// The verifier of App Store JWS: Apple's root, or the configured test roots.
func appleVerifier(_ apple: AppleConfiguration) throws -> AppleJWSVerifier {
    try AppleJWSVerifier(rootsDER: apple.rootsDER.isEmpty ? [try AppleJWSVerifier.appleRootG3DER()] : apple.rootsDER)
}
