import AsyncHTTPClient
import Foundation
import LedgerCore
import NIOCore
import StoreAdapters

/// Stripe's list APIs (`GET /v1/<collection>?limit=100&starting_after=…`), for `subledger stripe backfill`.
extension StripeAPIClient {
    /// One page of a list: its objects, newest first, and whether more follow.
    public struct Page: Sendable {
        public var objects: [[String: JSONValue]]
        public var hasMore: Bool
    }

    /// Objects a page asks for: Stripe's maximum.
    public static let pageSize = 100

    /// The API version the backfill asks Stripe to render objects in (`Stripe-Version`): the last one whose
    /// invoices name their payment intent and charge, so that refunds and disputes find their invoice without
    /// `invoice_payment` events; the mapper reads this shape as it reads webhooks of any known version.
    public static let backfillAPIVersion = "2025-02-24.acacia"

    /// `GET /v1/<collection>` with `query`, after `startingAfter` (the last id of the previous page). 429 and
    /// 5xx are retried with backoff (`Retry-After` when Stripe sends one, else 0.5 s doubling), `attempts` in all.
    public func page(
        _ collection: String, query: [(String, String)], startingAfter: String?, version: String? = backfillAPIVersion
    ) async throws(Failure) -> Page {
        var items = [("limit", String(Self.pageSize))] + query
        if let startingAfter { items.append(("starting_after", startingAfter)) }
        let url = "\(baseURL)/v1/\(collection)?" + items.map { "\(Self.escape($0.0))=\(Self.escape($0.1))" }.joined(separator: "&")
        var last = ""
        for attempt in 1...attempts {
            var request = HTTPClientRequest(url: url)
            request.headers.add(name: "Authorization", value: "Bearer \(apiKey)")
            request.headers.add(name: "Accept", value: "application/json")
            if let version { request.headers.add(name: "Stripe-Version", value: version) }
            var wait = Duration.milliseconds(500 << min(attempt - 1, 6))
            switch await answer(request) {
            case .failure(let failure):
                if case .unreachable(let why) = failure { last = why }
            case .success(let (status, _, body)) where status == 200:
                guard let object = try? JSONParser.parse(body.readableBytesView, maxDepth: 256).objectValue, let data = object["data"]?.arrayValue
                else { throw Failure.unreachable("the \(collection) list is not a JSON list object") }
                return Page(objects: data.compactMap(\.objectValue), hasMore: object["has_more"]?.boolValue ?? false)
            case .success(let (status, retryAfter, _)):
                guard status == 429 || status >= 500 else { throw Failure.rejected(status: status) }
                last = "HTTP \(status)"
                if let seconds = retryAfter, (0...60).contains(seconds) { wait = .seconds(seconds) }
            }
            if attempt < attempts { try? await Task.sleep(for: wait) }
        }
        throw Failure.unreachable(last)
    }

    /// A request's status, `Retry-After` seconds and body (16 MiB at most), or why none arrived; the text
    /// is not AsyncHTTPClient's own (for a refused header it would carry the API key).
    func answer(_ request: HTTPClientRequest) async -> Result<(Int, Int?, ByteBuffer), Failure> {
        do {
            let response = try await client.execute(request, timeout: timeout)
            let body = try await response.body.collect(upTo: 16 << 20)
            return .success((Int(response.status.code), response.headers.first(name: "Retry-After").flatMap { Int($0) }, body))
        } catch {
            return .failure(.unreachable(OutboundHTTP.describe(error)))
        }
    }

    /// A query item, form-encoded (`created[gte]` included).
    static func escape(_ s: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
    }
}
