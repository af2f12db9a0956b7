import AsyncHTTPClient
import LedgerCore
import NIOCore
import StoreAdapters

/// Stripe's REST API, for what a webhook leaves out: the `metadata.subscriber_id` of a customer whose
/// events arrived before anything linked it, and the lookup key of a price an invoice names only by id.
/// Optional: without an API key the adapter works from webhook payloads alone.
public struct StripeAPIClient: Sendable {
    public static let defaultBaseURL = "https://api.stripe.com"

    /// Why a look-up failed: `unreachable` (network, timeouts, 429 and 5xx after the retries: try again later)
    /// or `rejected` (Stripe refused the request, e.g. 401 for a wrong key: retrying will not help).
    public enum Failure: Error, Sendable, CustomStringConvertible {
        case unreachable(String)
        case rejected(status: Int)

        public var description: String {
            switch self {
            case .unreachable(let why): "Stripe's API is unreachable: \(why)"
            case .rejected(let status): "Stripe's API refused the request with HTTP \(status)"
            }
        }
    }

    let apiKey: String
    let baseURL: String
    let client: HTTPClient
    let timeout: TimeAmount
    let attempts: Int

    /// `apiKey` is a secret or restricted key (`sk_…`, `rk_…`) with read access to customers and prices; never logged.
    public init(apiKey: String, baseURL: String = defaultBaseURL, client: HTTPClient = .shared, timeout: TimeAmount = .seconds(10), attempts: Int = 3)
    {
        self.apiKey = apiKey
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.client = client
        self.timeout = timeout
        self.attempts = max(1, attempts)
    }

    /// The customer's `metadata.subscriber_id`; nil when it has none, or there is no such customer (404).
    public func customerSubscriberID(_ customerID: String) async throws(Failure) -> String? {
        try await object("customers", customerID)?["metadata"]?.objectValue?["subscriber_id"]?.stringValue
    }

    /// The price's `lookup_key` (the catalog product id the ledger knows it by); nil when it has none, or
    /// there is no such price (404). API 2025-03-31.basil and later name only the price's id on an invoice line.
    public func priceLookupKey(_ priceID: String) async throws(Failure) -> String? {
        guard let key = try await object("prices", priceID)?["lookup_key"]?.stringValue, !key.isEmpty else { return nil }
        return key
    }

    /// `GET /v1/<collection>/<id>`: the object, or nil for 404 (and for an id that is not a Stripe id).
    func object(_ collection: String, _ id: String) async throws(Failure) -> [String: JSONValue]? {
        // Stripe ids are letters, digits and `_`: anything else is not looked up (no path injection).
        guard id.utf8.count <= 255,
            id.utf8.allSatisfy({ $0 == 0x5f || (0x30...0x39).contains($0) || (0x41...0x5a).contains($0) || (0x61...0x7a).contains($0) })
        else { return nil }
        var last = ""
        for attempt in 1...attempts {
            if attempt > 1 {
                // 0.5 s, 1 s, 2 s … between attempts.
                try? await Task.sleep(for: .milliseconds(250 << (attempt - 1)))
            }
            var request = HTTPClientRequest(url: "\(baseURL)/v1/\(collection)/\(id)")
            request.headers.add(name: "Authorization", value: "Bearer \(apiKey)")
            request.headers.add(name: "Accept", value: "application/json")
            do {
                let response = try await client.execute(request, timeout: timeout)
                let body = try await response.body.collect(upTo: 1 << 20)
                switch response.status.code {
                case 200:
                    guard let object = try? JSONParser.parse(body.readableBytesView).objectValue else {
                        last = "the \(collection) answer is not a JSON object"
                        continue
                    }
                    return object
                case 404:
                    return nil
                case 429, 500...:
                    last = "HTTP \(response.status.code)"
                default:
                    throw Failure.rejected(status: Int(response.status.code))
                }
            } catch let failure as Failure {
                throw failure
            } catch {
                // Not AsyncHTTPClient's own text: for a refused header it would carry the API key.
                last = OutboundHTTP.describe(error)
            }
        }
        throw Failure.unreachable(last)
    }
}
