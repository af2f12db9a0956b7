import Foundation
import LedgerCore
import Testing

@Suite("RecordedEvent hash chain")
struct HashChainTests {
    static let eventID = UUID(uuidString: "6F1C2A3B-4D5E-4F60-8A7B-9C0D1E2F3A4B")!

    static func recorded(prevHash: [UInt8] = RecordedEvent.genesisHash, version: Int64 = 1, position: Int64 = 7)
        -> RecordedEvent
    {
        RecordedEvent(
            eventID: eventID, subscriberID: "alice", version: version, position: position, type: .refundReversal,
            occurredAt: Fixtures.timestamp("2026-03-01T10:00:00Z"), recordedAt: Fixtures.timestamp("2026-03-01T10:00:01.5Z"),
            source: "web", environment: .sandbox, idempotencyKey: "k-1", data: ["transaction_id": "t-1"],
            metadata: ["note": "\u{E9}\n"], prevHash: prevHash)
    }

    @Test("canonical content and hash are pinned: SHA-256(prev_hash ‖ canonical bytes)")
    func pinnedVector() {
        let e = Self.recorded()
        #expect(
            e.canonicalContent.canonicalString()
                == #"{"data":{"transaction_id":"t-1"},"environment":"sandbox","event_id":"6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b","idempotency_key":"k-1","metadata":{"note":"é\n"},"occurred_at":"2026-03-01T10:00:00Z","position":7,"recorded_at":"2026-03-01T10:00:01.500Z","source":"web","subscriber_id":"alice","type":"refund_reversal","version":1}"#
        )
        #expect(Hex.encode(e.hash) == "22870ad7d6563bfb60a0c31507b4fd576b3a48fc65613eda3b06abeb1a1d480b")

        let next = Self.recorded(prevHash: e.hash, version: 2, position: 9)
        #expect(Hex.encode(next.hash) == "be4c1237bbed55d2668f6e96f7abf2c3684e8ccb93edc03435118f0743b01d81")
    }

    @Test("the field-by-field canonical bytes equal the sorted object's, for envelopes, their API view and client content")
    func fastCanonicalBytesMatchTheObject() {
        let odd: [String: JSONValue] = [
            "é": "x\u{1}\"\\\t", "a b": .array([.null, .bool(true), .number(JSONNumber(-12))]), "": "",
            "😀": .object(["z": "1", "Z": "2", "\u{7F}": "3"]), "aa": "\u{2028}", "b": .number(JSONNumber(jsonText: "1.50")!),
        ]
        for (data, metadata) in [(odd, [:]), ([:], odd), (["transaction_id": "t-1"], ["note": "é\n"])] as [([String: JSONValue], [String: JSONValue])]
        {
            for key in ["k", "ké\"\\", ""] {
                let e = RecordedEvent(
                    eventID: UUID(), subscriberID: "s\t\u{E9}", version: 3, position: 9_000_000_000, type: .purchase,
                    occurredAt: Fixtures.timestamp("2026-03-01T10:00:00.000001Z"), recordedAt: Fixtures.timestamp("0001-01-01T00:00:00Z"),
                    source: "apple", environment: .production, idempotencyKey: key, data: data, metadata: metadata,
                    prevHash: RecordedEvent.genesisHash)
                #expect(e.canonicalBytes() == e.canonicalContent.canonicalBytes())
                var view = CanonicalObject()
                e.write(to: &view)
                #expect(view.finish() == e.json.canonicalBytes())
                let rendered = RecordedEvent(
                    eventID: e.eventID, subscriberID: e.subscriberID, version: e.version, position: e.position, type: e.type,
                    occurredAt: e.occurredAt, recordedAt: e.recordedAt, source: e.source, environment: e.environment,
                    idempotencyKey: e.idempotencyKey, data: data, metadata: metadata, prevHash: e.prevHash,
                    canonicalData: JSONValue.object(data).canonicalBytes(), canonicalMetadata: JSONValue.object(metadata).canonicalBytes())
                #expect(rendered.hash == e.hash && rendered.hash == e.computedHash())
                let n = NewEvent(
                    subscriberID: e.subscriberID, type: e.type, occurredAt: e.occurredAt, source: e.source,
                    environment: e.environment, idempotencyKey: key, data: data, metadata: metadata)
                #expect(n.clientContentBytes() == n.clientContent.canonicalBytes())
            }
        }
    }

    @Test("the hash is deterministic and recomputable")
    func deterministic() {
        let a = Self.recorded()
        let b = Self.recorded()
        #expect(a.hash == b.hash)
        #expect(a.hash.count == 32)
        #expect(a.computedHash() == a.hash)
        #expect(a == b)
    }

    @Test("the event id is hashed in lower case")
    func eventIDLowercase() {
        let e = Self.recorded()
        #expect(e.canonicalContent.objectValue?["event_id"] == "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b")
    }

    enum Field: String, CaseIterable, Sendable {
        case eventID, subscriberID, version, position, type, occurredAt, recordedAt, source, environment
        case idempotencyKey, dataValue, dataKey, dataNumberSpelling, metadata, metadataEmpty, prevHash
    }

    @Test("changing any envelope field, the data, the metadata or prev_hash changes the hash", arguments: Field.allCases)
    func everyFieldCounts(field: Field) {
        let base = Self.recorded()
        var e = base
        switch field {
        case .eventID: e.eventID = UUID(uuidString: "6F1C2A3B-4D5E-4F60-8A7B-9C0D1E2F3A4C")!
        case .subscriberID: e.subscriberID = "alicf"
        case .version: e.version = 2
        case .position: e.position = 8
        case .type: e.type = .refund
        case .occurredAt: e.occurredAt = Timestamp(microseconds: e.occurredAt.microseconds + 1)
        case .recordedAt: e.recordedAt = Timestamp(microseconds: e.recordedAt.microseconds - 1)
        case .source: e.source = "apple"
        case .environment: e.environment = .production
        case .idempotencyKey: e.idempotencyKey = "k-2"
        case .dataValue: e.data = ["transaction_id": "t-2"]
        case .dataKey: e.data = ["transaction_ID": "t-1"]
        case .dataNumberSpelling: e.data = ["transaction_id": 1]
        case .metadata: e.metadata = ["note": "e\u{301}\n"]
        case .metadataEmpty: e.metadata = [:]
        case .prevHash: e.prevHash = [UInt8](repeating: 0, count: 31) + [1]
        }
        #expect(e.computedHash() != base.hash)
        // The stored hash no longer matches: this is what verification detects.
        #expect(e.hash == base.hash)
        #expect(e.computedHash() != e.hash)
    }

    @Test("a chain links each event to the one before")
    func chain() {
        var events: [RecordedEvent] = []
        var prev = RecordedEvent.genesisHash
        for version in Int64(1)...5 {
            let e = Self.recorded(prevHash: prev, version: version, position: version * 10)
            events.append(e)
            prev = e.hash
        }
        #expect(events[0].prevHash == RecordedEvent.genesisHash)
        for i in 1..<events.count {
            #expect(events[i].prevHash == events[i - 1].hash)
            #expect(events[i].computedHash() == events[i].hash)
        }
        #expect(Set(events.map(\.hash)).count == 5)

        // Rewriting an earlier event breaks every later link.
        var forged = events[1]
        forged.data = ["transaction_id": "t-forged"]
        let reHashed = RecordedEvent(
            eventID: forged.eventID, subscriberID: forged.subscriberID, version: forged.version, position: forged.position,
            type: forged.type, occurredAt: forged.occurredAt, recordedAt: forged.recordedAt, source: forged.source,
            environment: forged.environment, idempotencyKey: forged.idempotencyKey, data: forged.data,
            metadata: forged.metadata, prevHash: forged.prevHash)
        #expect(reHashed.hash != events[2].prevHash)
    }

    @Test("the same event after another predecessor has another hash")
    func prevHashMatters() {
        let genesis = Self.recorded()
        let other = Self.recorded(prevHash: [UInt8](repeating: 0xFF, count: 32))
        #expect(genesis.hash != other.hash)
        #expect(genesis.canonicalContent == other.canonicalContent)
    }

    @Test("a hash given to the initialiser is kept as read from storage")
    func storedHashKept() {
        let stored = [UInt8](repeating: 7, count: 32)
        let e = RecordedEvent(
            eventID: Self.eventID, subscriberID: "alice", version: 1, position: 1, type: .refundReversal,
            occurredAt: Timestamp(microseconds: 0), recordedAt: Timestamp(microseconds: 0), source: "web",
            environment: .production, idempotencyKey: "k", data: ["transaction_id": "t"], metadata: [:],
            prevHash: RecordedEvent.genesisHash, hash: stored)
        #expect(e.hash == stored)
        #expect(e.computedHash() != stored)
    }

    @Test("the API view is the canonical content plus hash and prev_hash in lower-case hex")
    func json() throws {
        let first = Self.recorded()
        let second = Self.recorded(prevHash: first.hash, version: 2, position: 9)
        let view = try #require(second.json.objectValue)
        #expect(view["hash"] == .string(Hex.encode(second.hash)))
        #expect(view["prev_hash"] == .string(Hex.encode(first.hash)))
        #expect(view["hash"]?.stringValue == "be4c1237bbed55d2668f6e96f7abf2c3684e8ccb93edc03435118f0743b01d81")
        var rest = view
        rest["hash"] = nil
        rest["prev_hash"] = nil
        #expect(JSONValue.object(rest) == second.canonicalContent)
        #expect(view["version"] == 2)
        #expect(view["position"] == 9)
        #expect(view["recorded_at"] == "2026-03-01T10:00:01.500Z")

        let genesisView = try #require(first.json.objectValue)
        #expect(genesisView["prev_hash"] == .string(String(repeating: "0", count: 64)))
        let hashText = try #require(genesisView["hash"]?.stringValue)
        #expect(hashText.count == 64)
        #expect(hashText.allSatisfy { "0123456789abcdef".contains($0) })
    }

    @Test("genesis hash is 32 zero bytes")
    func genesis() {
        #expect(RecordedEvent.genesisHash == [UInt8](repeating: 0, count: 32))
    }
}

@Suite("Hex")
struct HexTests {
    @Test("encodes lower case")
    func encode() {
        #expect(Hex.encode([]) == "")
        #expect(Hex.encode([0x00, 0x01, 0x7F, 0x80, 0xAB, 0xFF]) == "00017f80abff")
    }

    @Test("decodes either case and round-trips")
    func decode() {
        #expect(Hex.decode("00017f80abff") == [0x00, 0x01, 0x7F, 0x80, 0xAB, 0xFF])
        #expect(Hex.decode("00017F80ABFF") == [0x00, 0x01, 0x7F, 0x80, 0xAB, 0xFF])
        #expect(Hex.decode("") == [])
        let bytes = (0...255).map { UInt8($0) }
        #expect(Hex.decode(Hex.encode(bytes)) == bytes)
    }

    @Test("refuses odd lengths and non-hex characters", arguments: ["0", "abc", "zz", "0g", "  ", "0x00", "é0", "ab cd"])
    func invalid(text: String) {
        #expect(Hex.decode(text) == nil)
    }
}
