import LedgerCore
import Testing

/// One broken envelope: members set or removed, and the error expected (field, words in the reason).
struct EnvelopeCase: Sendable, CustomTestStringConvertible {
    var set: [String: JSONValue] = [:]
    var remove: [String] = []
    var field: String
    var reason: String

    var testDescription: String {
        let changes = set.keys.sorted().map { "\($0)=\(set[$0]!.canonicalString().prefix(40))" } + remove.map { "-\($0)" }
        return "\(changes.joined(separator: " ")) → \(field)"
    }

    func members() -> [String: JSONValue] {
        var m = Fixtures.event(.purchase)
        for (k, v) in set { m[k] = v }
        for k in remove { m[k] = nil }
        return m
    }
}

@Suite("Event decoding: the envelope")
struct EventDecoderTests {
    @Test("a valid event of each type decodes", arguments: EventType.allCases)
    func validEachType(type: EventType) throws {
        let event = try EventDecoder.decode(Fixtures.event(type), path: "")
        #expect(event.type == type)
        #expect(event.subscriberID == "user-42")
        #expect(event.source == "web")
        #expect(event.environment == .production)
        #expect(event.idempotencyKey == "k-1")
        #expect(event.occurredAt == Fixtures.timestamp(Fixtures.occurredAt))
        #expect(event.data == Fixtures.data(type))
        #expect(event.metadata == ["request_id": "req-1"])
        #expect(event.expectedVersion == nil)
        #expect(event.fingerprint.count == 32)
    }

    @Test("each valid event also decodes from JSON text through AppendRequest", arguments: EventType.allCases)
    func validFromText(type: EventType) throws {
        let text = JSONValue.object(Fixtures.event(type)).canonicalString()
        let request = try AppendRequest.decode(Array(text.utf8))
        #expect(!request.isBatch)
        #expect(request.events.map(\.type) == [type])
    }

    @Test("envelope values are read as sent, with the offset applied to occurred_at")
    func fields() throws {
        var m = Fixtures.event(.refundReversal)
        m["occurred_at"] = "2026-03-01T12:00:00.5+02:00"
        m["environment"] = "sandbox"
        m["source"] = "apple"
        m["subscriber_id"] = "Org.Example:user_1@team-2"
        m["idempotency_key"] = "clé 1 / with spaces & ünïcode"
        m["expected_version"] = 3
        let event = try EventDecoder.decode(m, path: "")
        #expect(event.occurredAt.rfc3339 == "2026-03-01T10:00:00.500Z")
        #expect(event.environment == .sandbox)
        #expect(event.source == "apple")
        #expect(event.subscriberID == "Org.Example:user_1@team-2")
        #expect(event.idempotencyKey == "clé 1 / with spaces & ünïcode")
        #expect(event.expectedVersion == 3)
    }

    @Test("metadata is optional and may be null; expected_version may be 0 or null")
    func optionalEnvelope() throws {
        var m = Fixtures.event(.refundReversal)
        m["metadata"] = nil
        #expect(try EventDecoder.decode(m, path: "").metadata.isEmpty)
        m["metadata"] = .null
        m["expected_version"] = 0
        let e = try EventDecoder.decode(m, path: "")
        #expect(e.metadata.isEmpty)
        #expect(e.expectedVersion == 0)
        m["expected_version"] = .null
        #expect(try EventDecoder.decode(m, path: "").expectedVersion == nil)
        m["metadata"] = ["raw": ["nested": [1, 2, ["deep": nil]]], "actor": "support:anna"]
        #expect(try EventDecoder.decode(m, path: "").metadata["actor"] == "support:anna")
    }

    @Test("identifier limits: exactly at the maximum is accepted")
    func identifierMaxima() throws {
        var m = Fixtures.event(.refundReversal)
        m["subscriber_id"] = .string(String(repeating: "a", count: 200))
        m["source"] = .string(String(repeating: "s", count: 64))
        m["idempotency_key"] = .string(String(repeating: "k", count: 255))
        #expect(Fixtures.decodeError(m) == nil)
        // 255 bytes, not characters: 85 three-byte characters fit.
        m["idempotency_key"] = .string(String(repeating: "€", count: 85))
        #expect(Fixtures.decodeError(m) == nil)
        m["idempotency_key"] = .string(String(repeating: "€", count: 86))
        #expect(Fixtures.decodeError(m)?.field == "idempotency_key")
    }

    static let envelopeCases: [EnvelopeCase] = [
        EnvelopeCase(remove: ["subscriber_id"], field: "subscriber_id", reason: "is required"),
        EnvelopeCase(set: ["subscriber_id": nil], field: "subscriber_id", reason: "is required"),
        EnvelopeCase(set: ["subscriber_id": 42], field: "subscriber_id", reason: "must be a string, not number"),
        EnvelopeCase(set: ["subscriber_id": ["a"]], field: "subscriber_id", reason: "must be a string, not array"),
        EnvelopeCase(set: ["subscriber_id": ""], field: "subscriber_id", reason: "must not be empty"),
        EnvelopeCase(set: ["subscriber_id": "user 42"], field: "subscriber_id", reason: "1–200 characters"),
        EnvelopeCase(set: ["subscriber_id": " user"], field: "subscriber_id", reason: "1–200 characters"),
        EnvelopeCase(set: ["subscriber_id": "user/42"], field: "subscriber_id", reason: "1–200 characters"),
        EnvelopeCase(set: ["subscriber_id": "user#42"], field: "subscriber_id", reason: "1–200 characters"),
        EnvelopeCase(set: ["subscriber_id": "üser"], field: "subscriber_id", reason: "1–200 characters"),
        EnvelopeCase(set: ["subscriber_id": "user\n"], field: "subscriber_id", reason: "1–200 characters"),
        EnvelopeCase(
            set: ["subscriber_id": .string(String(repeating: "a", count: 201))], field: "subscriber_id",
            reason: "1–200 characters"),
        EnvelopeCase(remove: ["type"], field: "type", reason: "is required"),
        EnvelopeCase(set: ["type": "subscribe"], field: "type", reason: #"not "subscribe""#),
        EnvelopeCase(set: ["type": "Purchase"], field: "type", reason: #""purchase", "renewal""#),
        EnvelopeCase(set: ["type": 1], field: "type", reason: "must be a string, not number"),
        EnvelopeCase(remove: ["occurred_at"], field: "occurred_at", reason: "is required"),
        EnvelopeCase(set: ["occurred_at": "yesterday"], field: "occurred_at", reason: "RFC 3339"),
        EnvelopeCase(set: ["occurred_at": "2026-03-01T10:00:00"], field: "occurred_at", reason: "RFC 3339"),
        EnvelopeCase(set: ["occurred_at": "2026-02-30T10:00:00Z"], field: "occurred_at", reason: "0001 and 9999"),
        EnvelopeCase(
            set: ["occurred_at": "2026-03-01T10:00:00.1234567Z"], field: "occurred_at", reason: "microsecond precision"),
        EnvelopeCase(set: ["occurred_at": 1_772_359_200], field: "occurred_at", reason: "must be a string, not number"),
        EnvelopeCase(remove: ["source"], field: "source", reason: "is required"),
        EnvelopeCase(set: ["source": ""], field: "source", reason: "must not be empty"),
        EnvelopeCase(set: ["source": "Apple"], field: "source", reason: "a–z"),
        EnvelopeCase(set: ["source": "app store"], field: "source", reason: "a–z"),
        EnvelopeCase(set: ["source": "web:1"], field: "source", reason: "a–z"),
        EnvelopeCase(set: ["source": .string(String(repeating: "s", count: 65))], field: "source", reason: "1–64"),
        EnvelopeCase(remove: ["environment"], field: "environment", reason: #""production" or "sandbox""#),
        EnvelopeCase(set: ["environment": "prod"], field: "environment", reason: #"not "prod""#),
        EnvelopeCase(set: ["environment": "Production"], field: "environment", reason: "must be one of"),
        EnvelopeCase(set: ["environment": true], field: "environment", reason: "must be a string, not boolean"),
        EnvelopeCase(remove: ["idempotency_key"], field: "idempotency_key", reason: "is required"),
        EnvelopeCase(set: ["idempotency_key": ""], field: "idempotency_key", reason: "must not be empty"),
        EnvelopeCase(set: ["idempotency_key": 7], field: "idempotency_key", reason: "must be a string"),
        EnvelopeCase(set: ["idempotency_key": "a\nb"], field: "idempotency_key", reason: "control characters"),
        EnvelopeCase(set: ["idempotency_key": "a\tb"], field: "idempotency_key", reason: "control characters"),
        EnvelopeCase(set: ["idempotency_key": "a\u{7F}"], field: "idempotency_key", reason: "control characters"),
        EnvelopeCase(
            set: ["idempotency_key": .string(String(repeating: "k", count: 256))], field: "idempotency_key",
            reason: "at most 255 bytes"),
        EnvelopeCase(remove: ["data"], field: "data", reason: "is required"),
        EnvelopeCase(set: ["data": nil], field: "data", reason: "is required"),
        EnvelopeCase(set: ["data": []], field: "data", reason: "must be an object, not array"),
        EnvelopeCase(set: ["data": "{}"], field: "data", reason: "must be an object, not string"),
        EnvelopeCase(set: ["metadata": "x"], field: "metadata", reason: "must be an object, not string"),
        EnvelopeCase(set: ["metadata": [1]], field: "metadata", reason: "must be an object, not array"),
        EnvelopeCase(set: ["expected_version": -1], field: "expected_version", reason: "at least 0"),
        EnvelopeCase(set: ["expected_version": "3"], field: "expected_version", reason: "must be an integer, not string"),
        EnvelopeCase(set: ["expected_version": Fixtures.number("1.5")], field: "expected_version", reason: "integer"),
        EnvelopeCase(set: ["expected_version": Fixtures.number("1e30")], field: "expected_version", reason: "at most 1000000000000000"),
        EnvelopeCase(
            set: ["event_id": "0b5e6c1a-4f2d-4c7e-9a3b-1c2d3e4f5a6b"], field: "event_id", reason: "assigned by the ledger"),
        EnvelopeCase(set: ["version": 1], field: "version", reason: "assigned by the ledger"),
        EnvelopeCase(set: ["position": 10], field: "position", reason: "assigned by the ledger"),
        EnvelopeCase(set: ["recorded_at": "2026-03-01T10:00:00Z"], field: "recorded_at", reason: "assigned by the ledger"),
        EnvelopeCase(set: ["hash": "00"], field: "hash", reason: "assigned by the ledger"),
        EnvelopeCase(set: ["prev_hash": "00"], field: "prev_hash", reason: "assigned by the ledger"),
        EnvelopeCase(set: ["ocurred_at": "2026-03-01T10:00:00Z"], field: "ocurred_at", reason: "is not a known field"),
        EnvelopeCase(set: ["zeta": 1, "alpha": 2], field: "alpha", reason: "is not a known field"),
        EnvelopeCase(set: ["Type": "purchase"], field: "Type", reason: "is not a known field"),
    ]

    @Test("a broken envelope names the field and says why", arguments: envelopeCases)
    func envelopeErrors(c: EnvelopeCase) throws {
        let error = try #require(Fixtures.decodeError(c.members()), "accepted")
        #expect(error.field == c.field)
        #expect(error.reason.contains(c.reason), "reason: \(error.reason)")
        #expect(error.description == "\(c.field): \(error.reason)")
    }

    @Test("ledger-assigned fields are refused even when null")
    func ledgerFieldsNull() throws {
        for name in ["event_id", "version", "position", "recorded_at", "hash", "prev_hash"] {
            var m = Fixtures.event(.refundReversal)
            m[name] = .null
            let error = try #require(Fixtures.decodeError(m), "\(name): null accepted")
            #expect(error.field == name)
        }
    }

    @Test("errors carry the path of the event they are in")
    func pathPrefix() throws {
        var m = Fixtures.event(.purchase)
        m["source"] = "Web"
        #expect(Fixtures.decodeError(m, path: "events[3]")?.field == "events[3].source")
        let missing = Fixtures.event(.purchase, settingData: [:], removingData: ["transaction_id"])
        #expect(Fixtures.decodeError(missing, path: "events[3]")?.field == "events[3].data.transaction_id")
        #expect(Fixtures.decodeError(missing)?.field == "data.transaction_id")
    }
}

@Suite("Identifiers and names of the contract")
struct IdentifierTests {
    @Test("event type names are the contract's fourteen")
    func eventTypes() {
        #expect(
            EventType.allCases.map(\.rawValue) == [
                "purchase", "renewal", "refund", "refund_reversal", "cancellation", "credit", "credit_reversal",
                "auto_renew_changed", "billing_issue", "expiration", "store_notice", "transfer_out", "transfer_in", "merged",
            ])
        #expect(LedgerEnvironment.allCases.map(\.rawValue) == ["production", "sandbox"])
    }

    @Test(
        "subscriber ids: [A-Za-z0-9._:@$-]{1,200}",
        arguments: [
            ("a", true), ("Z9", true), ("user.name_1:team@example-org", true), (String(repeating: "x", count: 200), true),
            ("$RCAnonymousID:8f3a0c", true),
            ("", false), (String(repeating: "x", count: 201), false), ("a b", false), ("a/b", false), ("a+b", false),
            ("é", false), ("a\u{0}", false), ("a,b", false),
        ])
    func subscriberIDs(id: String, valid: Bool) {
        #expect(Identifiers.isValidSubscriberID(id) == valid)
    }

    @Test(
        "sources: [a-z0-9_.-]{1,64}",
        arguments: [
            ("apple", true), ("google", true), ("stripe", true), ("web", true), ("support", true), ("import", true),
            ("store_v2.eu-1", true), (String(repeating: "s", count: 64), true), ("", false),
            (String(repeating: "s", count: 65), false), ("Apple", false), ("app store", false), ("web:1", false),
            ("web@x", false),
        ])
    func sources(source: String, valid: Bool) {
        #expect(Identifiers.isValidSource(source) == valid)
    }

    @Test(
        "currencies: three upper-case letters",
        arguments: [
            ("USD", true), ("EUR", true), ("JPY", true), ("usd", false), ("Usd", false), ("US", false), ("USDD", false),
            ("U5D", false), ("", false), ("ÉUR", false),
        ])
    func currencies(code: String, valid: Bool) {
        #expect(Identifiers.isValidCurrency(code) == valid)
    }

    @Test(
        "idempotency keys: 1–255 bytes without control characters",
        arguments: [
            ("k", true), ("notification:6f1c2a3b", true), ("clé / ünïcode 😀", true), (String(repeating: "k", count: 255), true),
            ("", false), (String(repeating: "k", count: 256), false), ("a\nb", false), ("a\u{1}", false), ("\u{7F}", false),
            ("tab\t", false),
        ])
    func idempotencyKeys(key: String, valid: Bool) {
        #expect(Identifiers.isValidIdempotencyKey(key) == valid)
    }
}
