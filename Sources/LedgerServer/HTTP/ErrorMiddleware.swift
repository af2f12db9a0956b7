import Hummingbird
import LedgerCore
import LedgerStore
import Logging

/// Turns every error into the contract's JSON error body; nothing reaches the client as HTML or a trace.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            let apiError = Self.map(error)
            if apiError.status.code >= 500 {
                context.logger.error(
                    "request failed",
                    metadata: [
                        "http.method": "\(request.method)", "http.path": "\(request.uri.path)",
                        "error.type": "\(type(of: error))", "error.detail": "\(String(reflecting: error))",
                    ])
            } else {
                context.logger.debug(
                    "request refused", metadata: ["http.path": "\(request.uri.path)", "error.code": "\(apiError.code)"])
            }
            return apiError.response()
        }
    }

    static func map(_ error: any Error) -> APIError {
        switch error {
        case let error as APIError:
            return error
        case let error as StoreError:
            switch error {
            case .versionConflict:
                return APIError(.conflict, code: "version_conflict", message: error.description)
            case .idempotencyConflict:
                return APIError(.conflict, code: "idempotency_conflict", message: error.description)
            case .unavailable:
                var e = APIError(
                    .serviceUnavailable, code: "unavailable",
                    message: "the database is unavailable; nothing was stored, retry later")
                e.headers[.retryAfter] = "1"
                return e
            }
        case let error as HTTPError:
            switch error.status {
            case .contentTooLarge:
                return APIError(.contentTooLarge, code: "payload_too_large", message: "the request body is too large")
            case .notFound:
                return .notFound("no such route")
            case .badRequest:
                return .invalidRequest(error.body ?? "bad request")
            default:
                return APIError(
                    error.status, code: error.status.code >= 500 ? "internal" : "invalid_request",
                    message: error.body ?? error.status.reasonPhrase)
            }
        default:
            let mapped = StoreError.classify(error)
            if mapped is StoreError { return map(mapped) }
            return APIError(.internalServerError, code: "internal", message: "internal error; nothing was stored")
        }
    }
}
