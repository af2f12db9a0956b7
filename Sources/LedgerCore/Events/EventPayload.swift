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

    public init(type: EventType, data: [String: JSONValue]) {
        let d = DataMembers(data)
        switch type {
        case .purchase, .renewal: self = .transaction(TransactionData(data))
        case .refund:
            self = .refund(
                RefundData(
                    transactionID: d.string("transaction_id"), amountMinor: d.int64("amount_minor") ?? 0,
                    currency: d.string("currency"), reason: d.string("reason"), cut: d.bool("cut") ?? true))
        case .refundReversal: self = .refundReversal(RefundReversalData(transactionID: d.string("transaction_id")))
        case .cancellation:
            self = .cancellation(
                CancellationData(entitlements: d.strings("entitlements"), reason: d.string("reason"), productID: d.string("product_id")))
        case .credit:
            self = .credit(
                CreditData(
                    entitlement: d.string("entitlement"), windowStart: d.timestamp("window_start"),
                    windowEnd: d.timestamp("window_end"), duration: d.duration("duration")))
        case .creditReversal:
            self = .creditReversal(CreditReversalData(creditEventID: d.string("credit_event_id").flatMap(UUID.init(uuidString:))))
        case .autoRenewChanged:
            self = .autoRenewChanged(AutoRenewChangedData(enabled: d.bool("enabled"), entitlements: d.strings("entitlements")))
        case .billingIssue:
            self = .billingIssue(
                BillingIssueData(
                    graceUntil: d.timestamp("grace_until"), entitlements: d.strings("entitlements"), productID: d.string("product_id")))
        case .expiration: self = .expiration(ExpirationData(entitlements: d.strings("entitlements"), reason: d.string("reason")))
        case .storeNotice: self = .storeNotice
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
        case .refund, .refundReversal, .creditReversal, .storeNotice: []
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

    public init(
        eventID: UUID, subscriberID: String, version: Int64, position: Int64, type: EventType, occurredAt: Timestamp,
        environment: LedgerEnvironment, data: [String: JSONValue]
    ) {
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
            type: event.type, occurredAt: event.occurredAt, environment: event.environment, data: event.data)
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
