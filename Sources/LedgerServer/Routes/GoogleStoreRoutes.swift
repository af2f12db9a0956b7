import Foundation
import GoogleStore
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
    /// "Now" for the entitlements a purchase answer shows (tests set it).
    var clock: WallClock = .system

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
        do throws(GoogleTokenError) {
            try await play.authorizePush(header: header, logger: context.logger)
        } catch {
            throw AuthMiddleware.unauthorized(error.description)
        }
        let bytes = try await RequestBody.collect(request, limit: min(maxBodyBytes, Self.maxPushBytes))
        let push: (notification: GoogleNotification, raw: String)
        do throws(GooglePlay.PushRefusal) {
            push = try play.readPush(Array(bytes.readableBytesView), logger: context.logger)
        } catch {
            throw error.apiError
        }
        let outcome = try await play.receive(push.notification, raw: push.raw)
        return try await StoreAnswer.response(.init(outcome: outcome), id: ("message_id", push.notification.messageID), router: router)
    }

    @Sendable func purchase(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.append)
        guard let play, play.configuration.serviceAccount != nil else { throw Self.notConfigured }
        let bytes = try await RequestBody.collect(request, limit: maxBodyBytes)
        guard case .object(let body)? = try? JSONParser.parse(bytes.readableBytesView) else {
            throw APIError.invalidRequest("the body must be a JSON object")
        }
        let submission: GooglePlay.Submission
        let events: [RecordedEvent]
        do {
            submission = try play.readSubmission(body)
            events = try await play.submit(
                subscriber: submission.subscriber, package: submission.package, productID: submission.productID, token: submission.token)
        } catch let error as GooglePlayError {
            throw error.purchaseAnswer
        } catch let error as StoreMappingError {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        return try await answer(subscriber: submission.subscriber, events: events, context: context)
    }

    /// What was stored is the writer's; the entitlements are reader data, answered only to a key that may read them.
    private func answer(subscriber: String, events: [RecordedEvent], context: LedgerRequestContext) async throws -> Response {
        var answer: [String: JSONValue] = ["subscriber_id": .string(subscriber), "events": .array(events.map(\.json))]
        let stored = events.map(\.position).max() ?? 0
        guard context.apiKey?.role.allows(.readEntitlements) == true else {
            return Response.json(.object(answer)).ledgerPosition(stored == 0 ? try await router.primaryHead() : stored)
        }
        let at = clock.now()
        let (ledger, position) = try await reader.read(subscriberID: subscriber, asOf: nil, atLeast: stored)
        answer["at"] = .string(at.rfc3339)
        answer["entitlements"] = .array(ledger.entitlements(at: at).map(\.json))
        return Response.json(.object(answer)).ledgerPosition(position)
    }
}

extension GooglePlayError {
    /// A token Google does not know is the client's mistake (422); anything else, Google's unavailability (503).
    var purchaseAnswer: APIError {
        switch self {
        case .refused(let status, _) where status == 404 || status == 410 || status == 400:
            APIError(
                .unprocessableContent, code: "invalid_request", message: "purchase_token: Google does not know it (\(self))",
                field: "purchase_token")
        default:
            APIError(.serviceUnavailable, code: "unavailable", message: description)
        }
    }
}

extension GooglePlay.PushRefusal {
    var apiError: APIError {
        switch self {
        case .body: APIError.invalidRequest("the body must be a JSON object (a Pub/Sub push)")
        case .mapping(let e): APIError(.unprocessableContent, code: "invalid_request", message: e.description, field: e.field)
        }
    }
}
