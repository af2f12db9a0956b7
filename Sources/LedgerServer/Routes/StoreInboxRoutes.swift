import Foundation
import Hummingbird
import LedgerCore
import LedgerStore

/// `GET /v1/stores/{store}/inbox` (admin): the store messages the inbox keeps and why each waits — a Stripe
/// customer that names no subscriber, a Google product missing from the catalog — which were otherwise seen
/// only in `store_inbox`. Reasons and a one-line summary, never the raw payload.
struct StoreInboxRoutes {
    let inbox: StoreInbox

    static let reasonsShown = 5

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.get("stores/:store/inbox", use: list)
    }

    @Sendable func list(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let store = context.parameters.get("store") ?? ""
        guard StoreInbox.stores.contains(store) else {
            throw APIError.invalidRequest(
                "path parameter 'store' must be one of \(StoreInbox.stores.joined(separator: ", ")), not '\(store.prefix(100))'")
        }
        let query = QueryParameters(request: request)
        let status = try Self.status(request)
        let limit = Int(try query.int64("limit", default: 100, range: 1...1000))
        let after = try Self.cursor(request)
        let entries = try await inbox.list(
            store: store, statuses: status.map { [$0] } ?? StoreInbox.waiting, after: after, limit: limit)
        let counts = try await inbox.waitingCounts()[store] ?? [:]
        let reasons = try await inbox.topReasons(store: store, limit: Self.reasonsShown)
        var waiting: [String: JSONValue] = [:]
        for s in StoreInbox.waiting { waiting[s.rawValue] = .number(JSONNumber(Int64(counts[s] ?? 0))) }
        waiting["total"] = .number(JSONNumber(Int64(counts.values.reduce(0, +))))
        var body: [String: JSONValue] = [
            "store": .string(store),
            "status": status.map { .string($0.rawValue) } ?? .null,
            "messages": .array(entries.map(\.json)),
            "waiting": .object(waiting),
            "top_reasons": .array(
                reasons.map {
                    .object([
                        "status": .string($0.status.rawValue), "reason": .string($0.reason), "messages": .number(JSONNumber(Int64($0.messages))),
                    ])
                }),
        ]
        if entries.count == limit, let last = entries.last {
            body["next_after"] = .string(Self.cursorText(StoreInbox.Cursor(receivedAt: last.receivedAt, messageID: last.messageID)))
        }
        return .json(.object(body))
    }

    /// `status`: one of the inbox's statuses; absent, the waiting ones (received, pending, failed).
    static func status(_ request: Request) throws -> StoreInbox.Status? {
        guard let text = request.uri.queryParameters["status"] else { return nil }
        guard let status = StoreInbox.Status(rawValue: String(text)) else {
            throw APIError.invalidRequest(
                "query parameter 'status' must be one of \(StoreInbox.Status.allCases.map(\.rawValue).joined(separator: ", ")), not '\(text.prefix(100))'"
            )
        }
        return status
    }

    /// A page's `next_after`: the last message's receipt time (microseconds) and its id (base64url), opaque to clients.
    static func cursorText(_ c: StoreInbox.Cursor) -> String {
        let id = Data(c.messageID.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        return "\(c.receivedAt.microseconds).\(id)"
    }

    static func cursor(_ request: Request) throws -> StoreInbox.Cursor? {
        guard let text = request.uri.queryParameters["after"] else { return nil }
        let invalid = APIError.invalidRequest("query parameter 'after' must be a page's next_after, not '\(text.prefix(100))'")
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        // Exactly what `cursorText` writes (digits, then base64url without padding), nothing a lenient parser would also take.
        func isBase64URL(_ b: UInt8) -> Bool {
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == UInt8(ascii: "-") || b == UInt8(ascii: "_")
        }
        guard parts.count == 2, !parts[0].isEmpty, parts[0].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
            let micros = Int64(parts[0]), micros <= Timestamp.maximum.microseconds,
            (1...400).contains(parts[1].utf8.count), parts[1].utf8.allSatisfy(isBase64URL)
        else { throw invalid }
        var b64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        b64 += String(repeating: "=", count: (4 - b64.utf8.count % 4) % 4)
        guard let data = Data(base64Encoded: b64), let id = String(data: data, encoding: .utf8), !id.isEmpty else { throw invalid }
        return StoreInbox.Cursor(receivedAt: Timestamp(microseconds: micros), messageID: id)
    }
}

extension StoreInbox.Entry {
    var json: JSONValue {
        .object([
            "store": .string(store),
            "message_id": .string(messageID),
            "kind": .string(kind),
            "subtype": subtype.map(JSONValue.string) ?? .null,
            "environment": .string(environment),
            "account_id": accountID.map(JSONValue.string) ?? .null,
            "subscriber_id": subscriberID.map(JSONValue.string) ?? .null,
            "status": .string(status.rawValue),
            "reason": reason.map(JSONValue.string) ?? .null,
            "attempts": .number(JSONNumber(Int64(attempts))),
            "next_attempt_at": nextAttemptAt.map { .string($0.rfc3339) } ?? .null,
            "received_at": .string(receivedAt.rfc3339),
            "updated_at": .string(updatedAt.rfc3339),
            "summary": summary.map(JSONValue.string) ?? .null,
        ])
    }
}
