import LedgerCore
import Testing

@Suite("Append requests: one event or a batch")
struct AppendRequestTests {
    private func batch(_ items: [JSONValue]) -> JSONValue { ["events": .array(items)] }

    private func decodeBytes(_ text: String) -> Result<AppendRequest, AppendRequest.DecodeError> {
        decodeBytes(Array(text.utf8))
    }

    private func decodeBytes(_ bytes: [UInt8]) -> Result<AppendRequest, AppendRequest.DecodeError> {
        do {
            return .success(try AppendRequest.decode(bytes))
        } catch {
            return .failure(error)
        }
    }

    private func decodeFailure(_ text: String) -> AppendRequest.DecodeError? {
        if case .failure(let error) = decodeBytes(text) { return error }
        return nil
    }

    @Test("a single event object is a one-event, non-batch request")
    func single() throws {
        let request = try AppendRequest.decode(JSONValue.object(Fixtures.event(.purchase)))
        #expect(!request.isBatch)
        #expect(request.events.count == 1)
        #expect(request.events[0].type == .purchase)
    }

    @Test("a batch keeps its events in order")
    func batchOrder() throws {
        let items: [JSONValue] = [
            .object(Fixtures.event(.purchase, key: "a")), .object(Fixtures.event(.autoRenewChanged, key: "b")),
            .object(Fixtures.event(.refund, key: "c")),
        ]
        let request = try AppendRequest.decode(batch(items))
        #expect(request.isBatch)
        #expect(request.events.map(\.idempotencyKey) == ["a", "b", "c"])
        #expect(request.events.map(\.type) == [.purchase, .autoRenewChanged, .refund])
    }

    @Test("a batch of one is still a batch")
    func batchOfOne() throws {
        let request = try AppendRequest.decode(batch([.object(Fixtures.event(.credit))]))
        #expect(request.isBatch)
        #expect(request.events.count == 1)
    }

    @Test("an empty batch is refused")
    func emptyBatch() throws {
        let error = try #require(Fixtures.requestError(["events": []]))
        #expect(error.field == "events")
        #expect(error.reason.contains("1 to 1000"))
        #expect(error.reason.contains("not 0"))
    }

    @Test("1000 events are accepted, 1001 refused")
    func batchLimit() throws {
        #expect(AppendRequest.maxBatchSize == 1000)
        let items = (0..<1001).map { JSONValue.object(Fixtures.event(.refundReversal, key: "k-\($0)")) }
        let full = try AppendRequest.decode(batch(Array(items.prefix(1000))))
        #expect(full.events.count == 1000)
        #expect(full.events.last?.idempotencyKey == "k-999")

        let error = try #require(Fixtures.requestError(batch(items)))
        #expect(error.field == "events")
        #expect(error.reason.contains("not 1001"))
    }

    @Test("a repeated idempotency key within a batch names both events")
    func duplicateKey() throws {
        let items: [JSONValue] = [
            .object(Fixtures.event(.purchase, key: "a")), .object(Fixtures.event(.refundReversal, key: "b")),
            .object(Fixtures.event(.refundReversal, key: "a")),
        ]
        let error = try #require(Fixtures.requestError(batch(items)))
        #expect(error.field == "events[2].idempotency_key")
        #expect(error.reason.contains("events[0]"))
        #expect(error.reason.contains(#""web""#))
    }

    @Test("the same key from different sources is not a repeat; keys are case-sensitive")
    func keyScopedBySource() throws {
        let items: [JSONValue] = [
            .object(Fixtures.event(.refundReversal, key: "a", source: "web")),
            .object(Fixtures.event(.refundReversal, key: "a", source: "apple")),
            .object(Fixtures.event(.refundReversal, key: "A", source: "web")),
            .object(Fixtures.event(.refundReversal, key: "a", source: "web", subscriber: "someone-else")),
        ]
        let error = try #require(Fixtures.requestError(batch(items)))
        // Idempotency keys are unique per source, whatever the subscriber.
        #expect(error.field == "events[3].idempotency_key")
        #expect(error.reason.contains("events[0]"))
        #expect(try AppendRequest.decode(batch(Array(items.prefix(3)))).events.count == 3)
    }

    @Test("an invalid event in a batch is named by its index")
    func invalidItemPath() throws {
        let items: [JSONValue] = [
            .object(Fixtures.event(.purchase, key: "a")), .object(Fixtures.event(.purchase, key: "b")),
            .object(Fixtures.event(.purchase, settingData: ["currency": "usd"]).merging(["idempotency_key": "c"]) { $1 }),
        ]
        let error = try #require(Fixtures.requestError(batch(items)))
        #expect(error.field == "events[2].data.currency")
        #expect(error.reason.contains("ISO 4217"))

        var envelope = Fixtures.event(.purchase, key: "z")
        envelope["version"] = 2
        let envelopeError = try #require(Fixtures.requestError(batch([.object(envelope)])))
        #expect(envelopeError.field == "events[0].version")
    }

    @Test(
        "batch items must be objects",
        arguments: [
            (JSONValue.number(JSONNumber(42)), "number"), (.null, "null"), (.array([]), "array"), (.string("{}"), "string"),
            (.bool(true), "boolean"),
        ])
    func nonObjectItem(item: JSONValue, typeName: String) throws {
        let error = try #require(Fixtures.requestError(batch([.object(Fixtures.event(.purchase)), item])))
        #expect(error.field == "events[1]")
        #expect(error.reason == "must be an event object, not \(typeName)")
    }

    @Test("nothing may sit beside \"events\"")
    func extraKey() throws {
        let error = try #require(Fixtures.requestError(["events": [.object(Fixtures.event(.purchase))], "dry_run": true]))
        #expect(error.field == "dry_run")
        #expect(error.reason.contains("beside"))
        // An event's own fields beside "events" are refused too, not read as a single event.
        let mixed = try #require(Fixtures.requestError(.object(Fixtures.event(.purchase).merging(["events": []]) { $1 })))
        #expect(mixed.field == "data")
    }

    @Test(
        "\"events\" must be an array",
        arguments: [
            (JSONValue.null, "null"), (.object([:]), "object"), (.string("[]"), "string"), (.number(JSONNumber(1)), "number"),
        ])
    func eventsNotArray(value: JSONValue, typeName: String) throws {
        let error = try #require(Fixtures.requestError(["events": value]))
        #expect(error.field == "events")
        #expect(error.reason == "must be an array, not \(typeName)")
    }

    @Test(
        "the body must be an object",
        arguments: [
            (JSONValue.array([]), "array"), (.string("x"), "string"), (.null, "null"), (.number(JSONNumber(1)), "number"),
        ])
    func topLevelNotObject(value: JSONValue, typeName: String) throws {
        let error = try #require(Fixtures.requestError(value))
        #expect(error.field == "$")
        #expect(error.reason.contains("not \(typeName)"))
    }

    @Test("bytes: valid events decode")
    func bytesValid() throws {
        let text = #"{"events": [\#(JSONValue.object(Fixtures.event(.purchase)).canonicalString())]}"#
        let request = try AppendRequest.decode(Array(text.utf8))
        #expect(request.isBatch && request.events.count == 1)
    }

    @Test(
        "bytes: text that is not JSON is malformed, with the parser's reason",
        arguments: [
            ("", "unexpected end of input"),
            ("{", "expected a string key"),
            (#"{"events": [}"#, "unexpected character"),
            (#"{"subscriber_id": "a", "subscriber_id": "b"}"#, #"duplicate key "subscriber_id""#),
            (#"{"data": {"price_minor": 1e100000}}"#, "number"),
            (#"{"metadata": "\u0000"}"#, "NUL"),
            ("{} trailing", "unexpected text after"),
            ("[1,]", "unexpected character"),
        ])
    func bytesMalformed(text: String, reason: String) throws {
        guard case .failure(.malformed(let error)) = decodeBytes(text) else {
            Issue.record("not .malformed: \(decodeBytes(text))")
            return
        }
        #expect(error.reason.contains(reason), "\(error)")
    }

    @Test("bytes: ill-formed UTF-8 is malformed")
    func bytesInvalidUTF8() throws {
        let bytes = Array(#"{"subscriber_id": ""#.utf8) + [0xED, 0xA0, 0x80] + Array(#""}"#.utf8)
        guard case .failure(.malformed(let error)) = decodeBytes(bytes) else {
            Issue.record("not .malformed")
            return
        }
        #expect(error.reason.contains("UTF-8"))
    }

    @Test("bytes: JSON that is not a valid event is invalid, naming the field")
    func bytesInvalid() throws {
        #expect(decodeFailure("{}") == .invalid(EventValidationError(field: "subscriber_id", reason: "is required")))
        #expect(
            decodeFailure("[]")
                == .invalid(
                    EventValidationError(
                        field: "$", reason: #"must be an event object or {"events": [...]}, not array"#)))
        guard case .failure(.invalid(let error)) = decodeBytes(#"{"events": []}"#) else {
            Issue.record("not .invalid")
            return
        }
        #expect(error.field == "events")

        var members = Fixtures.event(.purchase)
        members["data"] = .object(Fixtures.data(.purchase).merging(["price_minor": -5]) { $1 })
        let text = JSONValue.object(members).canonicalString()
        guard case .failure(.invalid(let priceError)) = decodeBytes(text) else {
            Issue.record("not .invalid")
            return
        }
        #expect(priceError.field == "data.price_minor")
    }

    @Test("bytes: deep nesting in metadata is malformed, not a crash")
    func bytesDeep() throws {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        var text = JSONValue.object(Fixtures.event(.purchase)).canonicalString()
        text.removeLast()
        text += #","extra":\#(deep)}"#
        guard case .failure(.malformed(let error)) = decodeBytes(text) else {
            Issue.record("not .malformed")
            return
        }
        #expect(error.reason.contains("nesting"))
    }

    @Test("validateData: false checks only envelopes; validateData() then names the payload's field by its path")
    func deferredDataValidation() throws {
        var broken = Fixtures.event(.purchase, settingData: [:], removingData: ["price_minor"])
        broken["idempotency_key"] = "b"
        let items: [JSONValue] = [.object(Fixtures.event(.purchase, key: "a")), .object(broken)]
        let text = JSONValue.object(["events": .array(items)]).canonicalString()

        #expect(
            decodeFailure(text)
                == .invalid(
                    EventValidationError(
                        field: "events[1].data.price_minor", reason: "is required (integer minor units, e.g. 999)")))

        let lenient = try AppendRequest.decode(Array(text.utf8), validateData: false)
        #expect(lenient.events.count == 2)
        #expect(lenient.path(0) == "events[0]" && lenient.path(1) == "events[1]")
        do {
            try lenient.validateData()
            Issue.record("validateData() accepted a purchase without a price")
        } catch {
            #expect(error.field == "events[1].data.price_minor")
        }

        // Envelope errors are still found without data validation.
        var badEnvelope = Fixtures.event(.purchase)
        badEnvelope["source"] = "Web"
        #expect(throws: EventValidationError.self) {
            try AppendRequest.decode(.object(badEnvelope), validateData: false)
        }

        let single = try AppendRequest.decode(.object(Fixtures.event(.purchase, settingData: ["currency": "usd"])), validateData: false)
        #expect(single.path(0) == "")
        do {
            try single.validateData()
            Issue.record("validateData() accepted a lower-case currency")
        } catch {
            #expect(error.field == "data.currency")
        }
        try AppendRequest.decode(.object(Fixtures.event(.purchase)), validateData: false).validateData()
    }
}
