import Hummingbird
import LedgerCore
import LedgerStore

/// Requires `Authorization: Bearer <api key>` of an active key (401 otherwise) and records the key.
/// Valid keys are remembered for `cache.ttl` (see `APIKeyCache`).
struct AuthMiddleware: RouterMiddleware {
    typealias Context = LedgerRequestContext

    let keys: APIKeyStore
    let cache: APIKeyCache

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization] else {
            throw Self.unauthorized("missing Authorization: Bearer <api key>")
        }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw Self.unauthorized("the Authorization header must be 'Bearer <api key>'")
        }
        guard let key = try await cache.authenticate(String(parts[1]).trimmingWhitespace(), keys: keys) else {
            throw Self.unauthorized("unknown or revoked API key")
        }
        var context = context
        context.apiKey = key
        // Only when info logs are on (the routes' own logs are info): setting metadata re-renders the log
        // handler's metadata on every request. Errors name the key themselves (`ErrorMiddleware`).
        if context.logger.logLevel <= .info { context.logger[metadataKey: "auth.key_id"] = "\(key.keyID)" }
        return try await next(request, context)
    }

    static func unauthorized(_ message: String) -> APIError {
        var error = APIError(.unauthorized, code: "unauthorized", message: message)
        error.headers[.wwwAuthenticate] = "Bearer"
        return error
    }
}

extension LedgerRequestContext {
    /// Throws 403 unless the authenticated key's role allows `permission`.
    func require(_ permission: APIRole.Permission) throws {
        guard let key = apiKey else { throw AuthMiddleware.unauthorized("missing Authorization: Bearer <api key>") }
        guard key.role.allows(permission) else {
            throw APIError(
                .forbidden, code: "forbidden",
                message: "a key with role '\(key.role.rawValue)' may not \(permission.verb); roles allowed: "
                    + APIRole.allCases.filter { $0.allows(permission) }.map(\.rawValue).joined(separator: ", "))
        }
    }
}

extension APIRole.Permission {
    var verb: String {
        switch self {
        case .append: "append events"
        case .readEntitlements: "read entitlements"
        case .audit: "read event history"
        case .reports: "read reports"
        case .manage: "manage keys, the catalog and webhooks"
        }
    }
}

extension String {
    /// Without spaces and tabs at either end (on UTF-8 bytes: it runs on every request).
    func trimmingWhitespace() -> String {
        let bytes = utf8
        guard let first = bytes.firstIndex(where: { $0 != 0x20 && $0 != 0x09 }),
            let last = bytes.lastIndex(where: { $0 != 0x20 && $0 != 0x09 })
        else { return "" }
        return String(self[first...last])
    }
}
