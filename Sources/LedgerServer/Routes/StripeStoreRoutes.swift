import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore
import LedgerStore
import Logging
import Metrics
import StoreAdapters

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

    static let store = StripeEventMapper.store
    /// Links a paid invoice's id to its ledger transaction id, for the proration credits of a later change.
    static let invoiceStore = "stripe.invoice"
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
            mapping = try StripeEventMapper.interpret(event)
        } catch {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        context.logger.info("stripe event", metadata: ["stripe.event_id": "\(event.id)", "stripe.type": "\(event.type)"])
        let id = JSONValue.string(event.id)
        let raw = String(decoding: bytes, as: UTF8.self)

        if mapping.ignored {
            Counter(label: "subledger_stripe_events_ignored_total", dimensions: [("type", event.type)]).increment()
            _ = try await intake.inbox.recordIfNew(
                StoreInbox.Message(
                    store: Self.store, messageID: event.id, kind: event.type, environment: event.environment,
                    accountID: mapping.accountID, status: .ignored, raw: raw, payload: payload))
            return Response.json(["status": "ignored", "event_id": id]).ledgerPosition(try await router.primaryHead())
        }

        let drafts = try await Self.withInvoiceTransactions(mapping.drafts, links: intake.links)
        if let (invoice, transaction) = mapping.invoiceTransaction {
            try await intake.links.link(store: Self.invoiceStore, [invoice], to: transaction, by: "invoice")
        }
        var accounts: [String] = []
        for a in [mapping.accountID].compactMap({ $0 }) + mapping.linkedIDs where !accounts.contains(a) { accounts.append(a) }
        // The event names its subscriber: link its Stripe ids first (a conflict stores nothing), applying what waited.
        if let hint = mapping.subscriberHint, !accounts.isEmpty {
            _ = try await intake.link(
                store: Self.store, accountIDs: accounts, to: hint, by: "stripe", logger: context.logger,
                drafts: try await Self.remapper(intake, accounts: accounts))
        }
        let outcome = try await intake.ingest(
            EventIntake.StoreMessage(
                store: Self.store, messageID: event.id, kind: event.type, environment: event.environment, accountID: mapping.accountID,
                subscriberHint: mapping.subscriberHint, raw: raw, payload: payload, drafts: drafts))
        switch outcome {
        case .duplicate:
            return Response.json(["status": "duplicate", "event_id": id]).ledgerPosition(try await router.primaryHead())
        case .notice:
            return Response.json(["status": "notice", "event_id": id]).ledgerPosition(try await router.primaryHead())
        case .pending:
            return Response.json(["status": "pending", "event_id": id]).ledgerPosition(try await router.primaryHead())
        case .applied(let subscriber, let events):
            // Payment intents and charges learn their subscriber, for refunds and disputes that name nothing else.
            var applied = 0
            if mapping.subscriberHint == nil, !mapping.linkedIDs.isEmpty {
                do {
                    applied = try await intake.link(
                        store: Self.store, accountIDs: mapping.linkedIDs, to: subscriber, by: "stripe", logger: context.logger,
                        drafts: try await Self.remapper(intake, accounts: mapping.linkedIDs))
                } catch let conflict as StoreLinks.Conflict {
                    context.logger.warning("stripe payment already linked to another subscriber", metadata: ["error.message": "\(conflict)"])
                }
            }
            let position = applied > 0 ? try await router.primaryHead() : events.map(\.position).max() ?? 0
            return Response.json([
                "status": "applied", "event_id": id, "subscriber_id": .string(subscriber), "events": .array(events.map(\.json)),
            ]).ledgerPosition(position)
        }
    }

    /// A pending event's drafts, mapped again from its stored payload.
    static func remap(_ pending: StoreInbox.Message) throws(EventValidationError) -> [EventDraft] {
        do throws(StoreMappingError) {
            return try StripeEventMapper.interpret(try StripeEvent(payload: pending.payload)).drafts
        } catch {
            throw EventValidationError(field: error.field, reason: error.description)
        }
    }

    /// Proration credits name the replaced invoice: its transaction is the payment recorded for it, when known.
    static func withInvoiceTransactions(_ drafts: [EventDraft], links: StoreLinks) async throws -> [EventDraft] {
        var drafts = drafts
        for i in drafts.indices {
            guard let invoice = drafts[i].metadata["credited_invoice"]?.stringValue,
                let transaction = try await links.subscriber(store: invoiceStore, accountID: invoice)
            else { continue }
            drafts[i].data["transaction_id"] = .string(transaction)
        }
        return drafts
    }

    /// `remap` for the events pending on `accounts`, with their proration credits' transactions looked up first
    /// (`EventIntake.link` maps synchronously).
    static func remapper(_ intake: EventIntake, accounts: [String]) async throws -> @Sendable (StoreInbox.Message) throws -> [EventDraft] {
        var mapped: [String: [EventDraft]] = [:]
        for pending in try await intake.inbox.pending(store: store, accountIDs: accounts) {
            guard let drafts = try? remap(pending) else { continue }
            mapped[pending.messageID] = try await withInvoiceTransactions(drafts, links: intake.links)
        }
        return { [mapped] pending in try mapped[pending.messageID] ?? remap(pending) }
    }
}
