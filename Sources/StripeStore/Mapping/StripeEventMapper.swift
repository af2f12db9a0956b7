import LedgerCore
import StoreAdapters

/// A verified Stripe event (`object: "event"`): its envelope and the object it carries.
public struct StripeEvent: Sendable {
    public var id: String
    public var type: String
    /// The event's creation time (Stripe keeps it across retries): used only where the object has no time of its own.
    public var created: Timestamp
    public var livemode: Bool
    public var object: [String: JSONValue]
    public var previousAttributes: [String: JSONValue]
    /// The whole event as received.
    public var payload: [String: JSONValue]
    /// The API version Stripe rendered the object in (the endpoint's version); nil when the event names none.
    public var apiVersion: String?
    /// The Connect account the event happened on; nil for the platform's own account.
    public var account: String?

    public var environment: LedgerEnvironment { livemode ? .production : .sandbox }

    /// Reads the envelope; the error names the missing or malformed field.
    public init(payload: [String: JSONValue]) throws(StoreMappingError) {
        guard let id = payload["id"]?.stringValue, !id.isEmpty, id.utf8.count <= 255 else {
            throw StoreMappingError(field: "id", reason: "is required (the Stripe event id, at most 255 bytes)")
        }
        guard let type = payload["type"]?.stringValue, !type.isEmpty, type.utf8.count <= 100 else {
            throw StoreMappingError(field: "type", reason: "is required (at most 100 bytes)")
        }
        guard let object = payload["data"]?.objectValue?["object"]?.objectValue else {
            throw StoreMappingError(field: "data.object", reason: "is required (an object)")
        }
        self.id = id
        self.type = type
        self.created = try StripeEventMapper.time(payload["created"], field: "created")
        self.livemode = payload["livemode"]?.boolValue ?? false
        self.object = object
        self.previousAttributes = payload["data"]?.objectValue?["previous_attributes"]?.objectValue ?? [:]
        self.payload = payload
        self.apiVersion = payload["api_version"]?.stringValue.flatMap { $0.isEmpty || $0.utf8.count > 100 ? nil : $0 }
        self.account = payload["account"]?.stringValue.flatMap { $0.isEmpty || $0.utf8.count > 255 ? nil : $0 }
    }
}

/// The API versions whose shapes the mapper reads (docs/stripe.md). Stripe renders each event in the webhook
/// endpoint's version: 2024-06-20 to 2025-02-24.acacia name the invoice's subscription, payment intent, charge and
/// line prices on the invoice; 2025-03-31.basil and later name the subscription under `parent`, the price only by id
/// under `pricing.price_details`, and pair an invoice with its payment only in `invoice_payment.paid`.
public enum StripeAPIVersion {
    public static let known: [String] = [
        "2024-06-20", "2024-09-30.acacia", "2024-10-28.acacia", "2024-11-20.acacia", "2024-12-18.acacia", "2025-01-27.acacia",
        "2025-02-24.acacia", "2025-03-31.basil", "2025-04-30.basil", "2025-05-28.basil", "2025-06-30.basil", "2025-07-30.basil",
        "2025-08-27.basil", "2025-09-30.clover", "2025-10-29.clover", "2025-11-17.clover", "2025-12-15.clover", "2026-01-28.clover",
        "2026-02-25.clover", "2026-03-25.dahlia", "2026-04-22.dahlia", "2026-05-27.dahlia", "2026-06-24.dahlia", "2026-07-29.dahlia",
    ]

    /// Whether the mapper knows this version's shapes (an event without a version is not known either).
    public static func isKnown(_ version: String?) -> Bool {
        version.map(known.contains) ?? false
    }
}

/// The mapping's settings (`serve` options).
public struct StripeMappingOptions: Sendable {
    /// The longest a failed period's grace may last, however long Stripe keeps retrying (`--stripe-grace-max`).
    public var graceMaxSeconds: Int64

    public static let defaultGraceMaxSeconds: Int64 = 30 * 86_400

    public init(graceMaxSeconds: Int64 = Self.defaultGraceMaxSeconds) {
        self.graceMaxSeconds = graceMaxSeconds
    }
}

/// What a Stripe event says: the ledger drafts, whom it concerns, and the store ids to link.
public struct StripeMapping: Sendable {
    /// The event type is not one the ledger maps: answered 200, counted, kept nowhere but the inbox.
    public var ignored: Bool
    /// The Stripe account id resolving the subscriber: the customer, else the payment intent or charge.
    public var accountID: String?
    /// Further Stripe ids to link to the subscriber once known (payment intents, charges), so that a refund or
    /// dispute that names only those finds it.
    public var linkedIDs: [String]
    /// A subscriber id the event carries (`client_reference_id`, `metadata.subscriber_id`).
    public var subscriberHint: String?
    /// Invoice id → its ledger transaction id, for later proration credits of that invoice.
    public var invoiceTransaction: (invoice: String, transaction: String)?
    /// The transactions of an invoice's further paid lines (`<transaction>:<line id>`): a full refund or a
    /// dispute of its payment ends them too.
    public var lineTransactions: [String] = []
    /// `invoice_payment.paid`: the invoice and the payment intent and charge that paid it.
    public var invoicePayment: (invoice: String, payments: [String])?
    /// Price id → catalog product id (its lookup key), from the full prices the event carries: newer invoices
    /// name only the price id.
    public var prices: [(price: String, product: String)] = []
    public var drafts: [EventDraft]
}

/// The pure mapping of Stripe events to ledger drafts (docs/stripe.md). No I/O, no clock.
///
/// Idempotency keys come from Stripe's own ids (invoice lines, refunds, disputes, payment intents), so the
/// same fact delivered by two event types (`invoice.paid` and `invoice.payment_succeeded`, `refund.created` and
/// `charge.refunded`) is stored once; `occurred_at` is the object's own time, so delivery order never matters.
public enum StripeEventMapper: StoreMapper {
    public static let store = "stripe"
    /// The grace a subscription turning past due gets before its invoice says when Stripe retries: 7 days
    /// (Smart Retries' first week), at most the configured maximum (docs/stripe.md).
    public static let graceSeconds: Int64 = 7 * 86_400
    /// Grace runs this long past Stripe's next attempt, so that the attempt's outcome can arrive.
    public static let retrySlackSeconds: Int64 = 86_400

    public static func map(_ event: StripeEvent) throws(StoreMappingError) -> [EventDraft] {
        try interpret(event).drafts
    }

    public static func interpret(_ e: StripeEvent, options: StripeMappingOptions = .init()) throws(StoreMappingError) -> StripeMapping {
        let o = e.object
        var m = StripeMapping(ignored: false, accountID: nil, linkedIDs: [], subscriberHint: nil, invoiceTransaction: nil, drafts: [])
        // Stripe's ids only: whole Stripe objects outgrow the 16 KiB metadata limit; the raw event is kept in the inbox.
        var ids: [String: JSONValue] = ["store": "stripe", "event_id": .string(e.id), "event_type": .string(e.type)]
        if let objectID = id(o["id"]) { ids["object_id"] = .string(objectID) }
        if let kind = o["object"]?.stringValue, kind.utf8.count <= 100 { ids["object"] = .string(kind) }
        if let customer = id(o["customer"]) { ids["customer"] = .string(customer) }
        let meta = ids
        func draft(_ type: EventType, _ at: Timestamp, key: String, product: String?, _ data: [String: JSONValue]) -> EventDraft {
            EventDraft(
                type: type, occurredAt: at, environment: e.environment, idempotencyKey: key, productID: product,
                originalTransactionID: nil, data: data, metadata: meta)
        }
        switch e.type {
        case "checkout.session.completed":
            m.accountID = id(o["customer"])
            m.subscriberHint = o["client_reference_id"]?.stringValue ?? metadataSubscriber(o)
            if let pi = id(o["payment_intent"]) { m.linkedIDs.append(pi) }
            if m.accountID == nil { m.accountID = id(o["payment_intent"]) }
        case "customer.created", "customer.updated":
            m.accountID = id(o["id"])
            m.subscriberHint = metadataSubscriber(o)
        case "customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted":
            m.accountID = id(o["customer"])
            m.subscriberHint = metadataSubscriber(o)
            m.drafts = try subscriptionDrafts(e, options: options, draft: draft)
            for item in (o["items"]?.objectValue?["data"]?.arrayValue ?? []).compactMap(\.objectValue) {
                if let price = item["price"]?.objectValue, let priceID = id(price["id"]), let product = productID(price), product != priceID {
                    m.prices.append((priceID, product))
                }
            }
        case "invoice.paid", "invoice.payment_succeeded":
            m.accountID = id(o["customer"])
            m.subscriberHint = invoiceSubscriber(o)
            let (drafts, transaction) = try invoiceDrafts(e, meta: meta)
            m.drafts = drafts
            if let transaction, let invoice = id(o["id"]) {
                m.invoiceTransaction = (invoice, transaction)
                m.lineTransactions = drafts.compactMap { $0.type == .refund ? nil : $0.data[EventDataKey.transactionID]?.stringValue }.filter {
                    $0 != transaction
                }
                // Newer versions pair the invoice with its payment only in `invoice_payment.paid`, which names the invoice.
                m.linkedIDs.append(invoice)
            }
            if let pi = invoicePaymentIntent(o) { m.linkedIDs.append(pi) }
            if let ch = id(o["charge"]) ?? invoiceCharge(o) { m.linkedIDs.append(ch) }
            for l in subscriptionLines(o) {
                if let priceID = id(l.price?["id"]), let product = productID(l.price), product != priceID { m.prices.append((priceID, product)) }
            }
        case "invoice_payment.paid":
            // API 2025-03-31.basil and later: the one place an invoice meets the payment intent and charge that
            // refunds and disputes name.
            let invoice = try string(o, "invoice")
            let payment = o["payment"]?.objectValue ?? [:]
            let payments = [id(payment["payment_intent"]), id(payment["charge"])].compactMap { $0 }
            m.accountID = invoice
            if !payments.isEmpty, (o["status"]?.stringValue ?? "paid") == "paid" { m.invoicePayment = (invoice, payments) }
        case "invoice.payment_failed":
            m.accountID = id(o["customer"])
            m.subscriberHint = invoiceSubscriber(o)
            // A failed first payment (`subscription_create`) leaves the subscription incomplete: nothing was
            // granted, so there is no grace to give. Renewals that fail are billing issues.
            if o["billing_reason"]?.stringValue != "subscription_create", let line = subscriptionLines(o).first, let product = productID(line.price) {
                let start = try time(line.line["period"]?.objectValue?["start"], field: "data.object.lines.data.period.start")
                let sub = invoiceSubscription(o) ?? id(o["id"]) ?? ""
                // Grace while Stripe retries: up to a day past the next attempt; no next attempt: Stripe gave up.
                let cap = start.microseconds + options.graceMaxSeconds * 1_000_000
                var until = e.created.microseconds
                if let next = nn(o["next_payment_attempt"]) {
                    until = max(until, try time(next, field: "data.object.next_payment_attempt").microseconds + retrySlackSeconds * 1_000_000)
                }
                let attempt = o["attempt_count"]?.numberValue?.int64Value ?? 0
                // No grace left to give (Stripe stopped retrying, or the failure is dated at or before the
                // period's start): a billing issue without `grace_until`, never one that ends before it begins.
                var data = EventData.BillingIssue(productID: product)
                if min(until, cap) > start.microseconds { data.graceUntil = Timestamp(microseconds: min(until, cap)) }
                m.drafts = [
                    draft(
                        .billingIssue, start, key: "stripe:billing_issue:\(sub):\(start.microseconds / 1_000_000):\(attempt)", product: product,
                        data.object)
                ]
            }
        case "payment_intent.succeeded":
            m.accountID = id(o["customer"]) ?? id(o["id"])
            m.subscriberHint = metadataSubscriber(o)
            let pi = try string(o, "id")
            m.linkedIDs.append(pi)
            if let charge = id(o["latest_charge"]) { m.linkedIDs.append(charge) }
            // A one-time pass names its price in the payment intent's metadata; invoice payments are mapped from invoices.
            if let product = metadataProduct(o) {
                let amount = try money(o["amount_received"] ?? o["amount"], field: "data.object.amount_received")
                m.drafts = [
                    draft(
                        .purchase, try time(o["created"], field: "data.object.created"), key: "stripe:payment:\(pi)", product: product,
                        EventData.Transaction(productID: product, transactionID: pi, priceMinor: amount, currency: try currency(o)).object)
                ]
            }
        case "charge.refunded":
            // Found by its payment (whose transaction is known once the payment is), not by the customer.
            m.accountID = id(o["payment_intent"]) ?? id(o["id"])
            m.subscriberHint = metadataSubscriber(o)
            let charge = try string(o, "id")
            let transaction = id(o["payment_intent"]) ?? id(o["invoice"]) ?? charge
            let refunds = (o["refunds"]?.objectValue?["data"]?.arrayValue ?? []).compactMap(\.objectValue)
            var last: Timestamp?
            for r in refunds {
                guard let d = try refundDraft(r, transaction: transaction, draft: draft) else { continue }
                m.drafts.append(d)
                last = max(last ?? d.occurredAt, d.occurredAt)
            }
            if o["refunded"]?.boolValue == true {
                // Fully refunded: access ends. The money went back with the refunds themselves (by refund id).
                m.drafts.append(
                    draft(
                        .refund, last ?? e.created, key: "stripe:charge_refunded:\(charge)", product: nil,
                        EventData.Refund(
                            transactionID: transaction, amountMinor: 0, currency: try currency(o), reason: "stripe_full_refund", cut: true
                        ).object))
            }
        case "refund.created", "charge.refund.updated", "refund.updated":
            m.accountID = id(o["payment_intent"]) ?? id(o["charge"])
            let transaction = id(o["payment_intent"]) ?? id(o["charge"]) ?? ""
            if let d = try refundDraft(o, transaction: transaction, draft: draft) { m.drafts = [d] }
        case "charge.dispute.created":
            m.accountID = id(o["payment_intent"]) ?? id(o["charge"])
            let dispute = try string(o, "id")
            let transaction = id(o["payment_intent"]) ?? id(o["charge"]) ?? ""
            m.drafts = [
                draft(
                    .refund, try time(o["created"], field: "data.object.created"), key: "stripe:dispute:\(dispute)", product: nil,
                    EventData.Refund(
                        transactionID: transaction, amountMinor: try money(o["amount"], field: "data.object.amount"), currency: try currency(o),
                        reason: "chargeback", cut: true
                    ).object)
            ]
        case "charge.dispute.closed":
            m.accountID = id(o["payment_intent"]) ?? id(o["charge"])
            let dispute = try string(o, "id")
            let transaction = id(o["payment_intent"]) ?? id(o["charge"]) ?? ""
            if ["won", "warning_closed"].contains(o["status"]?.stringValue ?? "") {
                m.drafts = [
                    draft(
                        .refundReversal, e.created, key: "stripe:dispute_closed:\(dispute)", product: nil,
                        EventData.RefundReversal(transactionID: transaction).object)
                ]
            }
        default:
            m.ignored = true
        }
        if let hint = m.subscriberHint, !Identifiers.isValidSubscriberID(hint) { m.subscriberHint = nil }
        if ["charge.refunded", "refund.created", "charge.refund.updated", "refund.updated", "charge.dispute.created", "charge.dispute.closed"]
            .contains(e.type)
        {
            // The payment a refund or dispute names: its transaction is looked up by these (an invoice's, in newer versions).
            let charge = e.type == "charge.refunded" ? id(o["id"]) : id(o["charge"])
            for i in m.drafts.indices {
                if let pi = id(o["payment_intent"]) { m.drafts[i].metadata["payment_intent"] = .string(pi) }
                if let charge { m.drafts[i].metadata["charge"] = .string(charge) }
            }
        }
        return m
    }

    // MARK: subscriptions

    static func subscriptionDrafts(
        _ e: StripeEvent, options: StripeMappingOptions, draft: (EventType, Timestamp, String, String?, [String: JSONValue]) -> EventDraft
    ) throws(StoreMappingError) -> [EventDraft] {
        let o = e.object
        let sub = try string(o, "id")
        let item = (o["items"]?.objectValue?["data"]?.arrayValue?.first?.objectValue) ?? [:]
        let price = item["price"]?.objectValue ?? item["plan"]?.objectValue
        guard let product = productID(price) else {
            throw StoreMappingError(field: "data.object.items.data.price", reason: "is required (the subscription's price)")
        }
        let status = o["status"]?.stringValue ?? ""
        let previousStatus = e.previousAttributes["status"]?.stringValue
        var out: [EventDraft] = []
        if e.type == "customer.subscription.deleted" {
            var ended = e.created
            if let v = nn(o["ended_at"]) ?? nn(o["canceled_at"]) { ended = try time(v, field: "data.object.ended_at") }
            let reason: String =
                switch o["cancellation_details"]?.objectValue?["reason"]?.stringValue {
                case "payment_failed"?: "billing"
                case "cancellation_requested"?: "voluntary"
                case "payment_disputed"?: "other"
                default: ["past_due", "unpaid", "incomplete_expired"].contains(previousStatus ?? "") ? "billing" : "voluntary"
                }
            var ending = [
                draft(
                    .expiration, ended, "stripe:subscription_deleted:\(sub)", product, EventData.Expiration(productID: product, reason: reason).object
                )
            ]
            // Ended before its period's end (canceled at once): access ends now, not at the period's end (semantics §7).
            if let periodEnd = nn(o["current_period_end"]) ?? nn(item["current_period_end"]), let end = try? time(periodEnd, field: ""), ended < end {
                ending.append(
                    draft(.cancellation, ended, "stripe:subscription_canceled:\(sub)", product, EventData.Cancellation(reason: "other").object))
            }
            return ending
        }
        if status == "trialing", nn(o["trial_start"]) != nil, nn(o["trial_end"]) != nil {
            let start = try time(o["trial_start"], field: "data.object.trial_start")
            var end = try time(o["trial_end"], field: "data.object.trial_end")
            if let was = nn(e.previousAttributes["trial_end"]), let old = try? time(was, field: ""), old != end {
                // The trial moved: the trial stays the one first granted, an extension is a credit beside it
                // (a developer deferral), so either event may be stored first.
                if end > old, old > start {
                    out.append(
                        draft(
                            .credit, old, "stripe:trial_extended:\(sub):\(end.microseconds / 1_000_000)", product,
                            EventData.Credit(windowStart: old, windowEnd: end, reason: "stripe_trial_extended", grantedBy: "stripe").object))
                }
                end = old
            }
            if end > start {
                let data = EventData.Transaction(
                    productID: product, transactionID: "\(sub):trial", originalTransactionID: sub, kind: .autoRenewable, offer: .trial,
                    periodStart: start, periodEnd: end, period: period(price), priceMinor: 0, currency: try currency(price ?? o))
                out.append(draft(.purchase, start, "stripe:trial:\(sub)", product, data.object))
            }
        }
        if e.type == "customer.subscription.updated" {
            // Auto-renew off: `cancel_at_period_end` turned on, or (the newer way) a `cancel_at` set; on: either undone.
            var cancels: Bool?
            if let was = e.previousAttributes["cancel_at_period_end"]?.boolValue, let now = o["cancel_at_period_end"]?.boolValue, was != now {
                cancels = now
            } else if e.previousAttributes.keys.contains("cancel_at") {
                let was = nn(e.previousAttributes["cancel_at"]) != nil
                let now = nn(o["cancel_at"]) != nil
                if was != now { cancels = now }
            }
            if let cancels {
                let canceledAt = cancels ? nn(o["canceled_at"]).flatMap { try? time($0, field: "") } : nil
                // Turned off at `canceled_at`: keyed by it, so a backfill of the subscription (which sees no
                // event id) stores the same fact once; turned back on, only the event says when.
                let key = canceledAt.map { "stripe:auto_renew_off:\(sub):\($0.microseconds / 1_000_000)" } ?? "stripe:event:\(e.id)"
                out.append(
                    draft(
                        .autoRenewChanged, canceledAt ?? e.created, key, product,
                        EventData.AutoRenewChanged(enabled: !cancels, productID: product).object))
            }
            if let previousStatus, previousStatus != status {
                let periodStart = nn(o["current_period_start"]) ?? nn(item["current_period_start"])
                if ["past_due", "unpaid"].contains(status), !["past_due", "unpaid"].contains(previousStatus), let periodStart {
                    out.append(
                        billingIssue(
                            sub: sub, periodStart: try time(periodStart, field: "data.object.current_period_start"), product: product,
                            graceSeconds: min(Self.graceSeconds, options.graceMaxSeconds), draft: draft))
                }
                if status == "paused" {
                    out.append(
                        draft(
                            .expiration, e.created, "stripe:event:\(e.id)", product, EventData.Expiration(productID: product, reason: "paused").object
                        ))
                }
            }
        }
        return out
    }

    /// A subscription turning past due, keyed by the subscription and the failed period's start; the invoice's
    /// failed attempts add their own grace, as long as Stripe retries.
    static func billingIssue(
        sub: String, periodStart: Timestamp, product: String, graceSeconds: Int64,
        draft: (EventType, Timestamp, String, String?, [String: JSONValue]) -> EventDraft
    ) -> EventDraft {
        let until = Timestamp(microseconds: periodStart.microseconds + graceSeconds * 1_000_000)
        return draft(
            .billingIssue, periodStart, "stripe:billing_issue:\(sub):\(periodStart.microseconds / 1_000_000)", product,
            EventData.BillingIssue(productID: product, graceUntil: until).object)
    }

    // MARK: invoices

    struct Line {
        var line: [String: JSONValue]
        var price: [String: JSONValue]?
        var proration: Bool
    }

    /// An invoice's subscription lines, with their price (the line's `price`, or the newer `pricing.price_details`).
    static func subscriptionLines(_ o: [String: JSONValue]) -> [Line] {
        (o["lines"]?.objectValue?["data"]?.arrayValue ?? []).compactMap(\.objectValue).compactMap { l in
            var price = l["price"]?.objectValue ?? l["plan"]?.objectValue
            if price == nil, let details = l["pricing"]?.objectValue?["price_details"]?.objectValue {
                price = details["price"]?.objectValue ?? details["price"]?.stringValue.map { ["id": .string($0)] }
            }
            guard price != nil else { return nil }
            let parent = l["parent"]?.objectValue
            let proration =
                l["proration"]?.boolValue ?? parent?["subscription_item_details"]?.objectValue?["proration"]?.boolValue
                ?? parent?["invoice_item_details"]?.objectValue?["proration"]?.boolValue ?? false
            return Line(line: l, price: price, proration: proration)
        }
    }

    static func invoiceDrafts(_ e: StripeEvent, meta: [String: JSONValue]) throws(StoreMappingError) -> ([EventDraft], String?) {
        let o = e.object
        let invoice = try string(o, "id")
        let at: Timestamp
        if let paid = nn(o["status_transitions"]?.objectValue?["paid_at"]) {
            at = try time(paid, field: "data.object.status_transitions.paid_at")
        } else {
            at = try time(o["created"], field: "data.object.created")
        }
        let transaction = invoicePaymentIntent(o) ?? invoice
        let sub = invoiceSubscription(o)
        let reason = o["billing_reason"]?.stringValue ?? ""
        var drafts: [EventDraft] = []
        var first = true
        for (i, l) in subscriptionLines(o).enumerated() {
            let field = "data.object.lines.data[\(i)]"
            guard let product = productID(l.price) else { continue }
            let amount = try signedMoney(l.line["amount"], field: "\(field).amount")
            let lineID = l.line["id"]?.stringValue ?? "\(i)"
            let currencyCode = try currency(l.line["currency"] == nil ? o : l.line)
            if l.proration && amount < 0 {
                // Unused time of the replaced item: its transaction is refunded by the credit and cut at the change.
                let periodStart = try time(l.line["period"]?.objectValue?["start"], field: "\(field).period.start")
                // Without the credited invoice the replaced transaction is unknown: the credit changes nothing here.
                guard let credited = creditedInvoice(l.line) else { continue }
                var lineMeta = meta
                lineMeta["credited_invoice"] = .string(credited)
                drafts.append(
                    EventDraft(
                        type: .refund, occurredAt: periodStart, environment: e.environment, idempotencyKey: "stripe:proration:\(invoice):\(lineID)",
                        productID: nil, originalTransactionID: sub,
                        data: EventData.Refund(
                            transactionID: credited, amountMinor: -amount, currency: currencyCode, reason: "stripe_proration", cut: true
                        ).object, metadata: lineMeta))
                continue
            }
            guard amount > 0 else { continue }
            let p = l.line["period"]?.objectValue
            let start = try time(p?["start"], field: "\(field).period.start")
            let end = try time(p?["end"], field: "\(field).period.end")
            guard end > start else { throw StoreMappingError(field: "\(field).period.end", reason: "must be after period.start") }
            let txn = first ? transaction : "\(transaction):\(lineID)"
            first = false
            // What the buyer paid for the line: its amount, plus tax Stripe added on top (exclusive tax).
            let tax = lineTax(l.line)
            let price = amount + (tax.exclusive <= Limits.maxMoneyMinor - amount ? tax.exclusive : 0)
            var data = EventData.Transaction(
                productID: product, transactionID: txn, originalTransactionID: sub, kind: .autoRenewable, offer: EventDataValidator.Offer.none,
                periodStart: start, periodEnd: end, period: period(l.price), priceMinor: price, currency: currencyCode,
                commissionRate: commissionRate(o, amount: amount), country: invoiceCountry(o))
            if tax.total > 0, tax.total <= price { data.taxMinor = tax.total }
            let renewal = sub != nil && !["subscription_create", "subscription_update"].contains(reason) && !l.proration
            drafts.append(
                EventDraft(
                    type: renewal ? .renewal : .purchase, occurredAt: at, environment: e.environment,
                    idempotencyKey: "stripe:invoice:\(invoice):\(lineID)", productID: product, originalTransactionID: sub, data: data.object,
                    metadata: meta))
        }
        return (drafts, drafts.contains { $0.type != .refund } ? transaction : nil)
    }

    /// A line's tax: basil's `taxes[]` (`amount`, `tax_behavior` `inclusive`/`exclusive`) or the older
    /// `tax_amounts[]` (`amount`, `inclusive`). Exclusive tax is charged on top of the line's `amount`.
    static func lineTax(_ line: [String: JSONValue]) -> (total: Int64, exclusive: Int64) {
        var (inclusive, exclusive): (Int64, Int64) = (0, 0)
        let taxes = line["taxes"]?.arrayValue ?? line["tax_amounts"]?.arrayValue ?? []
        for t in taxes.compactMap(\.objectValue) {
            guard let amount = t["amount"]?.numberValue?.int64Value, amount > 0, amount <= Limits.maxMoneyMinor else { continue }
            let isInclusive = t["tax_behavior"]?.stringValue.map { $0 == "inclusive" } ?? t["inclusive"]?.boolValue ?? false
            if isInclusive { inclusive += amount } else { exclusive += amount }
            guard inclusive <= Limits.maxMoneyMinor, exclusive <= Limits.maxMoneyMinor else { return (0, 0) }
        }
        return (inclusive + exclusive, exclusive)
    }

    /// The buyer's country (ISO 3166-1 alpha-2, as Stripe gives it): the invoice's `customer_address`, else its
    /// `customer_shipping` address, else an expanded customer's address.
    static func invoiceCountry(_ o: [String: JSONValue]) -> String? {
        let candidates = [
            o["customer_address"]?.objectValue?["country"], o["customer_shipping"]?.objectValue?["address"]?.objectValue?["country"],
            o["customer"]?.objectValue?["address"]?.objectValue?["country"],
        ]
        for c in candidates {
            if let country = c?.stringValue?.uppercased(), Countries.isValidAlpha2(country) { return country }
        }
        return nil
    }

    static func creditedInvoice(_ line: [String: JSONValue]) -> String? {
        let details =
            line["proration_details"]?.objectValue
            ?? line["parent"]?.objectValue?["subscription_item_details"]?.objectValue?["proration_details"]?.objectValue
            ?? line["parent"]?.objectValue?["invoice_item_details"]?.objectValue?["proration_details"]?.objectValue
        return details?["credited_items"]?.objectValue?["invoice"]?.stringValue
    }

    /// Stripe's fee as the commission rate, when the invoice's charge and its balance transaction are expanded.
    static func commissionRate(_ o: [String: JSONValue], amount: Int64) -> String? {
        guard let bt = o["charge"]?.objectValue?["balance_transaction"]?.objectValue,
            let fee = bt["fee"]?.numberValue?.int64Value, let gross = bt["amount"]?.numberValue?.int64Value,
            gross > 0, fee >= 0, fee <= gross, gross <= Limits.maxMoneyMinor
        else { return nil }
        // Six decimals, rounded half up: fee / gross.
        let scaled = (fee * 1_000_000 + gross / 2) / gross
        if scaled >= 1_000_000 { return "1" }
        let digits = String(scaled)
        return "0." + String(repeating: "0", count: 6 - digits.count) + digits
    }

    static func invoicePaymentIntent(_ o: [String: JSONValue]) -> String? {
        if let pi = id(o["payment_intent"]) { return pi }
        for p in (o["payments"]?.objectValue?["data"]?.arrayValue ?? []).compactMap(\.objectValue) {
            if let pi = id(p["payment"]?.objectValue?["payment_intent"]) { return pi }
        }
        return nil
    }

    static func invoiceCharge(_ o: [String: JSONValue]) -> String? {
        for p in (o["payments"]?.objectValue?["data"]?.arrayValue ?? []).compactMap(\.objectValue) {
            if let ch = id(p["payment"]?.objectValue?["charge"]) { return ch }
        }
        return nil
    }

    static func invoiceSubscription(_ o: [String: JSONValue]) -> String? {
        id(o["subscription"]) ?? id(o["parent"]?.objectValue?["subscription_details"]?.objectValue?["subscription"])
    }

    static func invoiceSubscriber(_ o: [String: JSONValue]) -> String? {
        let details = o["subscription_details"]?.objectValue ?? o["parent"]?.objectValue?["subscription_details"]?.objectValue
        return details.flatMap(metadataSubscriber) ?? metadataSubscriber(o)
    }

    // MARK: refunds

    static func refundDraft(
        _ r: [String: JSONValue], transaction: String,
        draft: (EventType, Timestamp, String, String?, [String: JSONValue]) -> EventDraft
    ) throws(StoreMappingError) -> EventDraft? {
        guard let refund = id(r["id"]) else { throw StoreMappingError(field: "data.object.id", reason: "is required (the refund id)") }
        if ["failed", "canceled"].contains(r["status"]?.stringValue ?? "") { return nil }
        return draft(
            .refund, try time(r["created"], field: "data.object.created"), "stripe:refund:\(refund)", nil,
            EventData.Refund(
                transactionID: transaction, amountMinor: try money(r["amount"], field: "data.object.amount"), currency: try currency(r),
                reason: "stripe_" + (r["reason"]?.stringValue ?? "refund"), cut: false
            ).object)
    }

    // MARK: values

    /// The catalog product id of a Stripe price: its `lookup_key` when set, else its id.
    public static func productID(_ price: [String: JSONValue]?) -> String? {
        guard let price else { return nil }
        if let key = price["lookup_key"]?.stringValue, !key.isEmpty { return key }
        return price["id"]?.stringValue
    }

    static func metadataProduct(_ o: [String: JSONValue]) -> String? {
        let md = o["metadata"]?.objectValue
        return [md?["lookup_key"]?.stringValue, md?["price_id"]?.stringValue].compactMap { $0 }.first { !$0.isEmpty }
    }

    static func metadataSubscriber(_ o: [String: JSONValue]) -> String? {
        o["metadata"]?.objectValue?["subscriber_id"]?.stringValue
    }

    /// `recurring.interval` × `interval_count` as an ISO 8601 duration.
    static func period(_ price: [String: JSONValue]?) -> String? {
        let r = price?["recurring"]?.objectValue ?? price
        guard let interval = r?["interval"]?.stringValue else { return nil }
        let count = r?["interval_count"]?.numberValue?.int64Value ?? 1
        guard (1...1000).contains(count) else { return nil }
        switch interval {
        case "day": return "P\(count)D"
        case "week": return "P\(count)W"
        case "month": return "P\(count)M"
        case "year": return "P\(count)Y"
        default: return nil
        }
    }

    /// `nil` for an absent or JSON `null` member.
    static func nn(_ v: JSONValue?) -> JSONValue? {
        if case .null? = v { return nil }
        return v
    }

    /// An expandable field: the id string, or the expanded object's `id`.
    static func id(_ v: JSONValue?) -> String? {
        guard let v else { return nil }
        let s = v.stringValue ?? v.objectValue?["id"]?.stringValue
        guard let s, !s.isEmpty, s.utf8.count <= 255 else { return nil }
        return s
    }

    static func string(_ o: [String: JSONValue], _ key: String) throws(StoreMappingError) -> String {
        guard let s = id(o[key]) else { throw StoreMappingError(field: "data.object.\(key)", reason: "is required (at most 255 bytes)") }
        return s
    }

    /// Stripe times are Unix seconds.
    static func time(_ v: JSONValue?, field: String) throws(StoreMappingError) -> Timestamp {
        guard let s = v?.numberValue?.int64Value else { throw StoreMappingError(field: field, reason: "is required (Unix seconds)") }
        guard (0...253_402_300_799).contains(s) else { throw StoreMappingError(field: field, reason: "is out of range (years 1970–9999)") }
        return Timestamp(microseconds: s * 1_000_000)
    }

    /// Stripe amounts are already minor units (zero-decimal currencies included): at most 10^15 (docs/limits.md).
    static func money(_ v: JSONValue?, field: String) throws(StoreMappingError) -> Int64 {
        let a = try signedMoney(v, field: field)
        guard a >= 0 else { throw StoreMappingError(field: field, reason: "must not be negative") }
        return a
    }

    static func signedMoney(_ v: JSONValue?, field: String) throws(StoreMappingError) -> Int64 {
        guard let a = v?.numberValue?.int64Value else { throw StoreMappingError(field: field, reason: "is required (an integer of minor units)") }
        guard a.magnitude <= UInt64(Limits.maxMoneyMinor) else {
            throw StoreMappingError(field: field, reason: "must be at most \(Limits.maxMoneyMinor) minor units")
        }
        return a
    }

    static func currency(_ o: [String: JSONValue]) throws(StoreMappingError) -> String {
        guard let c = o["currency"]?.stringValue, c.utf8.count == 3, c.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7a) || ($0 >= 0x41 && $0 <= 0x5a) })
        else { throw StoreMappingError(field: "data.object.currency", reason: "is required (a three-letter ISO 4217 code)") }
        return c.uppercased()
    }
}
