import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore
import LedgerStore
import Logging
import Metrics
import StoreAdapters
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
    /// Links a paid invoice's id to its ledger transaction id, for the proration credits of a later change.
    static let invoiceStore = "stripe.invoice"
    /// Links a payment intent or charge to the invoice it paid (`invoice_payment.paid`, API 2025-03-31.basil and later).
    static let paymentStore = "stripe.invoice_payment"
    /// Links an invoice's further paid line transactions to the invoice's transaction: a full refund ends them all.
    static let lineStore = "stripe.transaction_line"
    /// Links a price id to its catalog product (its lookup key), learned from the full prices events carry.
    static let priceStore = "stripe.price"
    static let signatureHeader = HTTPField.Name("Stripe-Signature")!
    /// The inbox id of an upgrade's credit that waits for the invoice it credits.
    static let creditSuffix = ":credit"

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
        let id = JSONValue.string(event.id)
        let raw = String(decoding: bytes, as: UTF8.self)

        if let account = event.account, !settings.accounts.contains(account) {
            // A Connect event of an account the ledger does not serve: answered 200 so Stripe does not retry it.
            Counter(label: "subledger_stripe_events_other_account_total", dimensions: [("type", event.type)]).increment()
            logger.warning(
                "stripe event of another account ignored (serve --stripe-account accepts one)",
                metadata: ["stripe.event_id": "\(event.id)", "stripe.account": "\(account)"])
            _ = try await intake.inbox.recordIfNew(
                StoreInbox.Message(
                    store: Self.store, messageID: event.id, kind: event.type, environment: event.environment, accountID: mapping.accountID,
                    status: .ignored, raw: raw, payload: payload))
            return Response.json([
                "status": "ignored", "event_id": id,
                "reason": .string("the event is of Stripe account \(account), which this ledger does not serve (serve --stripe-account)"),
            ]).ledgerPosition(try await router.primaryHead())
        }

        if mapping.ignored {
            Counter(label: "subledger_stripe_events_ignored_total", dimensions: [("type", event.type)]).increment()
            _ = try await intake.inbox.recordIfNew(
                StoreInbox.Message(
                    store: Self.store, messageID: event.id, kind: event.type, environment: event.environment,
                    accountID: mapping.accountID, status: .ignored, raw: raw, payload: payload))
            return Response.json(["status": "ignored", "event_id": id]).ledgerPosition(try await router.primaryHead())
        }

        let links = intake.links
        try await Self.learn(mapping, links: links)
        if let prices { await Self.lookUpPrices(mapping.drafts, links: links, client: prices, logger: logger) }
        let (drafts, waiting) = try await Self.resolve(mapping.drafts, links: links)
        var linked = mapping.linkedIDs
        if let invoice = mapping.invoiceTransaction?.invoice {
            // The payment intent and charge that `invoice_payment.paid` paired with this invoice.
            linked += try await links.accounts(store: Self.paymentStore, subscriber: invoice)
        }
        var accounts: [String] = []
        for a in [mapping.accountID].compactMap({ $0 }) + linked where !accounts.contains(a) { accounts.append(a) }
        // The event names its subscriber: link its Stripe ids first (a conflict stores nothing), applying what waited.
        if let hint = mapping.subscriberHint, !accounts.isEmpty {
            _ = try await Self.linkAndApply(intake, accounts: accounts, to: hint, by: "stripe", logger: logger, options: settings.mapping)
        }
        if let (invoice, payments) = mapping.invoicePayment, let owner = try await links.subscriber(store: Self.store, accountID: invoice) {
            // The invoice's subscriber is known: its payment's refunds and disputes that waited apply now.
            do {
                _ = try await Self.linkAndApply(
                    intake, accounts: payments, to: owner, by: "invoice_payment", logger: logger, options: settings.mapping)
            } catch let conflict as StoreLinks.Conflict {
                logger.warning("stripe payment already linked to another subscriber", metadata: ["error.message": "\(conflict)"])
            }
        }
        if let credited = waiting.first?.metadata["credited_invoice"]?.stringValue {
            // An upgrade's credit before the invoice it credits: it waits for that invoice (linked when applied),
            // so that it refunds that invoice's payment; the new item is applied meanwhile.
            _ = try await intake.ingest(
                EventIntake.StoreMessage(
                    store: Self.store, messageID: event.id + Self.creditSuffix, kind: event.type, environment: event.environment,
                    accountID: credited, subscriberHint: nil, raw: raw, payload: payload, drafts: waiting))
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
            // Payment intents, charges and the invoice learn their subscriber, for refunds, disputes and
            // credits that name nothing else.
            var applied = 0
            if mapping.subscriberHint == nil, !linked.isEmpty {
                do {
                    applied = try await Self.linkAndApply(
                        intake, accounts: linked, to: subscriber, by: "stripe", logger: logger, options: settings.mapping)
                } catch let conflict as StoreLinks.Conflict {
                    logger.warning("stripe payment already linked to another subscriber", metadata: ["error.message": "\(conflict)"])
                }
            }
            let position = applied > 0 ? try await router.primaryHead() : events.map(\.position).max() ?? 0
            return Response.json([
                "status": "applied", "event_id": id, "subscriber_id": .string(subscriber), "events": .array(events.map(\.json)),
            ]).ledgerPosition(position)
        }
    }

    /// Records what an event teaches about Stripe's ids (an invoice's transactions, a payment's invoice, a
    /// price's lookup key), before anything is resolved from them: delivery order then does not matter.
    static func learn(_ m: StripeMapping, links: StoreLinks) async throws {
        func link(_ store: String, _ ids: [String], to target: String, by origin: String) async throws {
            do {
                try await links.link(store: store, ids, to: target, by: origin)
            } catch is StoreLinks.Conflict {
                // First learned stands (Stripe never pairs one payment with two invoices).
            }
        }
        for (price, product) in m.prices { try await link(priceStore, [price], to: product, by: "price") }
        if let (invoice, transaction) = m.invoiceTransaction {
            try await link(invoiceStore, [invoice], to: transaction, by: "invoice")
            if !m.lineTransactions.isEmpty { try await link(lineStore, m.lineTransactions, to: transaction, by: "invoice") }
        }
        if let (invoice, payments) = m.invoicePayment { try await link(paymentStore, payments, to: invoice, by: "invoice_payment") }
    }

    /// Asks Stripe's API for the lookup key of each price the drafts name only by id and no event taught yet
    /// (API 2025-03-31.basil and later put only `pricing.price_details.price` on an invoice line), and links
    /// it as a full price would (`stripe.price`). Outside any transaction; a failure leaves the id as it is:
    /// the catalog may know the price by its id, else the event is refused and Stripe retries it.
    static func lookUpPrices(_ drafts: [EventDraft], links: StoreLinks, client: StripeAPIClient, logger: Logger) async {
        var asked: Set<String> = []
        for d in drafts {
            guard let price = d.productID, price.hasPrefix("price_") || price.hasPrefix("plan_"), asked.count < 10,
                asked.insert(price).inserted
            else { continue }
            do {
                guard try await links.subscriber(store: priceStore, accountID: price) == nil,
                    let key = try await client.priceLookupKey(price), key != price
                else { continue }
                try await links.link(store: priceStore, [price], to: key, by: "price")
                logger.info("stripe price looked up", metadata: ["stripe.price": "\(price)", "stripe.lookup_key": "\(key)"])
            } catch is StoreLinks.Conflict {
                // Learned meanwhile from another event: first learned stands.
            } catch {
                logger.warning("stripe price look-up failed", metadata: ["stripe.price": "\(price)", "error.message": "\(error)"])
            }
        }
    }

    /// Drafts with what Stripe's ids stand for in the ledger: a price id's lookup key, a credited invoice's
    /// transaction, a refunded payment's invoice transaction, and a full cut of every paid line of it. An
    /// upgrade's credit whose invoice is not known yet is returned apart (`waiting`).
    static func resolve(_ drafts: [EventDraft], links: StoreLinks) async throws -> (ready: [EventDraft], waiting: [EventDraft]) {
        var ready: [EventDraft] = []
        var waiting: [EventDraft] = []
        for var d in drafts {
            if let product = d.productID, product.hasPrefix("price_") || product.hasPrefix("plan_"),
                let key = try await links.subscriber(store: priceStore, accountID: product)
            {
                d.productID = key
                if d.data["product_id"] != nil { d.data["product_id"] = .string(key) }
            }
            if let invoice = d.metadata["credited_invoice"]?.stringValue {
                guard let transaction = try await links.subscriber(store: invoiceStore, accountID: invoice) else {
                    waiting.append(d)
                    continue
                }
                d.data["transaction_id"] = .string(transaction)
                ready.append(d)
                continue
            }
            if d.type == .refund || d.type == .refundReversal {
                for payment in [d.metadata["payment_intent"]?.stringValue, d.metadata["charge"]?.stringValue].compactMap({ $0 }) {
                    guard let invoice = try await links.subscriber(store: paymentStore, accountID: payment) else { continue }
                    d.data["transaction_id"] = .string(try await links.subscriber(store: invoiceStore, accountID: invoice) ?? invoice)
                    break
                }
            }
            ready.append(d)
            // A cut (a full refund, a chargeback) or its reversal concerns the payment: every paid line of its invoice.
            let cuts = d.type == .refundReversal || (d.type == .refund && d.data["cut"] != .bool(false))
            if cuts, let transaction = d.data["transaction_id"]?.stringValue {
                for line in try await links.accounts(store: lineStore, subscriber: transaction) {
                    var l = d
                    l.idempotencyKey += ":\(line)"
                    l.data["transaction_id"] = .string(line)
                    if l.type == .refund { l.data["amount_minor"] = 0 }
                    ready.append(l)
                }
            }
        }
        return (ready, waiting)
    }

    /// Links `accounts` to `subscriber` and applies the events that waited for them, together with the ids
    /// those events name (their payment intent, charge and invoice, transitively): a payment applied from the
    /// inbox is found by its later refunds and disputes as if it had been applied at once.
    static func linkAndApply(
        _ intake: EventIntake, accounts: [String], to subscriber: String, by origin: String, logger: Logger, options: StripeMappingOptions
    ) async throws -> Int {
        var all: [String] = []
        for a in accounts where !all.contains(a) { all.append(a) }
        var frontier = all
        var seen: Set<String> = []
        for _ in 0..<4 where !frontier.isEmpty {
            let pending = try await intake.inbox.pending(store: store, accountIDs: frontier)
            frontier = []
            for p in pending where seen.insert(p.messageID).inserted {
                guard let m = try? StripeEventMapper.interpret(try StripeEvent(payload: p.payload), options: options) else { continue }
                var named = m.linkedIDs
                if let invoice = m.invoiceTransaction?.invoice {
                    named += try await intake.links.accounts(store: paymentStore, subscriber: invoice)
                }
                for id in named where !all.contains(id) {
                    all.append(id)
                    frontier.append(id)
                }
            }
        }
        return try await intake.link(
            store: store, accountIDs: all, to: subscriber, by: origin, logger: logger,
            drafts: try await remapper(intake, accounts: all, options: options))
    }

    /// A pending event's drafts, mapped again from its stored payload.
    static func remap(_ pending: StoreInbox.Message, options: StripeMappingOptions) throws(EventValidationError) -> StripeMapping {
        do throws(StoreMappingError) {
            return try StripeEventMapper.interpret(try StripeEvent(payload: pending.payload), options: options)
        } catch {
            throw EventValidationError(field: error.field, reason: error.description)
        }
    }

    /// `remap` for the events pending on `accounts`, resolved first (`EventIntake.link` maps synchronously):
    /// what they teach is recorded before any of them is resolved. An upgrade's credit still waiting for its
    /// invoice stays pending (its own inbox entry), and its event applies the rest.
    static func remapper(
        _ intake: EventIntake, accounts: [String], options: StripeMappingOptions
    ) async throws -> @Sendable (StoreInbox.Message) throws -> [EventDraft] {
        let pending = try await intake.inbox.pending(store: store, accountIDs: accounts)
        var mappings: [String: StripeMapping] = [:]
        for p in pending {
            guard let m = try? remap(p, options: options) else { continue }
            mappings[p.messageID] = m
            try await learn(m, links: intake.links)
        }
        var mapped: [String: Result<[EventDraft], EventValidationError>] = [:]
        for p in pending {
            guard let m = mappings[p.messageID] else { continue }
            let (ready, waiting) = try await resolve(m.drafts, links: intake.links)
            if p.messageID.hasSuffix(creditSuffix) {
                let credits = ready.filter { $0.metadata["credited_invoice"] != nil }
                mapped[p.messageID] =
                    waiting.isEmpty
                    ? .success(credits) : .failure(EventValidationError(field: "data.object.lines", reason: "the credited invoice is not known yet"))
            } else {
                mapped[p.messageID] = .success(ready)
            }
        }
        return { [mapped] pending in
            if let result = mapped[pending.messageID] { return try result.get() }
            return try remap(pending, options: options).drafts
        }
    }
}
