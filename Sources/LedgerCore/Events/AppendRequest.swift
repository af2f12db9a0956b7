/// The body of `POST /v1/events`: one event, or `{"events": [...]}` appended all or nothing.
public struct AppendRequest: Sendable {
    public static let maxBatchSize = 1000
    /// Entitlements all the events of one request may name together (docs/limits.md): the append writes
    /// projection rows and report rollup cells per event and entitlement under the append lock, so this
    /// bounds how long one request can make other writers wait.
    public static let maxEntitlementsPerRequest = 8192

    public var events: [NewEvent]
    public var isBatch: Bool

    /// Why a body could not be read as an append request.
    public enum DecodeError: Error, Sendable, Equatable {
        /// Not JSON at all (400 `invalid_request`).
        case malformed(JSONParseError)
        /// JSON, but not a valid event (422 `invalid_event`).
        case invalid(EventValidationError)
    }

    /// Decodes a body. With `validateData: false` only the envelopes are checked, so that the catalog can
    /// fill in what events leave out before `validateData()` checks every payload.
    public static func decode(_ body: some Collection<UInt8>, validateData: Bool = true) throws(DecodeError) -> AppendRequest {
        let value: JSONValue
        do {
            value = try JSONParser.parse(body)
        } catch {
            throw .malformed(error)
        }
        do {
            return try decode(value, validateData: validateData)
        } catch {
            throw .invalid(error)
        }
    }

    /// The JSON path of event `i` in this request (`events[i]` in a batch, the root otherwise).
    public func path(_ i: Int) -> String { isBatch ? "events[\(i)]" : "" }

    /// Checks every event's `data` against its type (after any catalog fill-in).
    public func validateData() throws(EventValidationError) {
        try Self.checkEntitlements(events)
        for (i, e) in events.enumerated() {
            let p = path(i)
            try EventDataValidator.validate(type: e.type, data: e.data, occurredAt: e.occurredAt, path: p.isEmpty ? "data" : "\(p).data")
        }
    }

    /// Refuses a request whose events name more than `maxEntitlementsPerRequest` entitlements together
    /// (counted after the catalog filled them in).
    public static func checkEntitlements(_ events: [NewEvent]) throws(EventValidationError) {
        var named = 0
        for e in events {
            if case .array(let list)? = e.data["entitlements"] { named += list.count }
        }
        guard named <= maxEntitlementsPerRequest else {
            throw EventValidationError(
                field: "events",
                reason: "name \(named) entitlements together; a request may name at most \(maxEntitlementsPerRequest) (split the batch)")
        }
    }

    public static func decode(_ value: JSONValue, validateData: Bool = true) throws(EventValidationError) -> AppendRequest {
        guard case .object(let top) = value else {
            throw EventValidationError(field: "$", reason: "must be an event object or {\"events\": [...]}, not \(value.typeName)")
        }
        guard let batch = top["events"] else {
            return AppendRequest(events: [try EventDecoder.decode(top, path: "", validateData: validateData)], isBatch: false)
        }
        guard top.count == 1 else {
            let other = top.keys.filter { $0 != "events" }.sorted()[0]
            throw EventValidationError(field: other, reason: "is not allowed beside \"events\" in a batch")
        }
        guard case .array(let items) = batch else {
            throw EventValidationError(field: "events", reason: "must be an array, not \(batch.typeName)")
        }
        guard !items.isEmpty, items.count <= maxBatchSize else {
            throw EventValidationError(field: "events", reason: "must hold 1 to \(maxBatchSize) events, not \(items.count)")
        }
        var events: [NewEvent] = []
        events.reserveCapacity(items.count)
        var keys: [String: Int] = [:]
        for (i, item) in items.enumerated() {
            let path = "events[\(i)]"
            guard case .object(let members) = item else {
                throw EventValidationError(field: path, reason: "must be an event object, not \(item.typeName)")
            }
            let event = try EventDecoder.decode(members, path: path, validateData: validateData)
            let key = "\(event.source)\u{0}\(event.idempotencyKey)"
            if let first = keys[key] {
                throw EventValidationError(
                    field: "\(path).idempotency_key",
                    reason: "repeats the idempotency key of events[\(first)] for source \"\(event.source)\"")
            }
            keys[key] = i
            events.append(event)
        }
        return AppendRequest(events: events, isBatch: true)
    }
}

/// Turns one JSON event object into a validated `NewEvent`.
public enum EventDecoder {
    public static func decode(
        _ members: [String: JSONValue], path: String, validateData: Bool = true
    ) throws(EventValidationError) -> NewEvent {
        var r = FieldReader(path: path, members: members)
        let subscriberID = try r.requiredString("subscriber_id")
        guard Identifiers.isValidSubscriberID(subscriberID) else {
            throw r.fail("subscriber_id", Identifiers.subscriberIDRule)
        }
        guard let type = try r.oneOf("type", EventType.self) else { throw r.fail("type", "is required") }
        let occurredAt = try r.requiredTimestamp("occurred_at")
        let source = try r.requiredString("source")
        guard Identifiers.isValidSource(source) else {
            throw r.fail("source", "must be 1–64 characters of a–z, 0–9 and _ . - (e.g. \"apple\", \"web\")")
        }
        guard let environment = try r.oneOf("environment", LedgerEnvironment.self) else {
            throw r.fail("environment", "is required (\"production\" or \"sandbox\")")
        }
        let key = try r.requiredIdentifier("idempotency_key", maxBytes: Identifiers.maxIdempotencyKeyLength)
        guard let data = try r.object("data") else { throw r.fail("data", "is required (an object)") }
        let metadata = try r.object("metadata") ?? [:]
        try Limits.checkMetadata(metadata, field: r.field("metadata"))
        let expected = try r.integer("expected_version", minimum: 0)
        for name in ["event_id", "version", "position", "recorded_at", "hash", "prev_hash"] where r.has(name) {
            throw r.fail(name, "is assigned by the ledger and cannot be sent")
        }
        try r.rejectUnknown()
        if validateData {
            try EventDataValidator.validate(type: type, data: data, occurredAt: occurredAt, path: r.field("data"))
        }
        return NewEvent(
            subscriberID: subscriberID, type: type, occurredAt: occurredAt, source: source, environment: environment,
            idempotencyKey: key, data: data, metadata: metadata, expectedVersion: expected)
    }
}
