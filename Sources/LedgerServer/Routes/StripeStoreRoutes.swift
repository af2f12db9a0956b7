import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore
import LedgerStore
import Logging
import Metrics
import StoreAdapters
import StripeStore
import Synchronization

/// What `serve` tells the Stripe adapter beyond its secrets.
public struct StripeSettings: Sendable {
    /// The Connect accounts (`acct_…`) whose events the ledger applies; an event of another account is ignored.
    /// Events without an `account` (the platform's own) are always applied.
    public var accounts: [String]
    public var mapping: StripeMappingOptions

    public init(accounts: [String] = [], mapping: StripeMappingOptions = .init()) {
        self.accounts = accounts
        self.mapping = mapping
    }
}

/// The Stripe API versions seen that the mapper does not know, for `/ready` (docs/stripe.md).
public final class StripeVersionWatch: Sendable {
    private let seen = Mutex<[String: Int]>([:])

    public init() {}

    func unknown(_ version: String) {
        seen.withLock { s in
            // Bounded: a flood of odd versions cannot grow memory.
            if s[version] != nil || s.count < 20 { s[version, default: 0] += 1 }
        }
    }

    /// The unknown versions seen since start, sorted.
    public var unknownVersions: [String] { seen.withLock { $0.keys.sorted() } }
}

/// `POST /v1/stores/stripe/webhooks`: Stripe's signed webhook events, turned into ledger events.
///
/// Authenticated by `Stripe-Signature` (the endpoint secret), not by an API key: the route is registered
/// outside the `v1` group's `AuthMiddleware`, since Stripe cannot send a bearer key.
struct StripeStoreRoutes {
    let verifier: StripeSignatureVerifier
    let intake: EventIntake
    /// For the position of answers that append nothing themselves.
    let router: ReadRouter
    let maxBodyBytes: Int
    var settings = StripeSettings()
    var versions = StripeVersionWatch()
    /// Stripe's API (`serve --stripe-api-key`), for the lookup key of a price an invoice names only by id.
    var prices: StripeAPIClient? = nil
    /// "Now" for the signature's timestamp tolerance (tests set it).
    var clock: WallClock = .system

    static let store = StripeEventMapper.store
    static let signatureHeader = HTTPField.Name("Stripe-Signature")!

    func register(on router: Router<LedgerRequestContext>) {
        router.post("v1/stores/stripe/webhooks", use: webhook)
    }

    static let notConfigured = APIError(
        .notFound, code: "not_configured",
        message: "Stripe webhooks are not configured: start serve with --stripe-webhook-secret (or SUBLEDGER_STRIPE_WEBHOOK_SECRETS)")

    @Sendable func webhook(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        guard verifier.isConfigured else { throw Self.notConfigured }
        let bytes = Array(try await RequestBody.collect(request, limit: maxBodyBytes).readableBytesView)
        let message: StripeStore.Message
        do throws(StripeWebhook.Refusal) {
            message = try StripeWebhook.read(
                header: request.headers[Self.signatureHeader], body: bytes, verifier: verifier, now: clock.now().microseconds / 1_000_000,
                accounts: settings.accounts, options: settings.mapping, logger: context.logger, unknownVersion: versions.unknown)
        } catch {
            throw error.apiError
        }
        if let prices, !message.otherAccount, !message.mapping.ignored {
            // Outside the transaction: the lookup key of a price an invoice names only by id.
            await StripeStore.lookUpPrices(of: message.mapping, links: intake.links, client: prices, logger: context.logger)
        }
        let result = try await intake.stores.ingest(StripeStore(options: settings.mapping), message, logger: context.logger)
        return try await StoreAnswer.response(result, id: ("event_id", message.event.id), router: router, extra: message.answerExtra)
    }
}

extension StripeWebhook.Refusal {
    var apiError: APIError {
        switch self {
        case .signature(let why): APIError(.badRequest, code: "invalid_signature", message: why)
        case .body(let why): APIError(.badRequest, code: "invalid_request", message: why)
        case .mapping(let e): APIError(.unprocessableContent, code: "invalid_request", message: e.description, field: e.field)
        }
    }
}
