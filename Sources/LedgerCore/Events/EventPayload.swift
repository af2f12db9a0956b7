import Crypto
import Foundation

/// An event's `data`, typed by its event type: what the fold, the report facts and the webhooks read of it,
/// in one place. `data` itself stays raw JSON for storage and hashing.
///
/// Built from data the validator accepted when the event was appended (`EventDataValidator.payload`
/// returns it); a member it does not find (an event stored before a field existed) takes the contract's
/// default, so reading a stored event never fails.
public enum EventPayload: Sendable, Hashable {
    case transaction(TransactionData)
    case refund(RefundData)
    case refundReversal(RefundReversalData)
    case cancellation(CancellationData)
    case credit(CreditData)
    case creditReversal(CreditReversalData)
    case autoRenewChanged(AutoRenewChangedData)
    case billingIssue(BillingIssueData)
    case expiration(ExpirationData)
    case storeNotice
    case transferOut(TransferOutData)
    case transferIn(TransferInData)
    case merged(MergedData)

    public init(type: EventType, data: [String: JSONValue]) {
        let d = DataMembers(data)
        switch type {
        case .purchase, .renewal: self = .transaction(TransactionData(data))
        case .refund:
            self = .refund(
                RefundData(
                    transactionID: d.string(EventDataKey.transactionID), amountMinor: d.int64(EventDataKey.amountMinor) ?? 0,
                    currency: d.string(EventDataKey.currency), reason: d.string(EventDataKey.reason), cut: d.bool(EventDataKey.cut) ?? true))
        case .refundReversal: self = .refundReversal(RefundReversalData(transactionID: d.string(EventDataKey.transactionID)))
        case .cancellation:
            self = .cancellation(
                CancellationData(
                    entitlements: d.strings(EventDataKey.entitlements), reason: d.string(EventDataKey.reason),
                    productID: d.string(EventDataKey.productID)))
        case .credit:
            self = .credit(
                CreditData(
                    entitlement: d.string(EventDataKey.entitlement), windowStart: d.timestamp(EventDataKey.windowStart),
                    windowEnd: d.timestamp(EventDataKey.windowEnd), duration: d.duration(EventDataKey.duration)))
        case .creditReversal:
            self = .creditReversal(CreditReversalData(creditEventID: d.string(EventDataKey.creditEventID).flatMap(UUID.init(uuidString:))))
        case .autoRenewChanged:
            self = .autoRenewChanged(AutoRenewChangedData(enabled: d.bool(EventDataKey.enabled), entitlements: d.strings(EventDataKey.entitlements)))
        case .billingIssue:
            self = .billingIssue(
                BillingIssueData(
                    graceUntil: d.timestamp(EventDataKey.graceUntil), entitlements: d.strings(EventDataKey.entitlements),
                    productID: d.string(EventDataKey.productID)))
        case .expiration:
            self = .expiration(ExpirationData(entitlements: d.strings(EventDataKey.entitlements), reason: d.string(EventDataKey.reason)))
        case .storeNotice: self = .storeNotice
        case .transferOut:
            self = .transferOut(
                TransferOutData(
                    store: d.string(EventDataKey.store) ?? "", purchaseID: d.string(EventDataKey.purchaseID) ?? "",
                    toSubscriber: d.string(EventDataKey.toSubscriber) ?? "",
                    reason: d.string(EventDataKey.reason) ?? "support"))
        case .transferIn:
            self = .transferIn(
                TransferInData(
                    store: d.string(EventDataKey.store) ?? "", purchaseID: d.string(EventDataKey.purchaseID) ?? "",
                    fromSubscriber: d.string(EventDataKey.fromSubscriber) ?? "", reason: d.string(EventDataKey.reason) ?? "support",
                    windows: (data[EventDataKey.windows]?.arrayValue ?? []).compactMap { $0.objectValue.flatMap(TransferredWindow.init) },
                    transactions: (data[EventDataKey.transactions]?.arrayValue ?? []).compactMap { $0.objectValue.flatMap(CarriedTransaction.init) }))
        case .merged: self = .merged(MergedData(into: d.string(EventDataKey.into) ?? ""))
        }
    }

    /// The entitlements the event names (a credit's one; none for a refund, its reversal or a notice).
    public var entitlements: [String] {
        switch self {
        case .transaction(let t): t.entitlements
        case .cancellation(let c): c.entitlements
        case .credit(let c): c.entitlement.map { [$0] } ?? []
        case .autoRenewChanged(let a): a.entitlements
        case .billingIssue(let b): b.entitlements
        case .expiration(let e): e.entitlements
        case .transferIn(let t): Array(Set(t.windows.map(\.entitlement))).sorted()
        case .refund, .refundReversal, .creditReversal, .storeNotice, .transferOut, .merged: []
        }
    }
}

/// A `refund`'s `data`.
public struct RefundData: Sendable, Hashable {
    public var transactionID: String?
    public var amountMinor: Int64
    public var currency: String?
    public var reason: String?
    /// False: money back, access continues (a partial or goodwill refund).
    public var cut: Bool
}

/// A `refund_reversal`'s `data`.
public struct RefundReversalData: Sendable, Hashable {
    public var transactionID: String?
}

/// A `cancellation`'s `data`: no entitlements named means every entitlement.
public struct CancellationData: Sendable, Hashable {
    public var entitlements: [String]
    public var reason: String?
    public var productID: String?
}

/// A `credit`'s `data`: an explicit window, or a duration that stacks on the entitlement's coverage.
public struct CreditData: Sendable, Hashable {
    public var entitlement: String?
    public var windowStart: Timestamp?
    public var windowEnd: Timestamp?
    public var duration: ISODuration?
}

/// A `credit_reversal`'s `data`.
public struct CreditReversalData: Sendable, Hashable {
    public var creditEventID: UUID?
}

/// An `auto_renew_changed`'s `data`.
public struct AutoRenewChangedData: Sendable, Hashable {
    public var enabled: Bool?
    public var entitlements: [String]
}

/// A `billing_issue`'s `data`: a grace period until `graceUntil`, when given.
public struct BillingIssueData: Sendable, Hashable {
    public var graceUntil: Timestamp?
    public var entitlements: [String]
    public var productID: String?
}

/// An `expiration`'s `data`.
public struct ExpirationData: Sendable, Hashable {
    public var entitlements: [String]
    /// `voluntary`, `billing`, `price_increase`, `paused`, `other` (`EventDataValidator.ExpirationReason`).
    public var reason: String?
}

/// Why a purchase moved between subscribers (docs/identity.md).
public enum TransferReason: String, Sendable, Hashable, CaseIterable {
    /// A store message or an app named another subscriber for the purchase (transfer policy `transfer`).
    case restore
    /// An app moved the purchase to the account its user logged in to.
    case login
    /// A support agent moved it (`POST /v1/subscribers/{id}/transfers`).
    case support
    /// Part of a merge (`POST /v1/subscribers/{id}/merge`).
    case merge
}

/// A `transfer_out`'s `data`: which purchase left, to whom.
public struct TransferOutData: Sendable, Hashable {
    public var store: String
    /// The store's id of the purchase: Apple's original transaction id, a Google purchase's first order, a
    /// Stripe subscription (the `original_transaction_id` its transactions carry, else their `transaction_id`).
    public var purchaseID: String
    public var toSubscriber: String
    public var reason: String
}

/// A `transfer_in`'s `data`: the purchase and the windows it still had on the subscriber it left.
public struct TransferInData: Sendable, Hashable {
    public var store: String
    public var purchaseID: String
    public var fromSubscriber: String
    public var reason: String
    public var windows: [TransferredWindow]
    /// The paid transactions the purchase's windows belong to, with their terms: money follows the
    /// transaction, so the receiving side recognises the rest of it and takes any later refund (docs/identity.md).
    public var transactions: [CarriedTransaction] = []
}

/// A paid transaction's terms as a `transfer_in` carries them: what revenue needs to go on recognising it
/// where it now is. No money moves with the transfer itself.
public struct CarriedTransaction: Sendable, Hashable {
    public var transactionID: String
    public var entitlements: [String]
    /// `paid`, `intro`, `promo` or `lifetime`.
    public var kind: Window.Kind
    public var currency: String
    public var gross: Int64
    public var commission: Int64
    public var occurredAt: Timestamp
    /// The window as granted.
    public var start: Timestamp
    public var end: Timestamp?
    /// Where a refund or cancellation had already cut its service short.
    public var stop: Timestamp?
    /// The billing period, for MRR.
    public var period: String?
    /// Refunds known when it moved.
    public var refunds: [RevenueTransaction.Refund]
    /// Tax included in `gross` and the transaction's dimensions (docs/reports.md): they follow the money.
    public var tax: Int64
    public var country: String?
    public var store: String?
    public var productID: String?

    public init(_ t: RevenueTransaction, transactionID: String, period: String?) {
        self.transactionID = transactionID
        entitlements = t.entitlements
        kind = t.kind
        currency = t.currency
        gross = t.gross
        commission = t.commission
        occurredAt = t.occurredAt
        start = t.start
        end = t.end
        stop = t.stop
        self.period = period
        refunds = t.refunds
        tax = t.tax
        country = t.country
        store = t.store.isEmpty ? nil : t.store
        productID = t.productID.isEmpty ? nil : t.productID
    }

    init?(_ o: [String: JSONValue]) {
        let d = DataMembers(o)
        guard let id = d.string("transaction_id"), let kind = d.string("kind").flatMap(Window.Kind.init(rawValue:)),
            let currency = d.string("currency"), let gross = d.int64("price_minor"), let occurred = d.timestamp("occurred_at"),
            let start = d.timestamp("start")
        else { return nil }
        transactionID = id
        entitlements = d.strings("entitlements")
        self.kind = kind
        self.currency = currency
        self.gross = gross
        commission = d.int64("commission_minor") ?? 0
        occurredAt = occurred
        self.start = start
        end = d.timestamp("end")
        stop = d.timestamp("stop")
        period = d.string("period")
        refunds = (o["refunds"]?.arrayValue ?? []).compactMap { r in
            let m = DataMembers(r.objectValue ?? [:])
            guard let at = m.timestamp("at"), let amount = m.int64("amount_minor") else { return nil }
            return RevenueTransaction.Refund(at: at, amount: amount, cut: m.bool("cut") ?? true)
        }
        tax = d.int64(EventDataKey.taxMinor) ?? 0
        country = d.string(EventDataKey.country)
        store = d.string(EventDataKey.store)
        productID = d.string(EventDataKey.productID)
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "transaction_id": .string(transactionID), "entitlements": .array(entitlements.map(JSONValue.string)),
            "kind": .string(kind.rawValue), "currency": .string(currency), "price_minor": .number(JSONNumber(gross)),
            "commission_minor": .number(JSONNumber(commission)), "occurred_at": .string(occurredAt.rfc3339), "start": .string(start.rfc3339),
            "end": end.map { .string($0.rfc3339) } ?? .null,
            "refunds": .array(
                refunds.map { .object(["at": .string($0.at.rfc3339), "amount_minor": .number(JSONNumber($0.amount)), "cut": .bool($0.cut)]) }),
        ]
        if let period { o["period"] = .string(period) }
        if let stop { o["stop"] = .string(stop.rfc3339) }
        if tax != 0 { o[EventDataKey.taxMinor] = .number(JSONNumber(tax)) }
        if let country { o[EventDataKey.country] = .string(country) }
        if let store { o[EventDataKey.store] = .string(store) }
        if let productID { o[EventDataKey.productID] = .string(productID) }
        return .object(o)
    }

    /// The transaction as the subscriber it arrived at holds it, from `heldFrom`: an id of its own (the
    /// transfer's and the transaction's), its refunds and its cut there.
    func revenue(transferEvent: UUID, heldFrom: Timestamp, refunds more: [RevenueTransaction.Refund], stop: Timestamp?, handedOver: Timestamp?)
        -> RevenueTransaction
    {
        // Refunds recorded here that took effect before it arrived count when it arrived: what was recognised
        // before then stays with the subscriber it came from.
        let own = more.map { RevenueTransaction.Refund(at: max($0.at, heldFrom), amount: $0.amount, cut: $0.cut) }
        return RevenueTransaction(
            eventID: CarriedTransaction.id(transferEvent, transactionID), entitlements: entitlements, kind: kind, currency: currency,
            gross: gross, commission: commission, occurredAt: occurredAt, start: start, end: end,
            stop: [self.stop, stop].compactMap { $0 }.min(),
            refunds: (refunds + own).sorted { $0.at < $1.at },
            monthly: kind == .lifetime ? nil : period.flatMap { MonthlyAmount(price: gross, period: $0) }, handedOver: handedOver,
            heldFrom: heldFrom, tax: tax, country: country, store: store ?? "", productID: productID ?? "")
    }

    /// A stable id for the copy (its report row's key): a name-based UUID of the transfer and the transaction.
    static func id(_ transferEvent: UUID, _ transactionID: String) -> UUID {
        var bytes = Array(SHA256.hash(data: Array((transferEvent.uuidString.lowercased() + "|" + transactionID).utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10], bytes[11], bytes[12],
                bytes[13], bytes[14], bytes[15]
            ))
    }
}

/// One window a `transfer_in` carries, `[start, end)` as it was on the other subscriber from the transfer on.
public struct TransferredWindow: Sendable, Hashable {
    public var entitlement: String
    public var kind: Window.Kind
    public var productID: String?
    public var transactionID: String?
    public var start: Timestamp
    /// nil: it never ends (lifetime, free).
    public var end: Timestamp?
    /// Whether the window was granted by an auto-renewable transaction (or its grace): `will_renew` can hold
    /// through it. Absent: true for paid, trial, intro, promo and grace windows.
    public var autoRenewable: Bool

    public init(
        entitlement: String, kind: Window.Kind, productID: String?, transactionID: String?, start: Timestamp, end: Timestamp?,
        autoRenewable: Bool
    ) {
        self.entitlement = entitlement
        self.kind = kind
        self.productID = productID
        self.transactionID = transactionID
        self.start = start
        self.end = end
        self.autoRenewable = autoRenewable
    }

    init?(_ o: [String: JSONValue]) {
        let d = DataMembers(o)
        guard let e = d.string(EventDataKey.entitlement), let kind = d.string(EventDataKey.kind).flatMap(Window.Kind.init(rawValue:)),
            let start = d.timestamp("start")
        else { return nil }
        self.init(
            entitlement: e, kind: kind, productID: d.string(EventDataKey.productID), transactionID: d.string(EventDataKey.transactionID),
            start: start,
            end: d.timestamp("end"), autoRenewable: d.bool("auto_renewable") ?? Self.renewsByDefault(kind))
    }

    static func renewsByDefault(_ kind: Window.Kind) -> Bool { [.paid, .trial, .intro, .promo, .grace].contains(kind) }

    /// The window as a `transfer_in` carries it.
    public var json: JSONValue {
        var o: [String: JSONValue] = ["entitlement": .string(entitlement), "kind": .string(kind.rawValue), "start": .string(start.rfc3339)]
        if let productID { o["product_id"] = .string(productID) }
        if let transactionID { o["transaction_id"] = .string(transactionID) }
        o["end"] = end.map { .string($0.rfc3339) } ?? .null
        if autoRenewable != Self.renewsByDefault(kind) { o["auto_renewable"] = .bool(autoRenewable) }
        return .object(o)
    }
}

/// A `merged`'s `data`.
public struct MergedData: Sendable, Hashable {
    public var into: String
}

/// An event as the fold and the report facts see it: the envelope fields they read and the typed payload.
///
/// What a rebuild decodes from the log (no source, key, metadata nor hashes: the fold never reads them),
/// and what a full `RecordedEvent` reduces to.
public struct FoldEvent: Sendable, Hashable {
    public var eventID: UUID
    public var subscriberID: String
    public var version: Int64
    public var position: Int64
    public var type: EventType
    public var occurredAt: Timestamp
    public var environment: LedgerEnvironment
    public var payload: EventPayload
    /// The envelope's `source` (`apple`, `google`, `stripe`, `web`, …): the `store` dimension of reports.
    public var source: String

    public init(
        eventID: UUID, subscriberID: String, version: Int64, position: Int64, type: EventType, occurredAt: Timestamp,
        environment: LedgerEnvironment, data: [String: JSONValue], source: String = ""
    ) {
        self.source = source
        self.eventID = eventID
        self.subscriberID = subscriberID
        self.version = version
        self.position = position
        self.type = type
        self.occurredAt = occurredAt
        self.environment = environment
        self.payload = EventPayload(type: type, data: data)
    }

    public init(_ event: RecordedEvent) {
        self.init(
            eventID: event.eventID, subscriberID: event.subscriberID, version: event.version, position: event.position,
            type: event.type, occurredAt: event.occurredAt, environment: event.environment, data: event.data, source: event.source)
    }
}

/// Typed reads of validated `data` members.
struct DataMembers {
    let members: [String: JSONValue]
    init(_ members: [String: JSONValue]) { self.members = members }

    func string(_ k: String) -> String? { members[k]?.stringValue }
    func bool(_ k: String) -> Bool? { members[k]?.boolValue }
    func int64(_ k: String) -> Int64? { members[k]?.numberValue?.int64Value }
    func strings(_ k: String) -> [String] { members[k]?.arrayValue?.compactMap(\.stringValue) ?? [] }
    func timestamp(_ k: String) -> Timestamp? { string(k).flatMap { try? Timestamp(rfc3339: $0) } }
    func duration(_ k: String) -> ISODuration? { string(k).flatMap(ISODuration.init) }
}
