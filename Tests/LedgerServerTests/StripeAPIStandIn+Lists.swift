import Foundation
import Hummingbird
import LedgerCore
import NIOCore
import StripeStore

/// Stripe's list APIs on the stand-in, as Stripe documents them: `GET /v1/<collection>` with `limit` (1–100,
/// else 400), `starting_after` (an object id of the list, else 404 `resource_missing`), `created[gte]`, and
/// for subscriptions `status` (without `all`, canceled subscriptions are left out), `payment_intent` and `charge` filters; newest first; the bearer
/// key checked (401). A list object answers `{object: "list", data, has_more, url}`.
extension StripeAPIStandIn {
    struct Lists {
        var objects: [String: [[String: JSONValue]]] = [:]
        /// Objects a page holds at most (Stripe: the request's `limit`); smaller, to page with few objects.
        var pageSize = 100
        /// Requests of a collection still to answer 429 (Stripe's rate limit).
        var throttled: [String: Int] = [:]
        /// Each list request: its collection and decoded query items.
        var requests: [(collection: String, query: [String: String])] = []
    }

    static let listed = ["customers", "subscriptions", "invoices", "charges", "refunds", "disputes"]

    func setList(_ collection: String, _ objects: [[String: JSONValue]]) { lists.withLock { $0.objects[collection] = objects } }

    func registerLists(on router: Router<BasicRequestContext>) {
        for collection in Self.listed {
            router.get("v1/\(collection)") { request, _ -> Response in
                var query: [String: String] = [:]
                for item in (request.uri.query ?? "").split(separator: "&") {
                    let kv = item.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? String($0) }
                    query[kv[0]] = kv.count > 1 ? kv[1] : ""
                }
                guard request.headers[.authorization] == "Bearer \(self.key)" else {
                    return Self.error(.unauthorized, #"{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}"#)
                }
                let (throttle, all, size) = self.lists.withLock { l -> (Bool, [[String: JSONValue]], Int) in
                    l.requests.append((collection, query))
                    if let n = l.throttled[collection], n > 0 {
                        l.throttled[collection] = n - 1
                        return (true, [], 0)
                    }
                    return (false, l.objects[collection] ?? [], l.pageSize)
                }
                if throttle {
                    return Self.error(
                        .tooManyRequests, #"{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}"#)
                }
                guard let limit = Int(query["limit"] ?? "10"), (1...100).contains(limit) else {
                    return Self.error(.badRequest, #"{"error":{"type":"invalid_request_error","param":"limit"}}"#)
                }
                func created(_ o: [String: JSONValue]) -> Int64 { o["created"]?.numberValue?.int64Value ?? 0 }
                var list = all.sorted { (created($0), $0["id"]?.stringValue ?? "") > (created($1), $1["id"]?.stringValue ?? "") }
                if collection == "subscriptions", query["status"] != "all" { list.removeAll { $0["status"] == "canceled" } }
                if let gte = query["created[gte]"].flatMap({ Int64($0) }) { list.removeAll { created($0) < gte } }
                // A payment's charges, a charge's refunds, a subscription's invoices.
                for filter in ["payment_intent", "charge", "subscription"] {
                    if let id = query[filter] { list.removeAll { $0[filter]?.stringValue != id } }
                }
                if let after = query["starting_after"] {
                    guard let i = list.firstIndex(where: { $0["id"]?.stringValue == after }) else {
                        return Self.error(
                            .notFound, #"{"error":{"type":"invalid_request_error","code":"resource_missing","param":"starting_after"}}"#)
                    }
                    list = Array(list[(i + 1)...])
                }
                let n = min(limit, size)
                let body: JSONValue = [
                    "object": "list", "url": .string("/v1/\(collection)"), "has_more": .bool(list.count > n),
                    "data": .array(list.prefix(n).map { .object($0) }),
                ]
                return Response(
                    status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body.canonicalBytes())))
            }
        }
    }

    static func error(_ status: HTTPResponse.Status, _ body: String) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}
