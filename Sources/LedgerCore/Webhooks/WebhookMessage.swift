import Crypto
import Foundation

/// Which events an endpoint wants. Nil members do not filter.
public struct WebhookFilter: Sendable, Hashable {
    public var eventTypes: Set<EventType>?
    public var entitlements: Set<String>?

    public init(eventTypes: Set<EventType>? = nil, entitlements: Set<String>? = nil) {
        self.eventTypes = eventTypes
        self.entitlements = entitlements
    }

    /// Whether the event's type is wanted: decidable without folding, so unwanted events cost nothing.
    public func wantsType(_ event: RecordedEvent) -> Bool {
        eventTypes.map { $0.contains(event.type) } ?? true
    }

    /// Whether the event passes both filters. For entitlements: one the event names in its data
    /// (`entitlements`, `entitlement`) or one it changed (a refund names only a transaction).
    public func matches(_ event: RecordedEvent, changes: [EntitlementChange]) -> Bool {
        guard wantsType(event) else { return false }
        guard let wanted = entitlements else { return true }
        let named = EventPayload(type: event.type, data: event.data).entitlements
        return named.contains(where: wanted.contains) || changes.contains { wanted.contains($0.entitlement) }
    }
}

/// One webhook message: what an endpoint receives for one ledger event.
///
/// Its body is a pure function of the log up to the event's position, so every retry and every replay of
/// the same event to the same endpoint sends the same bytes under the same `webhook-id`.
public struct WebhookMessage: Sendable {
    public var id: String
    public var body: [UInt8]

    /// `before`: the subscriber's fold of the events below the event's position; `after`: with it. The
    /// entitlement states are taken at the event's `occurred_at`, the instant it describes.
    public init(endpointID: UUID, event: RecordedEvent, before: SubscriberLedger, after: SubscriberLedger) {
        let changes = EntitlementChange.between(before, after, at: event.occurredAt)
        self.init(endpointID: endpointID, event: event, after: after, changes: changes)
    }

    public init(endpointID: UUID, event: RecordedEvent, after: SubscriberLedger, changes: [EntitlementChange]) {
        self.id = Self.id(endpointID: endpointID, eventID: event.eventID)
        self.body = Self.payload(event: event, after: after, changes: changes).canonicalBytes()
    }

    /// A message whose body was built before (held for a retry, or shared by every endpoint).
    public init(endpointID: UUID, eventID: UUID, body: [UInt8]) {
        self.id = Self.id(endpointID: endpointID, eventID: eventID)
        self.body = body
    }

    /// `msg_` + 128 bits of SHA-256 over the endpoint and the event: stable for the pair, distinct per endpoint.
    public static func id(endpointID: UUID, eventID: UUID) -> String {
        let digest = SHA256.hash(data: Array("\(endpointID.lowercasedString):\(eventID.lowercasedString)".utf8))
        return "msg_" + Hex.encode(digest.prefix(16))
    }

    /// The Standard Webhooks payload shape: `type`, `timestamp` (when the ledger recorded the event) and
    /// `data` with the envelope, the entitlements right after the event and what it changed.
    public static func payload(event: RecordedEvent, after: SubscriberLedger, changes: [EntitlementChange]) -> JSONValue {
        payload(event: event, entitlements: after.entitlements(at: event.occurredAt), changes: changes)
    }

    /// `payload`, with the entitlements right after the event (at its `occurred_at`) already computed.
    public static func payload(event: RecordedEvent, entitlements: [EntitlementState], changes: [EntitlementChange]) -> JSONValue {
        .object([
            "type": .string("ledger.\(event.type.rawValue)"),
            "timestamp": .string(event.recordedAt.rfc3339),
            "data": .object([
                "event": event.json,
                "entitlements_at": .string(event.occurredAt.rfc3339),
                "entitlements": .array(entitlements.map(\.json)),
                "changes": .array(changes.map(\.json)),
            ]),
        ])
    }
}
