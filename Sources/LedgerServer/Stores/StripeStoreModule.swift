import Hummingbird
import LedgerCore
import LedgerStore
import ServiceLifecycle
import StripeStore

/// Stripe: the signed webhook route (outside the API-key group: Stripe cannot send a bearer key), the
/// customer look-up when an API key is configured, and `/ready`'s note of API versions it did not know.
struct StripeStoreModule: StoreModule {
    let routes: StripeStoreRoutes
    let services: [any Service]
    let reconciliation: (any StoreReconciliation)?

    init(_ context: StoreContext) {
        let stripe = context.configuration.stripe
        routes = StripeStoreRoutes(
            verifier: StripeSignatureVerifier(secrets: stripe.webhookSecrets, tolerance: stripe.signatureTolerance),
            intake: context.intake, router: context.readRouter, maxBodyBytes: context.configuration.maxBodyBytes,
            settings: stripe.settings, versions: StripeVersionWatch(),
            // Asked while Stripe waits for the answer: one attempt, a short timeout.
            prices: stripe.apiKey.map { StripeAPIClient(apiKey: $0, baseURL: stripe.apiBaseURL, timeout: .seconds(5), attempts: 1) },
            clock: context.configuration.clock)
        services =
            stripe.apiKey.map {
                [
                    StripeCustomerLookup(
                        client: StripeAPIClient(apiKey: $0, baseURL: stripe.apiBaseURL), intake: context.intake,
                        interval: stripe.lookupInterval, options: stripe.settings.mapping, logger: context.logger)
                ]
            } ?? []
        reconciliation =
            context.configuration.reconcileInterval == nil
            ? nil
            : stripe.apiKey.map {
                StripeReconciliation(client: StripeAPIClient(apiKey: $0, baseURL: stripe.apiBaseURL), options: stripe.settings.mapping)
            }
    }

    func register(v1: RouterGroup<LedgerRequestContext>, root: Router<LedgerRequestContext>) {
        routes.register(on: root)
    }

    func readiness() -> (name: String, value: JSONValue)? {
        let unknown = routes.versions.unknownVersions
        guard !unknown.isEmpty else { return nil }
        return (
            "stripe",
            [
                "unknown_api_versions": .array(unknown.map(JSONValue.string)),
                "detail":
                    "Stripe events arrived in API versions the ledger does not know; they were mapped as the nearest known shape (docs/stripe.md)",
            ]
        )
    }
}
