import Crypto
import Foundation

/// An event as the ledger stored it, with its envelope and its link in the subscriber's hash chain.
public struct RecordedEvent: Sendable, Hashable {
    public var eventID: UUID
    public var subscriberID: String
    public var version: Int64
    public var position: Int64
    public var type: EventType
    public var occurredAt: Timestamp
    public var recordedAt: Timestamp
    public var source: String
    public var environment: LedgerEnvironment
    public var idempotencyKey: String
    public var data: [String: JSONValue]
    public var metadata: [String: JSONValue]
    /// The previous event's hash in this subscriber's stream (32 zero bytes for version 1).
    public var prevHash: [UInt8]
    public var hash: [UInt8]

    public static let genesisHash = [UInt8](repeating: 0, count: 32)

    public init(
        eventID: UUID, subscriberID: String, version: Int64, position: Int64, type: EventType, occurredAt: Timestamp,
        recordedAt: Timestamp, source: String, environment: LedgerEnvironment, idempotencyKey: String,
        data: [String: JSONValue], metadata: [String: JSONValue], prevHash: [UInt8], hash: [UInt8]? = nil
    ) {
        self.eventID = eventID
        self.subscriberID = subscriberID
        self.version = version
        self.position = position
        self.type = type
        self.occurredAt = occurredAt
        self.recordedAt = recordedAt
        self.source = source
        self.environment = environment
        self.idempotencyKey = idempotencyKey
        self.data = data
        self.metadata = metadata
        self.prevHash = prevHash
        self.hash = []
        self.hash = hash ?? self.computedHash()
    }

    /// As the other initialiser, with `data` and `metadata` already written as canonical JSON: the hash is
    /// taken over those bytes, so a writer that also stores them as text writes each once.
    public init(
        eventID: UUID, subscriberID: String, version: Int64, position: Int64, type: EventType, occurredAt: Timestamp,
        recordedAt: Timestamp, source: String, environment: LedgerEnvironment, idempotencyKey: String,
        data: [String: JSONValue], metadata: [String: JSONValue], prevHash: [UInt8], canonicalData: [UInt8],
        canonicalMetadata: [UInt8]
    ) {
        self.init(
            eventID: eventID, subscriberID: subscriberID, version: version, position: position, type: type, occurredAt: occurredAt,
            recordedAt: recordedAt, source: source, environment: environment, idempotencyKey: idempotencyKey, data: data,
            metadata: metadata, prevHash: prevHash, hash: [])
        var out = CanonicalObject()
        writeMembers(to: &out, hashes: false, rendered: (canonicalData, canonicalMetadata))
        hash = Self.chainHash(prevHash: prevHash, content: out.finish())
    }

    /// The bytes the chain hashes: every envelope field the ledger keeps, in canonical JSON.
    public var canonicalContent: JSONValue {
        .object([
            "event_id": .string(eventID.lowercasedString),
            "subscriber_id": .string(subscriberID),
            "version": .number(JSONNumber(version)),
            "position": .number(JSONNumber(position)),
            "type": .string(type.rawValue),
            "occurred_at": .string(occurredAt.rfc3339),
            "recorded_at": .string(recordedAt.rfc3339),
            "source": .string(source),
            "environment": .string(environment.rawValue),
            "idempotency_key": .string(idempotencyKey),
            "data": .object(data),
            "metadata": .object(metadata),
        ])
    }

    /// `canonicalContent`'s canonical bytes, written field by field in their sorted order: every append and
    /// import hashes each event, and building the object to sort its twelve keys cost more than the hash.
    public func canonicalBytes() -> [UInt8] {
        var out = CanonicalObject()
        writeMembers(to: &out, hashes: false)
        return out.finish()
    }

    /// `json`'s members, written in canonical order without building it (the append, feed and stream
    /// responses: a batch answers a thousand events).
    public func write(to out: inout CanonicalObject) {
        writeMembers(to: &out, hashes: true)
    }

    /// The envelope's members in sorted key order; `hashes`: with `hash` and `prev_hash` (the API's view);
    /// `rendered`: `data` and `metadata` already written as canonical JSON.
    private func writeMembers(to out: inout CanonicalObject, hashes: Bool, rendered: ([UInt8], [UInt8])? = nil) {
        if let rendered { out.member("data", canonical: rendered.0) } else { out.member("data", .object(data)) }
        out.member("environment", string: environment.rawValue)
        out.member("event_id", string: eventID.lowercasedString)
        if hashes { out.member("hash", string: Hex.encode(hash)) }
        out.member("idempotency_key", string: idempotencyKey)
        if let rendered { out.member("metadata", canonical: rendered.1) } else { out.member("metadata", .object(metadata)) }
        out.member("occurred_at", string: occurredAt.rfc3339)
        out.member("position", integer: position)
        if hashes { out.member("prev_hash", string: Hex.encode(prevHash)) }
        out.member("recorded_at", string: recordedAt.rfc3339)
        out.member("source", string: source)
        out.member("subscriber_id", string: subscriberID)
        out.member("type", string: type.rawValue)
        out.member("version", integer: version)
    }

    /// `SHA-256(prev_hash ‖ canonical bytes of the event)` (docs/semantics.md section 4).
    public func computedHash() -> [UInt8] {
        Self.chainHash(prevHash: prevHash, content: canonicalBytes())
    }

    /// The chain's link: `SHA-256(prev_hash ‖ content)`, `content` being an event's canonical bytes.
    private static func chainHash(prevHash: [UInt8], content: [UInt8]) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data: prevHash)
        hasher.update(data: content)
        return Array(hasher.finalize())
    }

    /// The event as the API shows it: the whole envelope plus `hash` and `prev_hash` in hex.
    public var json: JSONValue {
        guard case .object(var members) = canonicalContent else { return canonicalContent }
        members["hash"] = .string(Hex.encode(hash))
        members["prev_hash"] = .string(Hex.encode(prevHash))
        return .object(members)
    }
}

/// Lower-case hexadecimal, as hashes are shown to auditors.
public enum Hex {
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            var i = 0
            for b in bytes {
                out[i] = digit(b >> 4)
                out[i + 1] = digit(b & 0xF)
                i += 2
            }
            return i
        }
    }

    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        encode(Array(bytes))
    }

    /// The lowercase hex digit of a nibble.
    @inline(__always)
    public static func digit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? 0x30 &+ nibble : 0x57 &+ nibble
    }

    public static func decode(_ text: String) -> [UInt8]? {
        let u = Array(text.utf8)
        guard u.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(u.count / 2)
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: c - 0x30
            case 0x61...0x66: c - 0x61 + 10
            case 0x41...0x46: c - 0x41 + 10
            default: nil
            }
        }
        var i = 0
        while i < u.count {
            guard let hi = nibble(u[i]), let lo = nibble(u[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }
}
