import GoogleStore
import Hummingbird
import LedgerStore
import ServiceLifecycle

/// Google Play: the Pub/Sub push route (Google's OIDC token) and the purchases route (API key); with a
/// service account, the inbox resolver and the periodic reconcile.
struct GoogleStoreModule: StoreModule {
    let routes: GoogleStoreRoutes
    let services: [any Service]
    let reconciliation: (any StoreReconciliation)?

    init(_ context: StoreContext) {
        let google = context.configuration.google
        let play =
            google.acceptsPushes || google.serviceAccount != nil
            ? GooglePlay(configuration: google, intake: context.intake, logger: context.logger, clock: context.configuration.clock) : nil
        routes = GoogleStoreRoutes(
            play: play, reader: ProjectionReader(router: context.readRouter, cache: context.cache), router: context.readRouter,
            maxBodyBytes: context.configuration.maxBodyBytes, clock: context.configuration.clock)
        let reconciliation =
            context.configuration.reconcileInterval != nil && google.serviceAccount != nil && !google.packageNames.isEmpty
            ? play.map { GoogleReconciliation(play: $0, marks: StoreSyncMarks(database: context.database), logger: context.logger) } : nil
        var services: [any Service] = []
        if let play, google.serviceAccount != nil {
            services.append(GoogleResolverService(play: play, inbox: context.intake.inbox))
            // The reconcile schedule (`--reconcile-interval`) reads the voided purchases itself, since its last run:
            // the hourly poll would ask Google for the same list again (its quota is per application).
            if let interval = google.reconcileInterval, reconciliation == nil {
                services.append(GoogleReconcileService(play: play, interval: interval))
            }
        }
        self.services = services
        self.reconciliation = reconciliation
    }

    func register(v1: RouterGroup<LedgerRequestContext>, root: Router<LedgerRequestContext>) {
        routes.register(on: v1)
        // The RTDN push authenticates with Google's OIDC token, outside the API-key group.
        routes.registerPush(on: root)
    }
}
