import Crypto

/// An event as a client asks to append it: validated, not yet stored.
public struct NewEvent: Sendable, Hashable {
    public var subscriberID: String
    public var type: EventType
    public var occurredAt: Timestamp
    public var source: String
    public var environment: LedgerEnvironment
    public var idempotencyKey: String
    public var data: [String: JSONValue] { didSet { written = WrittenContent() } }
    public var metadata: [String: JSONValue] { didSet { written = WrittenContent() } }
    /// The stream's version the client saw; the append fails with a version conflict otherwise.
    public var expectedVersion: Int64?
    /// SHA-256 of the event's canonical content as the client sent it (without `expected_version`):
    /// a retry with the same idempotency key must carry the same fingerprint.
    public var fingerprint: [UInt8]
    /// `data` and `metadata` as canonical JSON, written once for the fingerprint and kept for the stored
    /// text and the hash; dropped when either changes (the catalog fills a purchase in after intake).
    private var written = WrittenContent()

    public init(
        subscriberID: String, type: EventType, occurredAt: Timestamp, source: String,
        environment: LedgerEnvironment, idempotencyKey: String, data: [String: JSONValue],
        metadata: [String: JSONValue] = [:], expectedVersion: Int64? = nil, fingerprint: [UInt8]? = nil
    ) {
        self.subscriberID = subscriberID
        self.type = type
        self.occurredAt = occurredAt
        self.source = source
        self.environment = environment
        self.idempotencyKey = idempotencyKey
        self.data = data
        self.metadata = metadata
        self.expectedVersion = expectedVersion
        self.fingerprint = fingerprint ?? []
        if fingerprint == nil {
            written = WrittenContent(data: JSONValue.object(data).canonicalBytes(), metadata: JSONValue.object(metadata).canonicalBytes())
            self.fingerprint = Array(SHA256.hash(data: clientContentBytes()))
        }
    }

    /// `data` as canonical JSON (the stored text and the hash's input).
    public var canonicalData: [UInt8] { written.data ?? JSONValue.object(data).canonicalBytes() }

    /// `metadata` as canonical JSON.
    public var canonicalMetadata: [UInt8] { written.metadata ?? JSONValue.object(metadata).canonicalBytes() }

    /// `clientContent`'s canonical bytes, written field by field in their sorted order (see
    /// `RecordedEvent.canonicalBytes`).
    public func clientContentBytes() -> [UInt8] {
        var out = CanonicalObject()
        out.member("data", canonical: canonicalData)
        out.member("environment", string: environment.rawValue)
        out.member("idempotency_key", string: idempotencyKey)
        out.member("metadata", canonical: canonicalMetadata)
        out.member("occurred_at", string: occurredAt.rfc3339)
        out.member("source", string: source)
        out.member("subscriber_id", string: subscriberID)
        out.member("type", string: type.rawValue)
        return out.finish()
    }

    /// What the client asserted about the event, the basis of its fingerprint.
    public var clientContent: JSONValue {
        .object([
            "subscriber_id": .string(subscriberID),
            "type": .string(type.rawValue),
            "occurred_at": .string(occurredAt.rfc3339),
            "source": .string(source),
            "environment": .string(environment.rawValue),
            "idempotency_key": .string(idempotencyKey),
            "data": .object(data),
            "metadata": .object(metadata),
        ])
    }
}

/// Bytes written from an event's content (nil: not written): derived from it, so not part of the event's
/// identity (any two compare equal) nor of its description.
private struct WrittenContent: Sendable, Hashable, CustomDebugStringConvertible {
    var data: [UInt8]?
    var metadata: [UInt8]?

    static func == (_: Self, _: Self) -> Bool { true }
    func hash(into hasher: inout Hasher) {}
    var debugDescription: String { data == nil ? "not written" : "written" }
}
