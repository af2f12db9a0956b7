/// A ledger event translated from a store payload, before the catalog completes it.
///
/// Store payloads name products but not what they unlock or (for receipts) what they cost; the HTTP edge
/// completes drafts from the catalog (entitlements, kind, price, a refund's amount) and appends them.
public struct EventDraft: Sendable, Hashable {
    public var type: EventType
    public var occurredAt: Timestamp
    public var environment: LedgerEnvironment
    /// Unique per source `apple`: derived from the store's own ids so that the same fact arriving by a
    /// notification and by a receipt is stored once.
    public var idempotencyKey: String
    /// The product the catalog completes this draft from (nil when the draft is already complete).
    public var productID: String?
    public var originalTransactionID: String?
    /// The event's `data`, possibly missing what the catalog provides.
    public var data: [String: JSONValue]
    /// Raw store ids and payload, kept for the audit trail.
    public var metadata: [String: JSONValue]

    public init(
        type: EventType, occurredAt: Timestamp, environment: LedgerEnvironment, idempotencyKey: String,
        productID: String?, originalTransactionID: String?, data: [String: JSONValue], metadata: [String: JSONValue]
    ) {
        self.type = type
        self.occurredAt = occurredAt
        self.environment = environment
        self.idempotencyKey = idempotencyKey
        self.productID = productID
        self.originalTransactionID = originalTransactionID
        self.data = data
        self.metadata = metadata
    }
}
