import LedgerCore
import LedgerStore
import Logging
import StoreAdapters

/// Stripe on the intake seam (`StoreAdapter`): a webhook event whose signature was verified, mapped by the
/// pure `StripeEventMapper`, then completed with what earlier events taught about Stripe's ids (an invoice's
/// transaction, a payment's invoice, a price's lookup key), all in the message's one transaction.
public struct StripeStore: StoreAdapter {
    public static let store = StripeEventMapper.store
    /// Links a payment intent or charge to the invoice it paid (`invoice_payment.paid`, API 2025-03-31.basil and later).
    static let paymentStore = "stripe.invoice_payment"
    /// Links an invoice's further paid line transactions to the invoice's transaction: a full refund ends them all.
    static let lineStore = "stripe.transaction_line"
    /// Links a price id to its catalog product (its lookup key), learned from the full prices events carry.
    static let priceStore = "stripe.price"
    /// The inbox id of an upgrade's credit that waits for the invoice it credits.
    public static let creditSuffix = ":credit"

    public var options: StripeMappingOptions

    public init(options: StripeMappingOptions = .init()) {
        self.options = options
    }

    /// A verified event and its mapping (already made: a payload the mapper refuses is answered 422 before).
    public struct Message: Sendable {
        public var event: StripeEvent
        public var payload: [String: JSONValue]
        public var raw: String
        public var mapping: StripeMapping
        /// A Connect account the ledger does not serve: recorded as ignored.
        public var otherAccount: Bool

        public init(event: StripeEvent, payload: [String: JSONValue], raw: String, mapping: StripeMapping, otherAccount: Bool = false) {
            self.event = event
            self.payload = payload
            self.raw = raw
            self.mapping = mapping
            self.otherAccount = otherAccount
        }
    }

    public var store: String { Self.store }

    public func record(_ m: Message) -> StoreInbox.Message {
        StoreInbox.Message(
            store: store, messageID: m.event.id, kind: m.event.type, environment: m.event.environment, accountID: m.mapping.accountID,
            status: .received, raw: m.raw, payload: m.payload)
    }

    public func map(_ m: Message, on tx: StoreTransaction) async throws -> StoreMapping {
        let (drafts, _) = try await Self.resolve(m.mapping.drafts, on: tx)
        return StoreMapping(
            drafts: drafts, accountID: m.mapping.accountID, subscriberHint: m.mapping.subscriberHint, ignored: m.otherAccount || m.mapping.ignored)
    }

    /// What the event teaches is recorded first; its Stripe ids are linked to the subscriber it names (applying
    /// what waited for them); an upgrade's credit whose invoice is not known yet waits in an inbox row of its
    /// own; then the event itself; then, its subscriber known, the ids it names are linked to it.
    public func apply(_ m: Message, on session: StoreSession<Self>) async throws -> StoreOutcome {
        let tx = session.tx
        let mapping = m.mapping
        let record = record(m)
        if m.otherAccount || mapping.ignored {
            return try await session.ingest(record, StoreMapping(drafts: [], accountID: mapping.accountID, ignored: true))
        }
        try await Self.learn(mapping, on: tx)
        let (drafts, waiting) = try await Self.resolve(mapping.drafts, on: tx)
        var linked = mapping.linkedIDs
        if let invoice = mapping.invoiceTransaction?.invoice {
            // The payment intent and charge that `invoice_payment.paid` paired with this invoice.
            linked += try await tx.accounts(store: Self.paymentStore, subscriber: invoice)
        }
        var accounts: [String] = []
        for a in [mapping.accountID].compactMap({ $0 }) + linked where !accounts.contains(a) { accounts.append(a) }
        // The event names its subscriber: its Stripe ids first (a conflict stores nothing), applying what waited.
        if let hint = mapping.subscriberHint, !accounts.isEmpty {
            try await session.link(accounts, to: hint, by: "stripe", counted: false)
        }
        if let (invoice, payments) = mapping.invoicePayment, let owner = try await tx.subscriber(store: store, accountID: invoice) {
            // The invoice's subscriber is known: its payment's refunds and disputes that waited apply now.
            do {
                try await session.link(payments, to: owner, by: "invoice_payment", counted: false)
            } catch let conflict as StoreLinks.Conflict {
                session.logger.warning("stripe payment already linked to another subscriber", metadata: ["error.message": "\(conflict)"])
            }
        }
        if let credited = waiting.first?.metadata["credited_invoice"]?.stringValue {
            // An upgrade's credit before the invoice it credits: it waits for that invoice (linked when applied),
            // so that it refunds that invoice's payment; the new item is applied meanwhile.
            var credit = record
            credit.messageID = m.event.id + Self.creditSuffix
            let outcome = try await session.ingest(credit, StoreMapping(drafts: waiting, accountID: credited))
            if case .refused = outcome { return outcome }
        }
        let outcome = try await session.ingest(
            record, StoreMapping(drafts: drafts, accountID: mapping.accountID, subscriberHint: mapping.subscriberHint))
        if case .applied(let subscriber, _) = outcome, mapping.subscriberHint == nil, !linked.isEmpty {
            // Payment intents, charges and the invoice learn their subscriber, for refunds, disputes and
            // credits that name nothing else.
            do {
                try await session.link(linked, to: subscriber, by: "stripe")
            } catch let conflict as StoreLinks.Conflict {
                session.logger.warning("stripe payment already linked to another subscriber", metadata: ["error.message": "\(conflict)"])
            }
        }
        return outcome
    }

    /// The ids named by the events pending on `accounts`, transitively (a payment applied from the inbox is
    /// found by its later refunds and disputes as if it had been applied at once).
    public func expand(_ accounts: [String], pending first: [StoreInbox.Message], on tx: StoreTransaction) async throws -> [String] {
        var all = accounts
        var frontier = all
        var seen: Set<String> = []
        for round in 0..<4 where !frontier.isEmpty {
            let pending = round == 0 ? first : try await tx.pending(store: store, accountIDs: frontier)
            frontier = []
            for p in pending where seen.insert(p.messageID).inserted {
                guard let m = try? StripeEventMapper.interpret(try StripeEvent(payload: p.payload), options: options) else { continue }
                var named = m.linkedIDs
                if let invoice = m.invoiceTransaction?.invoice {
                    named += try await tx.accounts(store: Self.paymentStore, subscriber: invoice)
                }
                for id in named where !all.contains(id) {
                    all.append(id)
                    frontier.append(id)
                }
            }
        }
        return all
    }

    /// What the waiting events teach is recorded before any of them is resolved.
    public func prepare(replaying pending: [StoreInbox.Message], on tx: StoreTransaction) async throws {
        for p in pending {
            guard let m = try? remap(p) else { continue }
            try await Self.learn(m, on: tx)
        }
    }

    /// An upgrade's credit still waiting for its invoice stays pending (its own inbox row), and its event applies the rest.
    public func remap(_ stored: StoreInbox.Message, on tx: StoreTransaction) async throws -> [EventDraft] {
        let m = try remap(stored)
        let (ready, waiting) = try await Self.resolve(m.drafts, on: tx)
        guard stored.messageID.hasSuffix(Self.creditSuffix) else { return ready }
        guard waiting.isEmpty else {
            throw EventValidationError(field: "data.object.lines", reason: "the credited invoice is not known yet")
        }
        return ready.filter { $0.metadata["credited_invoice"] != nil }
    }

    /// A pending event's mapping, again from its stored payload.
    func remap(_ pending: StoreInbox.Message) throws(EventValidationError) -> StripeMapping {
        do throws(StoreMappingError) {
            return try StripeEventMapper.interpret(try StripeEvent(payload: pending.payload), options: options)
        } catch {
            throw EventValidationError(field: error.field, reason: error.description)
        }
    }

    /// Records what an event teaches about Stripe's ids (an invoice's transactions, a payment's invoice, a
    /// price's lookup key), before anything is resolved from them: delivery order then does not matter.
    static func learn(_ m: StripeMapping, on tx: StoreTransaction) async throws {
        func link(_ store: String, _ ids: [String], to target: String, by origin: String) async throws {
            do {
                try await tx.link(store: store, ids, to: target, by: origin)
            } catch is StoreLinks.Conflict {
                // First learned stands (Stripe never pairs one payment with two invoices).
            }
        }
        // Prices and the invoice's transaction in one statement (first learned stands for each).
        try await StripeInvoices.record(prices: m.prices, store: priceStore, invoice: m.invoiceTransaction, on: tx)
        if let (_, transaction) = m.invoiceTransaction, !m.lineTransactions.isEmpty {
            try await link(lineStore, m.lineTransactions, to: transaction, by: "invoice")
        }
        if let (invoice, payments) = m.invoicePayment { try await link(paymentStore, payments, to: invoice, by: "invoice_payment") }
    }

    /// Drafts with what Stripe's ids stand for in the ledger: a price id's lookup key, a credited invoice's
    /// transaction, a refunded payment's invoice transaction, and a full cut of every paid line of it. An
    /// upgrade's credit whose invoice is not known yet is returned apart (`waiting`).
    static func resolve(_ drafts: [EventDraft], on tx: StoreTransaction) async throws -> (ready: [EventDraft], waiting: [EventDraft]) {
        var ready: [EventDraft] = []
        var waiting: [EventDraft] = []
        for var d in drafts {
            if let product = d.productID, product.hasPrefix("price_") || product.hasPrefix("plan_"),
                let key = try await tx.subscriber(store: priceStore, accountID: product)
            {
                d.productID = key
                if d.data[EventDataKey.productID] != nil { d.data[EventDataKey.productID] = .string(key) }
            }
            if let invoice = d.metadata["credited_invoice"]?.stringValue {
                guard let transaction = try await StripeInvoices.transaction(of: invoice, on: tx) else {
                    waiting.append(d)
                    continue
                }
                d.data[EventDataKey.transactionID] = .string(transaction)
                ready.append(d)
                continue
            }
            if d.type == .refund || d.type == .refundReversal {
                for payment in [d.metadata["payment_intent"]?.stringValue, d.metadata["charge"]?.stringValue].compactMap({ $0 }) {
                    guard let invoice = try await tx.subscriber(store: paymentStore, accountID: payment) else { continue }
                    d.data[EventDataKey.transactionID] = .string(try await StripeInvoices.transaction(of: invoice, on: tx) ?? invoice)
                    break
                }
            }
            ready.append(d)
            // A cut (a full refund, a chargeback) or its reversal concerns the payment: every paid line of its invoice.
            let cuts = d.type == .refundReversal || (d.type == .refund && d.data[EventDataKey.cut] != .bool(false))
            if cuts, let transaction = d.data[EventDataKey.transactionID]?.stringValue {
                for line in try await tx.accounts(store: lineStore, subscriber: transaction) {
                    var l = d
                    l.idempotencyKey += ":\(line)"
                    l.data[EventDataKey.transactionID] = .string(line)
                    if l.type == .refund { l.data[EventDataKey.amountMinor] = 0 }
                    ready.append(l)
                }
            }
        }
        return (ready, waiting)
    }
}

extension StripeStore {
    /// Asks Stripe's API for the lookup key of each price the drafts name only by id and no event taught yet
    /// (API 2025-03-31.basil and later put only `pricing.price_details.price` on an invoice line), and links
    /// it as a full price would (`stripe.price`). Before the message's transaction, never inside it; a failure
    /// leaves the id as it is: the catalog may know the price by its id, else the event is refused and Stripe
    /// retries it.
    public static func lookUpPrices(of mapping: StripeMapping, links: StoreLinks, client: StripeAPIClient, logger: Logger) async {
        // The full prices the event carries are learned in its transaction: not asked for.
        var asked = Set(mapping.prices.map(\.price))
        var count = 0
        for d in mapping.drafts {
            guard let price = d.productID, price.hasPrefix("price_") || price.hasPrefix("plan_"), count < 10,
                asked.insert(price).inserted
            else { continue }
            count += 1
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
}
