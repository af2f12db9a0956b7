import Hummingbird
import LedgerStore

/// Per-request state: Hummingbird's core storage plus the API key that authenticated the request.
public struct LedgerRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Set by `AuthMiddleware` on `/v1` routes.
    public var apiKey: APIKey?

    public init(source: Source) {
        self.coreContext = .init(source: source)
        self.apiKey = nil
    }
}
