import Foundation
import Hummingbird
import LedgerCore
import LedgerStore

/// Webhook endpoints (admin): register, list, edit, delete, rotate the secret, replay, read the deliveries
/// log. Delivery itself is `WebhookDeliveryService`'s (docs/webhooks.md).
struct WebhookRoutes {
    let store: WebhookStore
    let policy: WebhookDestinationPolicy
    let maxBodyBytes: Int

    static let maxDescriptionBytes = 1000
    static let maxEntitlements = 64

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.post("webhooks", use: create)
        group.get("webhooks", use: list)
        group.get("webhooks/:id", use: get)
        group.patch("webhooks/:id", use: update)
        group.delete("webhooks/:id", use: delete)
        group.post("webhooks/:id/rotate-secret", use: rotate)
        group.post("webhooks/:id/replay", use: replay)
        group.get("webhooks/:id/deliveries", use: deliveries)
    }

    @Sendable func create(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let body = try await object(request)
        let input = try Input.decode(body, allowed: ["url", "event_types", "entitlements", "description"], policy: policy)
        guard let url = input.url else { throw Self.invalid("url", "is required") }
        var generator = SystemRandomNumberGenerator()
        let secret = WebhookSecret.generate(using: &generator)
        let endpoint = try await mapped {
            try await store.create(
                url: url, description: input.description, eventTypes: input.eventTypes.flatMap { $0.isEmpty ? nil : $0 },
                entitlements: input.entitlements.flatMap { $0.isEmpty ? nil : $0 }, secret: secret)
        }
        context.logger.info("webhook endpoint created", metadata: ["webhooks.endpoint": "\(endpoint.id.lowercasedString)"])
        var json = endpoint.json
        json["secret"] = .string(secret.text)
        return .json(.object(json), status: .created)
    }

    @Sendable func list(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let endpoints = try await store.list()
        return .json(.object(["webhooks": .array(endpoints.map { .object($0.json) })]))
    }

    @Sendable func get(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let id = try Self.id(context)
        return .json(.object(try await mapped { try await store.get(id) }.json))
    }

    @Sendable func update(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let id = try Self.id(context)
        let body = try await object(request)
        let input = try Input.decode(body, allowed: ["url", "event_types", "entitlements", "description", "enabled"], policy: policy)
        let patch = WebhookEndpointPatch(
            url: input.url, description: input.description, eventTypes: input.eventTypes, entitlements: input.entitlements,
            enabled: input.enabled)
        let endpoint = try await mapped { try await store.update(id, patch) }
        context.logger.info(
            "webhook endpoint updated", metadata: ["webhooks.endpoint": "\(id.lowercasedString)", "webhooks.status": "\(endpoint.status.rawValue)"])
        return .json(.object(endpoint.json))
    }

    @Sendable func delete(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let id = try Self.id(context)
        guard try await store.delete(id) else { throw APIError.notFound(WebhookStoreError.notFound(id).description) }
        context.logger.info("webhook endpoint deleted", metadata: ["webhooks.endpoint": "\(id.lowercasedString)"])
        return Response(status: .noContent)
    }

    @Sendable func rotate(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let id = try Self.id(context)
        var generator = SystemRandomNumberGenerator()
        let secret = WebhookSecret.generate(using: &generator)
        let endpoint = try await mapped { try await store.rotateSecret(id, to: secret) }
        context.logger.info("webhook secret rotated", metadata: ["webhooks.endpoint": "\(id.lowercasedString)"])
        var json = endpoint.json
        json["secret"] = .string(secret.text)
        return .json(.object(json))
    }

    @Sendable func replay(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let id = try Self.id(context)
        let body = try await object(request)
        if let unknown = body.keys.sorted().first(where: { $0 != "from_position" }) {
            throw Self.invalid(unknown, "is not a member of a replay request (only from_position)")
        }
        guard let value = body["from_position"], value != .null else { throw Self.invalid("from_position", "is required") }
        guard let n = value.numberValue?.int64Value, (1...Limits.maxInteger).contains(n) else {
            throw Self.invalid("from_position", "must be an integer from 1 to \(Limits.maxInteger)")
        }
        let endpoint = try await mapped { try await store.replay(id, from: n) }
        context.logger.info(
            "webhook replay", metadata: ["webhooks.endpoint": "\(id.lowercasedString)", "webhooks.from_position": "\(n)"])
        return .json(.object(endpoint.json))
    }

    @Sendable func deliveries(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let id = try Self.id(context)
        let query = QueryParameters(request: request)
        let limit = try query.int64("limit", default: 100, range: 1...1000)
        let before = request.uri.queryParameters["before"] != nil ? try query.int64("before", default: 0, range: 1...Int64.max) : nil
        let rows = try await mapped { try await store.deliveries(id, before: before, limit: Int(limit)) }
        var body: [String: JSONValue] = ["deliveries": .array(rows.map(\.json))]
        if rows.count == Int(limit), let last = rows.last { body["next_before"] = .number(JSONNumber(last.id)) }
        return .json(.object(body))
    }

    // MARK: - Input

    /// The members of a create or PATCH body; nil for absent or null.
    struct Input {
        var url: String?
        var description: String?
        var eventTypes: [String]?
        var entitlements: [String]?
        var enabled: Bool?

        static func decode(_ body: [String: JSONValue], allowed: Set<String>, policy: WebhookDestinationPolicy) throws -> Input {
            if let unknown = body.keys.sorted().first(where: { !allowed.contains($0) }) {
                throw invalid(unknown, "is not a member of a webhook endpoint (\(allowed.sorted().joined(separator: ", ")))")
            }
            var input = Input()
            if let v = present(body["url"]) {
                guard let url = v.stringValue else { throw invalid("url", "must be a string") }
                if let problem = policy.problem(url) { throw invalid("url", problem) }
                input.url = url
            }
            if let v = present(body["description"]) {
                guard let d = v.stringValue else { throw invalid("description", "must be a string") }
                guard d.utf8.count <= maxDescriptionBytes else {
                    throw invalid("description", "must be at most \(maxDescriptionBytes) bytes of UTF-8")
                }
                input.description = d
            }
            if let v = present(body["event_types"]) {
                guard let items = v.arrayValue else { throw invalid("event_types", "must be an array of event types") }
                guard items.count <= EventType.allCases.count else {
                    throw invalid("event_types", "must have at most \(EventType.allCases.count) items")
                }
                var types: [String] = []
                for (i, item) in items.enumerated() {
                    guard let t = item.stringValue.flatMap(EventType.init(rawValue:)) else {
                        throw invalid(
                            "event_types[\(i)]", "must be one of " + EventType.allCases.map(\.rawValue).joined(separator: ", "))
                    }
                    if !types.contains(t.rawValue) { types.append(t.rawValue) }
                }
                input.eventTypes = types
            }
            if let v = present(body["entitlements"]) {
                guard let items = v.arrayValue else { throw invalid("entitlements", "must be an array of entitlement names") }
                guard items.count <= maxEntitlements else { throw invalid("entitlements", "must have at most \(maxEntitlements) items") }
                var names: [String] = []
                for (i, item) in items.enumerated() {
                    guard let name = item.stringValue else { throw invalid("entitlements[\(i)]", "must be a string") }
                    if let problem = Identifiers.problem(name) { throw invalid("entitlements[\(i)]", problem) }
                    if !names.contains(name) { names.append(name) }
                }
                input.entitlements = names
            }
            if let v = present(body["enabled"]) {
                guard let b = v.boolValue else { throw invalid("enabled", "must be true or false") }
                input.enabled = b
            }
            return input
        }

        /// JSON null means the same as leaving the member out.
        private static func present(_ v: JSONValue?) -> JSONValue? {
            guard let v, v != .null else { return nil }
            return v
        }
    }

    /// A well-formed body with a wrong member: 422 `invalid_request` naming it.
    static func invalid(_ field: String, _ problem: String) -> APIError { BodyFields.invalid(field, problem) }

    /// The body as a JSON object (400 for malformed JSON, 422 for another JSON value).
    private func object(_ request: Request) async throws -> [String: JSONValue] {
        try await BodyFields(request, limit: maxBodyBytes).members
    }

    /// The `{id}` path parameter: a UUID (400 otherwise).
    static func id(_ context: LedgerRequestContext) throws -> UUID {
        let raw = context.parameters.get("id") ?? ""
        guard raw.utf8.count == 36, let id = UUID(uuidString: raw) else {
            throw APIError.invalidRequest("path parameter 'id' must be a webhook endpoint id (a UUID)")
        }
        return id
    }

    /// Runs a store call, answering its refusals as the contract's errors.
    private func mapped<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as WebhookStoreError {
            switch error {
            case .notFound: throw APIError.notFound(error.description)
            case .tooManyEndpoints: throw APIError(.unprocessableContent, code: "invalid_request", message: error.description)
            case .replayBeyondHead: throw Self.invalid("from_position", error.description)
            }
        }
    }
}

extension WebhookEndpoint {
    /// As the API shows an endpoint: never its secrets.
    var json: [String: JSONValue] {
        [
            "id": .string(id.lowercasedString),
            "url": .string(url),
            "description": description.map(JSONValue.string) ?? .null,
            "event_types": eventTypes.map { .array($0.map(JSONValue.string)) } ?? .null,
            "entitlements": entitlements.map { .array($0.map(JSONValue.string)) } ?? .null,
            "enabled": .bool(status != .disabled),
            "status": .string(status.rawValue),
            "status_reason": statusReason.map(JSONValue.string) ?? .null,
            "delivered_through": .number(JSONNumber(deliveredThrough)),
            "lag_positions": .number(JSONNumber(lagPositions)),
            "lag_seconds": .number(JSONNumber(jsonText: Substring(String(format: "%.3f", max(0, lagSeconds)))) ?? JSONNumber(0)),
            "failed_attempts": .number(JSONNumber(Int64(failedAttempts))),
            "held_messages": .number(JSONNumber(Int64(heldMessages))),
            "failing_since": failingSince.map { .string($0.rfc3339) } ?? .null,
            "next_attempt_at": nextAttemptAt.map { .string($0.rfc3339) } ?? .null,
            "last_error": lastError.map(JSONValue.string) ?? .null,
            "previous_secret_expires_at": previousSecretUntil.map { .string($0.rfc3339) } ?? .null,
            "created_at": .string(createdAt.rfc3339),
            "updated_at": .string(updatedAt.rfc3339),
        ]
    }
}

extension WebhookDelivery {
    /// `message_id` is the `webhook-id` header (`msg_…`, one per message); `webhook_id` was its first name, which
    /// read as the endpoint's id, and stays with the same value so that clients reading it do not break.
    var json: JSONValue {
        .object([
            "id": .number(JSONNumber(id)),
            "position": .number(JSONNumber(position)),
            "event_id": .string(eventID.lowercasedString),
            "message_id": .string(webhookID),
            "webhook_id": .string(webhookID),
            "attempt": .number(JSONNumber(Int64(attempt))),
            "outcome": .string(outcome.rawValue),
            "http_status": httpStatus.map { .number(JSONNumber(Int64($0))) } ?? .null,
            "latency_ms": .number(JSONNumber(Int64(latencyMilliseconds))),
            "error": error.map(JSONValue.string) ?? .null,
            "next_retry_at": nextRetryAt.map { .string($0.rfc3339) } ?? .null,
            "attempted_at": .string(attemptedAt.rfc3339),
        ])
    }
}
