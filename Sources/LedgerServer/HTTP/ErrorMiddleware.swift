import Hummingbird
import LedgerCore
import LedgerStore
import Logging
import NIOCore
import PostgresNIO

/// Turns every error into the contract's JSON error body; nothing reaches the client as HTML or a trace.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            var apiError = Self.map(error)
            if error is RequestBody.Interrupted, (context as? LedgerRequestContext)?.client?.isGone == true {
                apiError = clientClosedBody
            }
            if apiError.status.code >= 500 {
                var metadata: Logger.Metadata = [
                    "http.method": "\(request.method)", "http.path": "\(request.uri.path)",
                    "error.type": "\(type(of: error))", "error.detail": "\(String(reflecting: error))",
                ]
                if let key = (context as? LedgerRequestContext)?.apiKey { metadata["auth.key_id"] = "\(key.keyID)" }
                context.logger.error("request failed", metadata: metadata)
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
            case .subscriberMerged(let subscriber, let into):
                return APIError(IdentityError.subscriberMerged(subscriber: subscriber, into: into))
            }
        case let error as EventValidationError:
            return .invalidEvent(error)
        case let error as IdentityError:
            return APIError(error)
        case let error as StoreLinks.Conflict:
            return APIError(.conflict, code: "version_conflict", message: error.description)
        case let error as ReportOverflow:
            return APIError(
                .unprocessableContent, code: "report_overflow",
                message: "\(error.description); narrow the report (entitlement, from/to)")
        case let error as FXRequestError:
            var e = APIError(
                .unprocessableContent, code: "missing_fx_rate",
                message: "\(error.missing.description): upload it (PUT /v1/fx/rates) or ask in the transaction's own currency")
            e.extra = ["currency": .string(error.missing.currency), "date": .string(error.missing.day.description)]
            return e
        case let error as RequestBody.Interrupted:
            return .invalidRequest("\(error); nothing was stored")
        case is NIOTooManyBytesError:
            // A chunked body has no Content-Length to refuse up front; it fails while being collected.
            return APIError(.contentTooLarge, code: "payload_too_large", message: "the request body is too large")
        case let error as PSQLError where error.code == .server && (error.sqlState ?? "").hasPrefix("22"):
            // Data exceptions (a NUL byte, a value out of range) are the request's fault: never a 500.
            return .invalidRequest("a value in the request cannot be stored or compared: \(error.serverMessage)")
        case let error as PSQLError where error.code == .server && error.sqlState == "57014":
            var e = APIError(
                .serviceUnavailable, code: "unavailable",
                message: "the request took longer than the statement timeout and was cancelled; nothing was stored")
            e.headers[.retryAfter] = "1"
            return e
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
