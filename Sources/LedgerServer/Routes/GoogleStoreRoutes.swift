import Foundation
import GooglePlayClient
import Hummingbird
import LedgerCore
import LedgerStore
import StoreAdapters

/// `POST /v1/stores/google/notifications` (Cloud Pub/Sub pushes of Real-time developer notifications,
/// authenticated by Google's OIDC token, not an API key) and `POST /v1/stores/google/purchases`
/// (client-submitted purchase tokens, role writer; the subscriber's entitlements only for a role that may
/// read them). HTTP only: `GooglePlay` does the work.
struct GoogleStoreRoutes {
    /// Nil when Google Play is not configured: both routes answer 404 `not_configured`.
    let play: GooglePlay?
    let reader: ProjectionReader
    let router: ReadRouter
    let maxBodyBytes: Int

    /// Largest accepted push (a DeveloperNotification is well under 2 KiB; docs/limits.md).
    static let maxPushBytes = 64 * 1024

    /// The push route, outside the API-key group: Pub/Sub authenticates with its own token.
    func registerPush(on router: Router<LedgerRequestContext>) {
        router.post("v1/stores/google/notifications", use: notification)
    }

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.post("stores/google/purchases", use: purchase)
    }

    /// 404 rather than 503: the route is absent from this server's configuration, not failing (a fuzzer or a
    /// monitor must not read it as an outage).
    static let notConfigured = APIError(
        .notFound, code: "not_configured",
        message:
            "Google Play is not configured: set --google-package-name, --google-pubsub-audience, --google-pubsub-service-account and --google-service-account-file"
    )

    @Sendable func notification(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        guard let header = request.headers[.authorization] else {
            throw AuthMiddleware.unauthorized("missing Authorization: Bearer <Google OIDC token>")
        }
        guard let play, play.configuration.acceptsPushes else { throw Self.notConfigured }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw AuthMiddleware.unauthorized("the Authorization header must be 'Bearer <Google OIDC token>'")
        }
        do {
            _ = try await play.verifyPush(bearer: String(parts[1]).trimmingWhitespace())
        } catch {
            context.logger.warning("google push refused", metadata: ["error.message": "\(error)"])
            throw AuthMiddleware.unauthorized("the Pub/Sub OIDC token is not valid: \(error)")
        }
        let bytes = try await RequestBody.collect(request, limit: min(maxBodyBytes, Self.maxPushBytes))
        guard case .object(let body)? = try? JSONParser.parse(bytes.readableBytesView, maxDepth: 32) else {
            throw APIError.invalidRequest("the body must be a JSON object (a Pub/Sub push)")
        }
        let n: GoogleNotification
        do {
            n = try GoogleNotification(pushBody: body)
        } catch {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        context.logger.info(
            "google notification",
            metadata: ["google.message_id": "\(n.messageID)", "google.kind": "\(n.kind)", "google.type": "\(n.subtype ?? "")"])
        let raw = body["message"]?.objectValue?["data"]?.stringValue ?? ""
        let outcome = try await play.receive(n, raw: raw)
        var answer: [String: JSONValue] = ["status": .string(outcome.name), "message_id": .string(n.messageID)]
        switch outcome {
        case .applied(let subscriber, let events):
            answer["subscriber_id"] = .string(subscriber)
            answer["events"] = .array(events.map(\.json))
            return Response.json(.object(answer)).ledgerPosition(events.map(\.position).max() ?? 0)
        case .received:
            // Recorded in the inbox, resolved in the background: Pub/Sub needs its 2xx within its deadline.
            return Response.json(.object(answer), status: .accepted).ledgerPosition(try await router.primaryHead())
        default:
            return Response.json(.object(answer)).ledgerPosition(try await router.primaryHead())
        }
    }

    @Sendable func purchase(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.append)
        guard let play, play.configuration.serviceAccount != nil else { throw Self.notConfigured }
        let bytes = try await RequestBody.collect(request, limit: maxBodyBytes)
        guard case .object(let body)? = try? JSONParser.parse(bytes.readableBytesView) else {
            throw APIError.invalidRequest("the body must be a JSON object")
        }
        func field(_ name: String, max: Int = GoogleNotification.maxIdentifierBytes) throws -> String {
            guard let s = body[name]?.stringValue, !s.isEmpty, s.utf8.count <= max else {
                throw APIError(.unprocessableContent, code: "invalid_request", message: "\(name): is required (1–\(max) bytes)", field: name)
            }
            return s
        }
        let subscriber = try field("subscriber_id")
        guard Identifiers.isValidSubscriberID(subscriber) else {
            throw APIError(
                .unprocessableContent, code: "invalid_request",
                message: "subscriber_id: \(Identifiers.subscriberIDRule)", field: "subscriber_id")
        }
        let package = try field("package_name")
        let product = try field("product_id")
        let token = try field("purchase_token", max: GoogleNotification.maxTokenBytes)
        guard play.configuration.packageNames.contains(package) else {
            throw APIError(
                .unprocessableContent, code: "invalid_request", message: "package_name: \(package) is not configured", field: "package_name")
        }
        let events: [RecordedEvent]
        do {
            events = try await play.submit(subscriber: subscriber, package: package, productID: product, token: token)
        } catch let error as GooglePlayError {
            switch error {
            case .refused(let status, _) where status == 404 || status == 410 || status == 400:
                throw APIError(
                    .unprocessableContent, code: "invalid_request", message: "purchase_token: Google does not know it (\(error))",
                    field: "purchase_token")
            default:
                throw APIError(.serviceUnavailable, code: "unavailable", message: error.description)
            }
        } catch let error as StoreMappingError {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        var answer: [String: JSONValue] = ["subscriber_id": .string(subscriber), "events": .array(events.map(\.json))]
        let stored = events.map(\.position).max() ?? 0
        // What was stored is the writer's; the entitlements are reader data, answered only to a key that may read them.
        guard context.apiKey?.role.allows(.readEntitlements) == true else {
            return Response.json(.object(answer)).ledgerPosition(stored == 0 ? try await router.primaryHead() : stored)
        }
        let at = Timestamp.now()
        let (ledger, position) = try await reader.read(subscriberID: subscriber, asOf: nil, atLeast: stored)
        answer["at"] = .string(at.rfc3339)
        answer["entitlements"] = .array(ledger.entitlements(at: at).map(\.json))
        return Response.json(.object(answer)).ledgerPosition(position)
    }
}
