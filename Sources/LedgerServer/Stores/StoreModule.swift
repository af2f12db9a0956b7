import Hummingbird
import LedgerCore
import LedgerStore
import Logging
import ServiceLifecycle

/// What the server's builder hands every store: the one intake, the readers and the settings.
struct StoreContext {
    let configuration: ServerConfiguration
    let database: Database
    let readRouter: ReadRouter
    let cache: LedgerCache?
    let intake: EventIntake
    let logger: Logger
}

/// One store's part of the server: its routes and its background services, so the builder adds a store
/// by listing it in `storeModules` and never names a store's types (docs/data-flow.md, "Adding a store").
protocol StoreModule: Sendable {
    /// Routes that take an API key go on `v1`; those the store authenticates itself (a signature, a push
    /// token) on `root`, outside the key check.
    func register(v1: RouterGroup<LedgerRequestContext>, root: Router<LedgerRequestContext>)
    /// Background work (inbox resolvers, backfills, look-ups). A router built alone for tests runs none.
    var services: [any Service] { get }
    /// What `/ready` says about the store while still ready (a member of its JSON), if anything.
    func readiness() -> (name: String, value: JSONValue)?
    /// The store's side of `serve --reconcile-interval`, when it is set and the store's API credentials are given.
    var reconciliation: (any StoreReconciliation)? { get }
}

extension StoreModule {
    var services: [any Service] { [] }
    func readiness() -> (name: String, value: JSONValue)? { nil }
    var reconciliation: (any StoreReconciliation)? { nil }
}

/// Every store the server speaks: the one place that names them.
func storeModules(_ context: StoreContext) throws -> [any StoreModule] {
    [try AppleStoreModule(context), GoogleStoreModule(context), StripeStoreModule(context)]
}
