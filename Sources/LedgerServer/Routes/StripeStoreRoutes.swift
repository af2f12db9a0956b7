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

    static let store = StripeEventMapper.store
    static let signatureHeader = HTTPField.Name("Stripe-Signature")!

    func register(on router: Router<LedgerRequestContext>) {
        router.post("v1/stores/stripe/webhooks", use: webhook)
    }

    @Sendable func webhook(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        guard verifier.isConfigured else {
            throw APIError(
                .notFound, code: "not_configured",
                message: "Stripe webhooks are not configured: start serve with --stripe-webhook-secret (or SUBLEDGER_STRIPE_WEBHOOK_SECRETS)")
        }
        let bytes = Array(try await RequestBody.collect(request, limit: maxBodyBytes).readableBytesView)
        do throws(StripeSignatureVerifier.Failure) {
            try verifier.verify(header: request.headers[Self.signatureHeader], body: bytes, now: Int64(Date().timeIntervalSince1970))
        } catch {
            throw APIError(.badRequest, code: "invalid_signature", message: error.description)
        }
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes[...])
        } catch {
            throw APIError(.badRequest, code: "invalid_request", message: "the body is not valid JSON: \(error)")
        }
        guard case .object(let payload) = value else {
            throw APIError(.badRequest, code: "invalid_request", message: "the body must be a JSON object")
        }
        let event: StripeEvent
        let mapping: StripeMapping
        do throws(StoreMappingError) {
            event = try StripeEvent(payload: payload)
            mapping = try StripeEventMapper.interpret(event, options: settings.mapping)
        } catch {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        let logger = context.logger
        logger.info(
            "stripe event",
            metadata: ["stripe.event_id": "\(event.id)", "stripe.type": "\(event.type)", "stripe.api_version": "\(event.apiVersion ?? "none")"])
        if !StripeAPIVersion.isKnown(event.apiVersion) {
            let version = event.apiVersion ?? "none"
            versions.unknown(version)
            Counter(label: "subledger_stripe_events_unknown_api_version_total", dimensions: [("api_version", String(version.prefix(40)))]).increment()
            logger.warning(
                "stripe event in an API version the ledger does not know: mapped as the nearest known shape; check docs/stripe.md",
                metadata: ["stripe.event_id": "\(event.id)", "stripe.api_version": "\(version)"])
        }
        let raw = String(decoding: bytes, as: UTF8.self)
        var reason: [String: JSONValue] = [:]
        if let account = event.account, !settings.accounts.contains(account) {
            // A Connect event of an account the ledger does not serve: answered 200 so Stripe does not retry it.
            Counter(label: "subledger_stripe_events_other_account_total", dimensions: [("type", event.type)]).increment()
            logger.warning(
                "stripe event of another account ignored (serve --stripe-account accepts one)",
                metadata: ["stripe.event_id": "\(event.id)", "stripe.account": "\(account)"])
            reason["reason"] = .string("the event is of Stripe account \(account), which this ledger does not serve (serve --stripe-account)")
        } else if mapping.ignored {
            Counter(label: "subledger_stripe_events_ignored_total", dimensions: [("type", event.type)]).increment()
        } else if let prices {
            // Outside the transaction: the lookup key of a price an invoice names only by id.
            await StripeStore.lookUpPrices(of: mapping, links: intake.links, client: prices, logger: logger)
        }
        let message = StripeStore.Message(event: event, payload: payload, raw: raw, mapping: mapping, otherAccount: !reason.isEmpty)
        let result = try await intake.stores.ingest(StripeStore(options: settings.mapping), message, logger: logger)
        return try await StoreAnswer.response(result, id: ("event_id", event.id), router: router, extra: reason)
    }
}
