import LedgerCore
import Testing

@Suite("NewEvent fingerprint")
struct FingerprintTests {
    private func event(_ text: String) throws -> NewEvent {
        let request = try AppendRequest.decode(Array(text.utf8))
        try #require(request.events.count == 1)
        return request.events[0]
    }

    static let reference = #"""
        {"subscriber_id":"user-42","type":"purchase","occurred_at":"2026-03-01T10:00:00Z","source":"web",
         "environment":"production","idempotency_key":"k-1",
         "data":{"product_id":"pro.monthly","entitlements":["pro"],"transaction_id":"t-1","kind":"auto_renewable",
                 "period_start":"2026-03-01T10:00:00Z","period_end":"2026-04-01T10:00:00Z","period":"P1M",
                 "price_minor":999,"currency":"USD","commission_rate":"0.30"},
         "metadata":{"request_id":"req-1","tags":["a","b"]}}
        """#

    @Test(
        "the same content gives the same fingerprint however the JSON is written",
        arguments: [
            // keys in another order, other whitespace
            #"""
            {"metadata":{"tags":["a","b"],"request_id":"req-1"},"idempotency_key":"k-1","environment":"production",
            "data":{"commission_rate":"0.30","currency":"USD","price_minor":999,"period":"P1M",
            "period_end":"2026-04-01T10:00:00Z","period_start":"2026-03-01T10:00:00Z","kind":"auto_renewable",
            "transaction_id":"t-1","entitlements":["pro"],"product_id":"pro.monthly"},
            "source":"web","occurred_at":"2026-03-01T10:00:00Z","type":"purchase","subscriber_id":"user-42"}
            """#,
            // numbers spelled differently, escapes, an offset on occurred_at
            #"""
            {"subscriber_id":"user\u002d42","type":"purchase","occurred_at":"2026-03-01T12:00:00+02:00","source":"web",
             "environment":"production","idempotency_key":"k-1",
             "data":{"product_id":"pro.monthly","entitlements":["\u0070ro"],"transaction_id":"t-1","kind":"auto_renewable",
                     "period_start":"2026-03-01T10:00:00Z","period_end":"2026-04-01T10:00:00Z","period":"P1M",
                     "price_minor":9.99e2,"currency":"USD","commission_rate":"0.30"},
             "metadata":{"request_id":"req-1","tags":["a","b"]}}
            """#,
            // expected_version is not part of the content
            #"""
            {"subscriber_id":"user-42","type":"purchase","occurred_at":"2026-03-01T10:00:00Z","source":"web",
             "environment":"production","idempotency_key":"k-1","expected_version":7,
             "data":{"product_id":"pro.monthly","entitlements":["pro"],"transaction_id":"t-1","kind":"auto_renewable",
                     "period_start":"2026-03-01T10:00:00Z","period_end":"2026-04-01T10:00:00Z","period":"P1M",
                     "price_minor":999,"currency":"USD","commission_rate":"0.30"},
             "metadata":{"request_id":"req-1","tags":["a","b"]}}
            """#,
        ])
    func sameContent(text: String) throws {
        let a = try event(Self.reference)
        let b = try event(text)
        #expect(a.fingerprint == b.fingerprint)
        #expect(a.clientContent == b.clientContent)
        #expect(a.clientContent.canonicalBytes() == b.clientContent.canonicalBytes())
    }

    @Test("expected_version never changes the fingerprint")
    func expectedVersionExcluded() throws {
        var m = Fixtures.event(.purchase)
        let without = try EventDecoder.decode(m, path: "")
        m["expected_version"] = 0
        let zero = try EventDecoder.decode(m, path: "")
        m["expected_version"] = 12
        let twelve = try EventDecoder.decode(m, path: "")
        #expect(without.fingerprint == zero.fingerprint)
        #expect(zero.fingerprint == twelve.fingerprint)
        #expect(twelve.expectedVersion == 12)
        #expect(twelve.clientContent.objectValue?["expected_version"] == nil)
    }

    @Test("client content holds exactly the client's fields")
    func clientContentKeys() throws {
        let e = try EventDecoder.decode(Fixtures.event(.purchase), path: "")
        let keys = try #require(e.clientContent.objectValue).keys.sorted()
        #expect(
            keys == [
                "data", "environment", "idempotency_key", "metadata", "occurred_at", "source", "subscriber_id", "type",
            ])
    }

    static let changes: [(String, [String: JSONValue])] = [
        ("subscriber_id", ["subscriber_id": "user-43"]),
        ("type", ["type": "renewal"]),  // the purchase's data is also a valid renewal
        ("occurred_at", ["occurred_at": "2026-03-01T10:00:00.000001Z"]),
        ("source", ["source": "apple"]),
        ("environment", ["environment": "sandbox"]),
        ("idempotency_key", ["idempotency_key": "k-2"]),
        ("metadata value", ["metadata": ["request_id": "req-2"]]),
        ("metadata absent", ["metadata": nil]),
        ("data: price", ["data": .object(Fixtures.data(.purchase).merging(["price_minor": 1000]) { $1 })]),
        ("data: commission spelling", ["data": .object(Fixtures.data(.purchase).merging(["commission_rate": "0.3"]) { $1 })]),
        (
            "data: entitlement order",
            [
                "data": .object(Fixtures.data(.purchase).merging(["entitlements": ["plus", "pro"]]) { $1 })
            ]
        ),
    ]

    @Test("different content gives a different fingerprint", arguments: changes)
    func differentContent(name: String, set: [String: JSONValue]) throws {
        var base = Fixtures.event(.purchase)
        base["data"] = .object(Fixtures.data(.purchase).merging(["entitlements": ["pro", "plus"]]) { $1 })
        var changed = base
        for (k, v) in set { changed[k] = v }
        let a = try EventDecoder.decode(base, path: "")
        let b = try EventDecoder.decode(changed, path: "")
        #expect(a.fingerprint != b.fingerprint, "\(name)")
    }

    @Test("the fingerprint is SHA-256 of the canonical client content")
    func pinnedVector() throws {
        let e = try EventDecoder.decode(Fixtures.event(.refundReversal), path: "")
        #expect(
            e.clientContent.canonicalString()
                == #"{"data":{"transaction_id":"t-1"},"environment":"production","idempotency_key":"k-1","metadata":{"request_id":"req-1"},"occurred_at":"2026-03-01T10:00:00Z","source":"web","subscriber_id":"user-42","type":"refund_reversal"}"#
        )
        #expect(Hex.encode(e.fingerprint) == "aeee36cf73a64df90efd96926bf698c93088b9b03cfcfd2bfdf19eea9989dc5e")
    }

    @Test("a fingerprint given to the initialiser is kept (events read back from storage)")
    func explicitFingerprint() {
        let stored = [UInt8](repeating: 0xAB, count: 32)
        let e = NewEvent(
            subscriberID: "s", type: .refundReversal, occurredAt: Timestamp(microseconds: 0), source: "web",
            environment: .production, idempotencyKey: "k", data: ["transaction_id": "t"], fingerprint: stored)
        #expect(e.fingerprint == stored)
        let computed = NewEvent(
            subscriberID: "s", type: .refundReversal, occurredAt: Timestamp(microseconds: 0), source: "web",
            environment: .production, idempotencyKey: "k", data: ["transaction_id": "t"])
        #expect(computed.fingerprint.count == 32)
        #expect(computed.fingerprint != stored)
        #expect(computed.metadata.isEmpty && computed.expectedVersion == nil)
    }

    @Test("the canonical data and metadata written for the fingerprint follow later changes, and are not part of equality")
    func canonicalContentFollowsChanges() throws {
        var e = try event(Self.reference)
        #expect(e.canonicalData == JSONValue.object(e.data).canonicalBytes())
        #expect(String(decoding: e.canonicalMetadata, as: UTF8.self) == #"{"request_id":"req-1","tags":["a","b"]}"#)
        let fingerprint = e.fingerprint
        let rebuilt = NewEvent(
            subscriberID: e.subscriberID, type: e.type, occurredAt: e.occurredAt, source: e.source, environment: e.environment,
            idempotencyKey: e.idempotencyKey, data: e.data, metadata: e.metadata, fingerprint: fingerprint)
        #expect(rebuilt == e, "an event built without writing its content equals the one that wrote it")
        e.data["product_id"] = .string("pro.yearly")
        #expect(String(decoding: e.canonicalData, as: UTF8.self).contains(#""product_id":"pro.yearly""#))
        e.metadata = ["note": "x"]
        #expect(String(decoding: e.canonicalMetadata, as: UTF8.self) == #"{"note":"x"}"#)
        #expect(e.fingerprint == fingerprint, "the fingerprint stays the client's")
    }
}
