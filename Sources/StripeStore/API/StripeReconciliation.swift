import LedgerCore
import LedgerStore
import StoreAdapters

extension StripeAPIClient {
    /// `GET /v1/subscriptions/{id}`: nil when Stripe does not know it.
    public func subscription(_ id: String) async throws(Failure) -> [String: JSONValue]? {
        try await object("subscriptions", id)
    }

    /// The first page (up to 100) of a list filtered by one id: a payment's charges, a charge's refunds.
    public func list(_ collection: String, filter: String, id: String) async throws(Failure) -> [[String: JSONValue]] {
        try await page(collection, query: [(filter, id)], startingAfter: nil, version: nil).objects
    }
}

/// Stripe's side of a reconciliation (docs/switching.md "Reconcile"): each subscription the ledger knows
/// (`GET /v1/subscriptions/{id}`), and the charge and refunds of its latest payment. Facts are mapped by
/// the webhooks' own mapper from the objects Stripe returns, under the webhooks' keys (a
/// `customer.subscription.deleted`, a `charge.refunded`), so a webhook that arrives later adds nothing.
public struct StripeReconciliation: StoreReconciliation {
    let client: StripeAPIClient
    let options: StripeMappingOptions
    public let environment: LedgerEnvironment

    public init(client: StripeAPIClient, options: StripeMappingOptions = .init(), environment: LedgerEnvironment = .production) {
        self.client = client
        self.options = options
        self.environment = environment
    }

    public var store: String { "stripe" }

    /// A payload of Stripe that does not verify or cannot be mapped concerns that purchase alone: it is
    /// recorded as not comparable, and the run goes on.
    public func check(_ p: ReconciliationStore.KnownPurchase, ledger: LedgerPurchase, now: Timestamp) async throws -> StoreVerdict {
        try await PurchaseNotComparable.scoping(why: Self.scoped) { try await verdict(p, ledger: ledger, now: now) }
    }

    static func scoped(_ error: any Error) -> String? {
        (error as? StoreMappingError).map { "Stripe's answer cannot be mapped: \($0)" }
    }

    func verdict(_ p: ReconciliationStore.KnownPurchase, ledger: LedgerPurchase, now: Timestamp) async throws -> StoreVerdict {
        guard p.purchaseID.hasPrefix("sub_") else {
            throw PurchaseNotComparable("\(p.purchaseID) is not a Stripe subscription (one-time payments are not reconciled)")
        }
        guard let sub = try await client.subscription(p.purchaseID) else {
            throw PurchaseNotComparable("Stripe does not know subscription \(p.purchaseID)")
        }
        let item = sub["items"]?.objectValue?["data"]?.arrayValue?.first?.objectValue ?? [:]
        let status = sub["status"]?.stringValue ?? ""
        var s = PurchaseState()
        s.expiresAt = Self.time(sub["current_period_end"]) ?? Self.time(item["current_period_end"])
        switch status {
        case "active", "trialing", "past_due": s.active = true
        case "canceled", "unpaid", "incomplete_expired", "paused": s.active = false
        default: break
        }
        if status != "canceled" { s.autoRenew = sub["cancel_at_period_end"]?.boolValue.map { !$0 } }
        s.lapsed = status == "canceled"
        var verdict = StoreVerdict(state: s)
        let created = Timestamp(microseconds: (Self.time(sub["created"]) ?? now).microseconds)
        func event(_ type: String, _ object: [String: JSONValue], id: String) throws -> [EventDraft] {
            let e = try StripeEvent(payload: [
                "id": .string(id), "type": .string(type), "created": .number(JSONNumber(created.microseconds / 1_000_000)),
                "livemode": .bool(environment == .production), "data": ["object": .object(object)],
            ])
            return try mapped(e)
        }

        if let l = ledger.state.expiresAt, let e = s.expiresAt, l > e {
            verdict.reasons[.expiresAt] = "the ledger's period ends at \(l.rfc3339), after Stripe's \(e.rfc3339): events are never edited"
        } else if let drafts = try await latestPaidInvoice(sub, subscription: p.purchaseID, now: now), !drafts.isEmpty {
            verdict.repairs[.expiresAt] = drafts
        } else {
            verdict.reasons[.expiresAt] =
                "the ledger lacks Stripe's latest paid period (invoice \(Self.id(sub["latest_invoice"]) ?? "unknown")), and Stripe lists no paid invoice for it: its invoice.paid, or subledger stripe backfill, brings it"
        }
        // The latest payment's charge: fully refunded is a cutting refund, as `charge.refunded` maps it.
        if let pi = ledger.latestTransactionID, pi.hasPrefix("pi_") {
            let charges = try await client.list("charges", filter: "payment_intent", id: pi)
            if let charge = charges.first(where: { $0["status"]?.stringValue != "failed" }), let chargeID = charge["id"]?.stringValue {
                s.refunded = charge["refunded"]?.boolValue ?? false
                if s.refunded == true {
                    var full = charge
                    full["refunds"] = ["data": .array(try await client.list("refunds", filter: "charge", id: chargeID).map(JSONValue.object))]
                    let drafts = try event("charge.refunded", full, id: "evt_reconcile_\(chargeID)")
                    verdict.repairs[.refunded] = drafts
                    // A refund does not end a Stripe subscription: its status says nothing of access then.
                    s.active = nil
                    s.lapsed = nil
                }
                verdict.state = s
            }
        }
        if status == "canceled" {
            let drafts = try event("customer.subscription.deleted", sub, id: "evt_reconcile_\(p.purchaseID)")
            verdict.repairs[.lapsed] = drafts
            verdict.repairs[.active, default: []] += drafts
        }
        if let enabled = s.autoRenew, let product = StripeEventMapper.productID(item["price"]?.objectValue ?? item["plan"]?.objectValue) {
            if !enabled, let at = Self.time(sub["canceled_at"]) {
                verdict.repairs[.autoRenew] = [
                    EventDraft(
                        type: .autoRenewChanged, occurredAt: at, environment: environment,
                        idempotencyKey: "stripe:reconcile:auto_renew:\(p.purchaseID):\(at.microseconds / 1_000_000)", productID: product,
                        originalTransactionID: p.purchaseID, data: EventData.AutoRenewChanged(enabled: false, productID: product).object,
                        metadata: ["store": "stripe", "origin": "reconciliation", "subscription": .string(p.purchaseID)])
                ]
            } else {
                verdict.reasons[.autoRenew] = "Stripe's subscription does not say when auto-renew was turned \(enabled ? "back on" : "off")"
            }
        }
        return verdict
    }

    /// The subscription's latest invoice when it is paid, as its `invoice.paid` webhook maps it: listed in the
    /// backfill's API version (`GET /v1/invoices?subscription=`, prices with their lookup keys) and turned into
    /// the event Stripe sends (`StripeBackfill.events`), so a webhook that arrives later adds nothing. Nil when
    /// Stripe lists no such paid invoice.
    func latestPaidInvoice(_ sub: [String: JSONValue], subscription: String, now: Timestamp) async throws -> [EventDraft]? {
        guard let id = Self.id(sub["latest_invoice"]) else { return nil }
        let page = try await client.page("invoices", query: [("subscription", subscription)], startingAfter: nil)
        guard let invoice = page.objects.first(where: { $0["id"]?.stringValue == id }), invoice["status"]?.stringValue == "paid" else {
            return nil
        }
        return try StripeBackfill.events(for: invoice, collection: "invoices", now: now).flatMap { try mapped(StripeEvent(payload: $0)) }
    }

    /// An event as its webhook maps it, its drafts marked as the reconciliation's.
    func mapped(_ event: StripeEvent) throws -> [EventDraft] {
        try StripeEventMapper.interpret(event, options: options).drafts.map { d in
            var d = d
            d.metadata["origin"] = "reconciliation"
            return d
        }
    }

    static func id(_ v: JSONValue?) -> String? { v?.stringValue ?? v?.objectValue?["id"]?.stringValue }

    /// A Stripe time (seconds since 1970), within the ledger's range.
    static func time(_ v: JSONValue?) -> Timestamp? {
        guard let s = v?.numberValue?.int64Value, (0...253_402_300_799).contains(s) else { return nil }
        return Timestamp(microseconds: s * 1_000_000)
    }
}
