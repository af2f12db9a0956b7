import LedgerCore
import LedgerStore
import Logging
import StoreAdapters

/// Stripe's history read from its list APIs and recorded as the webhooks would have recorded it
/// (`subledger stripe backfill`, docs/stripe.md). Each object listed becomes the webhook event(s) Stripe
/// sends for it (an invoice paid: `invoice.paid`; a refund: `refund.created`; …), mapped by the webhook
/// mapper and taken in by the one store intake. The ledger events' keys come from Stripe's ids, so a
/// backfill and the webhooks for the same history store each fact once, in either order, and a second
/// backfill stores nothing.
public struct StripeBackfill: Sendable {
    let client: StripeAPIClient
    let intake: EventIntake
    let options: StripeMappingOptions
    let logger: Logger

    public init(client: StripeAPIClient, intake: EventIntake, options: StripeMappingOptions, logger: Logger) {
        (self.client, self.intake, self.options, self.logger) = (client, intake, options, logger)
    }

    /// The lists read, in this order: customers and subscriptions first (they link customers to subscribers,
    /// by their `metadata.subscriber_id`, and teach prices), then what their invoices paid, then what took money back (refunds before charges: a charge
    /// refunded in full is cut when its last refund was made).
    public static let collections = ["customers", "subscriptions", "invoices", "refunds", "charges", "disputes"]

    /// Most pages one list reads in a run (100 objects each).
    public static let maxPages = 100_000

    /// What a run did, by the inbox outcome of each event the objects stand for.
    public struct Summary: Sendable, Equatable {
        /// Objects listed.
        public var read = 0
        /// Events whose ledger events were appended (or were already there under their keys).
        public var applied = 0
        /// Events a run before already took in (the same object, same facts).
        public var duplicate = 0
        /// Events that say nothing for the ledger (a paid $0 invoice, a failed refund, an open invoice).
        public var ignored = 0
        /// Events whose subscriber is not known yet: they wait in the inbox for a link.
        public var pending = 0
        /// Events the ledger refused (a product the catalog lacks): kept `received` with the reason; a later run applies them.
        public var refused = 0
        /// Objects the mapper cannot read (a field Stripe documents is missing): not recorded.
        public var unmapped = 0
        /// Each refusal and unmapped object, for the operator (`<object id>: <why>`), at most `maxProblems`.
        public var problems: [String] = []

        public init() {}

        public static let maxProblems = 100
    }

    /// Progress after each page: the list being read and the summary so far.
    public typealias Progress = @Sendable (_ collection: String, _ summary: Summary) -> Void

    /// Reads every list (objects created at or after `since`, when given) and takes each object in.
    public func run(since: Timestamp?, now: Timestamp, progress: Progress? = nil) async throws -> Summary {
        var summary = Summary()
        let adapter = StripeStore(options: options)
        // Each refunded charge's latest refund time (one entry per charge with refunds).
        var refunded: [String: Int64] = [:]
        for collection in Self.collections {
            var query: [(String, String)] = []
            if collection == "subscriptions" { query.append(("status", "all")) }
            if let since { query.append(("created[gte]", String(since.microseconds / 1_000_000))) }
            var after: String?
            var cursor = PageCursor("stripe \(collection)", maxPages: Self.maxPages)
            repeat {
                let page = try await client.page(collection, query: query, startingAfter: after)
                for object in page.objects {
                    summary.read += 1
                    if collection == "refunds", let charge = object["charge"]?.stringValue, let at = object["created"]?.numberValue?.int64Value {
                        refunded[charge] = max(refunded[charge] ?? at, at)
                    }
                    for event in Self.events(for: object, collection: collection, now: now, refunded: refunded) {
                        try await take(event, object: object, adapter: adapter, into: &summary)
                    }
                }
                progress?(collection, summary)
                after = try cursor.next(hasMore: page.hasMore, token: page.objects.last?["id"]?.stringValue)
            } while after != nil
        }
        return summary
    }

    /// One event through the webhook's mapping and the intake.
    func take(_ payload: [String: JSONValue], object: [String: JSONValue], adapter: StripeStore, into summary: inout Summary) async throws {
        let id = object["id"]?.stringValue ?? "?"
        func problem(_ text: String) {
            if summary.problems.count < Summary.maxProblems { summary.problems.append("\(id): \(text)") }
        }
        let message: StripeStore.Message
        do throws(StoreMappingError) {
            let event = try StripeEvent(payload: payload)
            message = StripeStore.Message(
                event: event, payload: payload, raw: "", mapping: try StripeEventMapper.interpret(event, options: options))
        } catch {
            summary.unmapped += 1
            problem("\(error)")
            logger.warning("stripe object not mapped", metadata: ["stripe.object_id": "\(id)", "error.message": "\(error)"])
            return
        }
        if !message.mapping.ignored {
            await StripeStore.lookUpPrices(of: message.mapping, links: intake.links, client: client, logger: logger)
        }
        do {
            switch try await intake.stores.ingest(adapter, message, logger: logger).outcome {
            case .applied: summary.applied += 1
            case .duplicate: summary.duplicate += 1
            case .pending: summary.pending += 1
            case .notice, .ignored, .received, .refused: summary.ignored += 1
            }
        } catch let error where error is EventValidationError || error is IdentityError || error is StoreLinks.Conflict {
            // The catalog lacks the product, a purchase another subscriber keeps: kept as a webhook would be; listed.
            summary.refused += 1
            problem("\(error)")
            logger.warning("stripe object refused", metadata: ["stripe.object_id": "\(id)", "error.message": "\(error)"])
        }
    }

    // MARK: objects as the webhook events Stripe sends for them

    /// The webhook events a listed object stands for, as Stripe would have sent them; their ids
    /// (`backfill:<object id>[:<fact>]`) are the inbox's: a second run finds them there.
    /// `refunded`: the latest refund time of each charge (the time a charge refunded in full is cut).
    public static func events(
        for o: [String: JSONValue], collection: String, now: Timestamp, refunded: [String: Int64] = [:]
    ) -> [[String: JSONValue]] {
        guard let id = o["id"]?.stringValue, !id.isEmpty, id.utf8.count <= 200 else { return [] }
        let created = o["created"] ?? .number(JSONNumber(now.microseconds / 1_000_000))
        func event(_ suffix: String, _ type: String, _ object: [String: JSONValue], at: JSONValue? = nil, previous: [String: JSONValue]? = nil)
            -> [String: JSONValue]
        {
            var data: [String: JSONValue] = ["object": .object(object)]
            if let previous { data["previous_attributes"] = .object(previous) }
            return [
                "id": .string("backfill:\(id)\(suffix)"), "object": "event", "type": .string(type), "created": at ?? created,
                "livemode": .bool(o["livemode"]?.boolValue ?? false), "api_version": .string(StripeAPIClient.backfillAPIVersion),
                "data": .object(data),
            ]
        }
        func present(_ key: String) -> Bool {
            if case .null? = o[key] { return false }
            return o[key] != nil
        }
        switch collection {
        case "customers":
            // Links the customer to its `metadata.subscriber_id`, as `customer.created` does.
            return [event("", "customer.created", o)]
        case "subscriptions":
            let status = o["status"]?.stringValue ?? ""
            // Never paid, nothing granted: Stripe sends no event that grants or ends anything for them.
            guard !["incomplete", "incomplete_expired"].contains(status) else { return [] }
            // Created (a trial, as first seen; its customer's link to the subscriber).
            var first = o
            if present("trial_start"), present("trial_end") { first["status"] = "trialing" }
            var out = [event("", "customer.subscription.created", first)]
            // Turned off (at `canceled_at`: a later cancellation after turning it back on is another fact).
            let off = ":auto_renew_off:\(o["canceled_at"]?.numberValue?.int64Value ?? 0)"
            if o["cancel_at_period_end"]?.boolValue == true {
                out.append(event(off, "customer.subscription.updated", o, previous: ["cancel_at_period_end": false]))
            } else if present("cancel_at") {
                out.append(event(off, "customer.subscription.updated", o, previous: ["cancel_at": .null]))
            }
            if ["past_due", "unpaid"].contains(status) {
                let start = o["current_period_start"]?.numberValue?.int64Value ?? 0
                out.append(event(":\(status):\(start)", "customer.subscription.updated", o, previous: ["status": "active"]))
            }
            if status == "canceled" {
                out.append(event(":deleted", "customer.subscription.deleted", o, at: present("ended_at") ? o["ended_at"] : created))
            }
            return out
        case "invoices":
            switch o["status"]?.stringValue {
            case "paid"?:
                var out = [event(":paid", "invoice.paid", o, at: o["status_transitions"]?.objectValue?["paid_at"])]
                // The payment that paid it, as `invoice_payment.paid` pairs them (a refund names only the payment).
                let payment = [("payment_intent", o["payment_intent"]), ("charge", o["charge"])].compactMap { k, v in
                    (v?.stringValue ?? v?.objectValue?["id"]?.stringValue).map { (k, JSONValue.string($0)) }
                }
                if !payment.isEmpty {
                    let pairing: [String: JSONValue] = [
                        "id": .string("inpay_\(id)"), "object": "invoice_payment", "invoice": .string(id), "status": "paid",
                        "payment": .object(Dictionary(uniqueKeysWithValues: [("type", JSONValue.string("payment_intent"))] + payment)),
                        "livemode": o["livemode"] ?? false, "created": created,
                    ]
                    out.append(event(":payment", "invoice_payment.paid", pairing))
                }
                return out
            case "open"?:
                // A renewal whose payment failed and that Stripe still retries: its billing issue, per attempt.
                guard let attempts = o["attempt_count"]?.numberValue?.int64Value, attempts > 0 else { return [] }
                return [event(":failed:\(attempts)", "invoice.payment_failed", o)]
            default:
                // Drafts, voided and uncollectible invoices paid nothing.
                return []
            }
        case "charges":
            // A charge refunded in full ends access, when its last refund was made (the webhook's time); its
            // refunds' money comes from the refunds list.
            guard o["refunded"]?.boolValue == true else { return [] }
            let at = refunded[id].map { JSONValue.number(JSONNumber($0)) } ?? .number(JSONNumber(now.microseconds / 1_000_000))
            return [event(":refunded", "charge.refunded", o, at: at)]
        case "refunds":
            return [event("", "refund.created", o)]
        case "disputes":
            var out = [event(":created", "charge.dispute.created", o)]
            if ["won", "warning_closed", "lost"].contains(o["status"]?.stringValue ?? "") {
                // Closed when its funds moved back: the latest balance transaction, else now.
                let moved = (o["balance_transactions"]?.arrayValue ?? []).compactMap { $0.objectValue?["created"]?.numberValue?.int64Value }
                let closed = moved.count >= 2 ? moved.max().map { JSONValue.number(JSONNumber($0)) } : nil
                out.append(event(":closed", "charge.dispute.closed", o, at: closed ?? .number(JSONNumber(now.microseconds / 1_000_000))))
            }
            return out
        default:
            return []
        }
    }
}
