import Foundation
import Hummingbird
import LedgerCore
import LedgerStore

/// Identity (docs/identity.md): who holds which purchase, support transfers, merges and transfer policies.
struct IdentityRoutes {
    let identity: IdentityStore
    let maxBodyBytes: Int

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.get("subscribers/:subscriber_id/purchases", use: purchases)
        group.post("subscribers/:subscriber_id/transfers", use: transfer)
        group.post("subscribers/:subscriber_id/merge", use: merge)
        group.put("subscribers/:subscriber_id/transfer-policy", use: setPolicy)
        group.get("subscribers/:subscriber_id/transfer-policy", use: policy)
    }

    @Sendable func purchases(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.readEntitlements)
        let subscriber = try SubscriberPath.id(context)
        let query = QueryParameters(request: request)
        let at = try query.timestamp("at") ?? Timestamp.now()
        let asOf = try query.asOf()
        let (owned, mergedInto) = try await Self.mapped { try await identity.purchases(subscriber, asOf: asOf, at: at) }
        var body: [String: JSONValue] = [
            "subscriber_id": .string(subscriber), "at": .string(at.rfc3339),
            "purchases": .array(
                owned.map { p, active in
                    var o: [String: JSONValue] = [
                        "store": .string(p.store), "purchase_id": .string(p.purchaseID), "since": .string(p.since.rfc3339),
                        "active": .bool(active),
                    ]
                    o["product_id"] = p.productID.map(JSONValue.string) ?? .null
                    return .object(o)
                }),
        ]
        if let asOf { body["as_of"] = asOf.json }
        if let mergedInto { body["merged_into"] = .string(mergedInto) }
        return Response.json(.object(body))
    }

    @Sendable func transfer(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.append)
        let subscriber = try SubscriberPath.id(context)
        var body = try await BodyFields(request, limit: maxBodyBytes)
        let store = try body.identifier("store")
        guard let purchase = try body.identifier("purchase_id") else { throw BodyFields.invalid("purchase_id", "is required") }
        guard let to = try body.string("to") else { throw BodyFields.invalid("to", "is required (the subscriber to move it to)") }
        guard Identifiers.isValidSubscriberID(to) else { throw BodyFields.invalid("to", Identifiers.subscriberIDRule) }
        let reasonText = try body.string("reason") ?? TransferReason.support.rawValue
        guard let reason = TransferReason(rawValue: reasonText), reason != .merge else {
            throw BodyFields.invalid("reason", "must be one of \"support\", \"restore\", \"login\", not \"\(reasonText)\"")
        }
        let occurredAt = try body.timestamp("occurred_at") ?? Timestamp.now()
        let key = try body.identifier("idempotency_key") ?? UUID().uuidString.lowercased()
        try body.rejectUnknown()
        let result = try await Self.mapped {
            try await identity.transfer(
                .init(from: subscriber, to: to, store: store, purchaseID: purchase, reason: reason, occurredAt: occurredAt, idempotencyKey: key))
        }
        return Self.appended(result)
    }

    @Sendable func merge(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.append)
        let subscriber = try SubscriberPath.id(context)
        var body = try await BodyFields(request, limit: maxBodyBytes)
        guard let into = try body.string("into") else { throw BodyFields.invalid("into", "is required (the subscriber to merge into)") }
        guard Identifiers.isValidSubscriberID(into) else { throw BodyFields.invalid("into", Identifiers.subscriberIDRule) }
        guard let key = try body.identifier("idempotency_key") else { throw BodyFields.invalid("idempotency_key", "is required") }
        let occurredAt = try body.timestamp("occurred_at") ?? Timestamp.now()
        try body.rejectUnknown()
        let result = try await Self.mapped { try await identity.merge(subscriber, into: into, idempotencyKey: key, occurredAt: occurredAt) }
        return Self.appended(result)
    }

    @Sendable func setPolicy(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let subscriber = try SubscriberPath.id(context)
        var body = try await BodyFields(request, limit: maxBodyBytes)
        let text = try body.string("policy")
        guard let text, let policy = TransferPolicy(rawValue: text) else {
            throw BodyFields.invalid("policy", "must be one of \"transfer\", \"transfer_if_no_active\", \"keep\"")
        }
        try body.rejectUnknown()
        try await identity.setPolicy(policy, for: subscriber)
        return Response.json(["subscriber_id": .string(subscriber), "policy": .string(policy.rawValue)])
    }

    @Sendable func policy(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let subscriber = try SubscriberPath.id(context)
        let policy = try await identity.policy(of: subscriber)
        return Response.json(["subscriber_id": .string(subscriber), "policy": .string(policy.rawValue)])
    }

    /// 201 with the events written (200 for a retried request: what was stored then).
    static func appended(_ result: AppendResult) -> Response {
        Response.json(["events": .array(result.events.map(\.json))], status: result.isReplay ? .ok : .created)
            .ledgerPosition(result.events.map(\.position).max() ?? 0)
    }

    /// Identity refusals as the contract's errors.
    static func mapped<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as IdentityError {
            throw APIError(error)
        }
    }
}

extension APIError {
    init(_ error: IdentityError) {
        switch error {
        case .purchaseNotOwned:
            self.init(.notFound, code: "not_found", message: error.description)
        case .subscriberMerged(_, let into):
            self.init(.conflict, code: "subscriber_merged", message: error.description)
            extra["merged_into"] = .string(into)
        case .purchaseOwned:
            self.init(.conflict, code: "purchase_owned", message: error.description)
        }
    }
}

/// A JSON object body read member by member: a wrong member is 422 `invalid_request` naming it, an unknown
/// one too.
struct BodyFields {
    var members: [String: JSONValue]
    var consumed: Set<String> = []

    init(_ request: Request, limit: Int) async throws {
        let body = try await RequestBody.collect(request, limit: limit)
        let value: JSONValue
        do {
            value = try JSONParser.parse(body.readableBytesView)
        } catch {
            throw APIError.invalidRequest("the body is not valid JSON: \(error)")
        }
        guard let object = value.objectValue else { throw Self.invalid("$", "must be a JSON object, not \(value.typeName)") }
        members = object
    }

    static func invalid(_ field: String, _ problem: String) -> APIError {
        APIError(.unprocessableContent, code: "invalid_request", message: "\(field) \(problem)", field: field)
    }

    mutating func string(_ name: String) throws -> String? {
        consumed.insert(name)
        guard let v = members[name], v != .null else { return nil }
        guard let s = v.stringValue else { throw Self.invalid(name, "must be a string, not \(v.typeName)") }
        return s
    }

    mutating func identifier(_ name: String) throws -> String? {
        guard let s = try string(name) else { return nil }
        if let problem = Identifiers.problem(s) { throw Self.invalid(name, problem) }
        return s
    }

    mutating func timestamp(_ name: String) throws -> Timestamp? {
        guard let s = try string(name) else { return nil }
        guard let t = try? Timestamp(rfc3339: s) else { throw Self.invalid(name, "must be an RFC 3339 time such as 2026-03-01T00:00:00Z") }
        return t
    }

    func rejectUnknown() throws {
        if let unknown = members.keys.filter({ !consumed.contains($0) }).sorted().first { throw Self.invalid(unknown, "is not a known field") }
    }
}
