import Hummingbird
import LedgerStore

/// Per-request state: Hummingbird's core storage plus the API key that authenticated the request.
public struct LedgerRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Set by `AuthMiddleware` on `/v1` routes.
    public var apiKey: APIKey?
    /// The connection the request came on, watched for the client going away (nil when not watched).
    public let client: ClientConnection?

    public init(source: Source) {
        self.coreContext = .init(source: source)
        self.apiKey = nil
        self.client = ClientConnection.of(source.channel)
    }
}
