import Foundation
import Hummingbird
import LedgerCore
import LedgerStore

/// Entitlement and window reads (readers): from the projection now, or as of an earlier point of the log.
struct SubscriberRoutes {
    let reader: ProjectionReader
    /// "Now" for entitlements without `at`.
    var clock: WallClock = .system
    /// Windows in one response; `next_after` pages on.
    static let maxWindowsPerPage = 1000

    func register(on group: RouterGroup<LedgerRequestContext>) {
        // Now: one indexed row or the cache. As of an earlier point: the whole stream is folded.
        group.get(
            "subscribers/:subscriber_id/entitlements",
            use: cancelledOnDisconnect(when: { $0.uri.queryParameters["as_of"] != nil }, entitlements))
        group.get("subscribers/:subscriber_id/windows", use: cancelledOnDisconnect(windows))
    }

    @Sendable func entitlements(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.readEntitlements)
        let subscriber = try SubscriberPath.id(context)
        let query = QueryParameters(request: request)
        let at = try query.timestamp("at") ?? clock.now()
        let asOf = try query.asOf()
        if asOf != nil { try context.require(.audit) }
        let minimum = try LedgerPosition.minimum(request)
        let (ledger, position) = try await reader.read(subscriberID: subscriber, asOf: asOf, atLeast: minimum)
        // The members in canonical order, written without a dictionary: this is the hottest read.
        var body = CanonicalObject(capacity: 320)
        if let asOf { body.member("as_of", asOf.json) }
        body.member("at", string: at.rfc3339)
        body.member("entitlements", objects: ledger.entitlements(at: at)) { $0.write(to: &$1) }
        if let merged = ledger.mergedInto { body.member("merged_into", string: merged) }
        body.member("subscriber_id", string: subscriber)
        return Response.json(canonical: body.finish()).ledgerPosition(position)
    }

    @Sendable func windows(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.readEntitlements)
        let subscriber = try SubscriberPath.id(context)
        let query = QueryParameters(request: request)
        let asOf = try query.asOf()
        // Paged: a subscriber's windows are unbounded, a response is not.
        let limit = Int(try query.int64("limit", default: Int64(Self.maxWindowsPerPage), range: 1...Int64(Self.maxWindowsPerPage)))
        let after = try query.int64("after", default: 0, range: 0...Int64(Int32.max))
        if asOf != nil { try context.require(.audit) }
        let minimum = try LedgerPosition.minimum(request)
        let (ledger, position) = try await reader.read(subscriberID: subscriber, asOf: asOf, atLeast: minimum)
        let all = ledger.windows
        let start = min(Int(after), all.count)
        let end = min(start + limit, all.count)
        var body: [String: JSONValue] = [
            "subscriber_id": .string(subscriber),
            "windows": .array(all[start..<end].map(\.json)),
        ]
        if end < all.count { body["next_after"] = .number(JSONNumber(Int64(end))) }
        if let merged = ledger.mergedInto { body["merged_into"] = .string(merged) }
        if let asOf { body["as_of"] = asOf.json }
        return Response.json(.object(body)).ledgerPosition(position)
    }
}

extension AsOf {
    var json: JSONValue {
        switch self {
        case .position(let p): .number(JSONNumber(p))
        case .recordedAt(let t): .string(t.rfc3339)
        }
    }
}

extension Timestamp {
    /// The system's time, for the store routes that have no clock injected yet (`WallClock`).
    static func now() -> Timestamp {
        WallClock.system.now()
    }
}

extension Window {
    var json: JSONValue {
        let cut = effectiveCut
        return .object([
            "entitlement": .string(entitlement),
            "start": .string(start.rfc3339),
            "end": end.map { .string($0.rfc3339) } ?? .null,
            "kind": .string(kind.rawValue),
            "product_id": productID.map(JSONValue.string) ?? .null,
            "transaction_id": transactionID.map(JSONValue.string) ?? .null,
            "source_event_id": .string(sourceEventID.lowercasedString),
            "environment": .string(environment.rawValue),
            "cut_at": cut.map { .string($0.at.rfc3339) } ?? .null,
            "cut_by": cut.map { .string($0.eventID.lowercasedString) } ?? .null,
            "cut_cause": cut.map { .string($0.cause.rawValue) } ?? .null,
        ])
    }
}
