import AsyncHTTPClient
import Foundation
import LedgerCore
import Logging
import NIOCore
import NIOHTTP1
import StoreAdapters

/// The Play Developer API (androidpublisher v3) over AsyncHTTPClient, authorised by a service-account
/// OAuth 2.0 token that is cached until a minute before it expires. Calls retry with backoff on network
/// errors, 429 and 5xx; what still fails is `GooglePlayError.unavailable` and waits in the inbox.
public actor GooglePlayAPI {
    public nonisolated let baseURL: String
    let account: GoogleServiceAccount
    let http: HTTPClient
    let logger: Logger
    let timeout: TimeAmount
    /// Delays between attempts of one call.
    let backoff: [Duration]
    private var token: (value: String, expires: Int64)?

    /// Longest accepted response body from Google.
    public static let maxResponseBytes = 1 << 20

    public init(
        baseURL: String, account: GoogleServiceAccount, http: HTTPClient, logger: Logger, timeout: Duration = .seconds(10),
        backoff: [Duration] = [.milliseconds(200), .milliseconds(800), .seconds(2)]
    ) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.account = account
        self.http = http
        self.logger = logger
        self.timeout = .seconds(timeout.components.seconds)
        self.backoff = backoff
    }

    /// `purchases.subscriptionsv2.get`.
    public func subscription(package: String, token: String) async throws -> [String: JSONValue] {
        let url = "\(baseURL)/androidpublisher/v3/applications/\(Self.escape(package))/purchases/subscriptionsv2/tokens/\(Self.escape(token))"
        return try await call(.GET, url, body: nil)
    }

    /// `purchases.subscriptions.acknowledge`: Google refunds purchases not acknowledged within three days.
    public func acknowledge(package: String, productID: String, token: String) async throws {
        let url =
            "\(baseURL)/androidpublisher/v3/applications/\(Self.escape(package))/purchases/subscriptions/\(Self.escape(productID))/tokens/\(Self.escape(token)):acknowledge"
        _ = try await call(.POST, url, body: "{}")
    }

    /// `purchases.products.get` (a one-time product).
    public func product(package: String, productID: String, token: String) async throws -> [String: JSONValue] {
        let url =
            "\(baseURL)/androidpublisher/v3/applications/\(Self.escape(package))/purchases/products/\(Self.escape(productID))/tokens/\(Self.escape(token))"
        return try await call(.GET, url, body: nil)
    }

    /// `purchases.products.acknowledge`.
    public func acknowledgeProduct(package: String, productID: String, token: String) async throws {
        let url =
            "\(baseURL)/androidpublisher/v3/applications/\(Self.escape(package))/purchases/products/\(Self.escape(productID))/tokens/\(Self.escape(token)):acknowledge"
        _ = try await call(.POST, url, body: "{}")
    }

    /// `orders.get`: what the buyer paid, the tax, the developer's revenue.
    public func order(package: String, orderID: String) async throws -> [String: JSONValue] {
        let url = "\(baseURL)/androidpublisher/v3/applications/\(Self.escape(package))/orders/\(Self.escape(orderID))"
        return try await call(.GET, url, body: nil)
    }

    /// One page of `purchases.voidedpurchases.list` (subscriptions and one-time products, `type=1`).
    public func voidedPurchases(package: String, since: Int64?, pageToken: String?) async throws -> [String: JSONValue] {
        var url = "\(baseURL)/androidpublisher/v3/applications/\(Self.escape(package))/purchases/voidedpurchases?type=1&maxResults=1000"
        if let since { url += "&startTime=\(since)" }
        if let pageToken { url += "&token=\(Self.escape(pageToken))" }
        return try await call(.GET, url, body: nil)
    }

    func call(_ method: HTTPMethod, _ url: String, body: String?) async throws -> [String: JSONValue] {
        var attempt = 0
        while true {
            do {
                let bearer = try await accessToken()
                var request = HTTPClientRequest(url: url)
                request.method = method
                request.headers.add(name: "Authorization", value: "Bearer \(bearer)")
                request.headers.add(name: "Accept", value: "application/json")
                if let body {
                    request.headers.add(name: "Content-Type", value: "application/json")
                    request.body = .bytes(ByteBuffer(string: body))
                }
                let (status, bytes) = try await send(request)
                if status == 401 { token = nil }
                if status == 429 || status >= 500 || status == 401 {
                    throw GooglePlayError.unavailable("HTTP \(status) from \(method) androidpublisher")
                }
                guard (200..<300).contains(status) else {
                    throw GooglePlayError.refused(status: status, Self.errorMessage(bytes))
                }
                if bytes.isEmpty { return [:] }
                guard case .object(let o)? = try? JSONParser.parse(bytes) else {
                    throw GooglePlayError.unavailable("the androidpublisher answer is not a JSON object")
                }
                return o
            } catch let error as GooglePlayError {
                guard case .unavailable = error, attempt < backoff.count else { throw error }
                logger.debug("google api retry", metadata: ["google.attempt": "\(attempt + 1)", "error.message": "\(error)"])
                try await Task.sleep(for: backoff[attempt])
                attempt += 1
            } catch let error as UnusableToken {
                // Not retried at once: the token endpoint would be asked again for each attempt.
                throw GooglePlayError.unavailable(error.description)
            }
        }
    }

    /// A cached access token, or a new one from the account's `token_uri`.
    func accessToken() async throws -> String {
        let now = Int64(Date().timeIntervalSince1970)
        if let token, token.expires - 60 > now { return token.value }
        let assertion = try account.assertion(now: now)
        var request = HTTPClientRequest(url: account.tokenURI)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(ByteBuffer(string: "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"))
        let (status, bytes) = try await send(request)
        if status == 429 || status >= 500 { throw GooglePlayError.unavailable("HTTP \(status) from the token endpoint") }
        guard status == 200, case .object(let o)? = try? JSONParser.parse(bytes), let value = o["access_token"]?.stringValue else {
            throw GooglePlayError.refused(status: status, "the token endpoint refused the service account: \(Self.errorMessage(bytes))")
        }
        // Checked before it is kept: a token that cannot be a header would fail every call until it expires,
        // and its text would travel into logs and the inbox with each failure.
        guard OutboundHTTP.isBearerToken(value) else {
            token = nil
            throw UnusableToken.fromTokenEndpoint
        }
        let lifetime = o["expires_in"]?.numberValue?.int64Value ?? 3600
        token = (value, now + min(max(lifetime, 0), 86_400))
        return value
    }

    /// An access token the call cannot use; its text never says the token.
    enum UnusableToken: Error, CustomStringConvertible {
        case fromTokenEndpoint
        /// The HTTP client refused the request's headers (its own error would list their values).
        case refusedHeader

        var description: String {
            switch self {
            case .fromTokenEndpoint: "the token endpoint answered an access token that is not a valid bearer token (not used, not kept)"
            case .refusedHeader: "the HTTP client refused the request's headers (the access token is dropped)"
            }
        }
    }

    func send(_ request: HTTPClientRequest) async throws -> (Int, [UInt8]) {
        do {
            let response = try await http.execute(request, timeout: timeout, logger: logger)
            let body = try await response.body.collect(upTo: Self.maxResponseBytes)
            return (Int(response.status.code), Array(buffer: body))
        } catch let error as GooglePlayError {
            throw error
        } catch  where OutboundHTTP.isRefusedHeader(error) {
            token = nil
            throw UnusableToken.refusedHeader
        } catch {
            throw GooglePlayError.unavailable(OutboundHTTP.describe(error))
        }
    }

    static func errorMessage(_ bytes: [UInt8]) -> String {
        guard case .object(let o)? = try? JSONParser.parse(bytes) else { return "no error body" }
        let message = o["error"]?.objectValue?["message"]?.stringValue ?? o["error_description"]?.stringValue ?? o["error"]?.stringValue
        return String((message ?? "no message").prefix(300))
    }

    /// A path segment, percent-encoded (tokens and ids are opaque).
    static func escape(_ s: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
    }
}

/// Google's OIDC signing keys, from a URL (fetched with AsyncHTTPClient) or a file, kept for an hour and
/// fetched again early when a token names a key not yet known (at most every 30 s).
///
/// Pushes arrive unauthenticated, so fetches are throttled from the first one: concurrent verifications
/// share the fetch in flight, and after a failed fetch none starts for a back-off (`firstRetry`, doubling
/// to `maxRetry`) during which verifications answer that failure at once (or with the keys still held).
public actor GoogleKeySource {
    let location: String
    let http: HTTPClient
    let logger: Logger
    let firstRetry: Duration
    let maxRetry: Duration
    private var cached: (jwks: GoogleJWKS, at: ContinuousClock.Instant)?
    private var lastRefresh: ContinuousClock.Instant?
    private var inFlight: Task<GoogleJWKS, any Error>?
    private var failure: (error: any Error, until: ContinuousClock.Instant, backoff: Duration)?

    public static let defaultURL = "https://www.googleapis.com/oauth2/v3/certs"

    public init(
        location: String, http: HTTPClient, logger: Logger, firstRetry: Duration = .seconds(5), maxRetry: Duration = .seconds(60)
    ) {
        self.location = location
        self.http = http
        self.logger = logger
        self.firstRetry = firstRetry
        self.maxRetry = max(firstRetry, maxRetry)
    }

    public func keys(for kid: String?) async throws -> GoogleJWKS {
        let now = ContinuousClock.now
        if let cached, now - cached.at < .seconds(3600), kid.map({ cached.jwks.keys[$0] != nil }) ?? true {
            return cached.jwks
        }
        if let cached, let lastRefresh, now - lastRefresh < .seconds(30) { return cached.jwks }
        if let inFlight { return try await inFlight.value }
        if let failure, now < failure.until {
            if let cached, now - cached.at < .seconds(3600) { return cached.jwks }
            throw failure.error
        }
        lastRefresh = now
        let fetch = Task { try await self.fetch() }
        inFlight = fetch
        defer { inFlight = nil }
        do {
            let jwks = try await fetch.value
            cached = (jwks, now)
            failure = nil
            return jwks
        } catch {
            let backoff = failure.map { min($0.backoff * 2, maxRetry) } ?? firstRetry
            failure = (error, ContinuousClock.now + backoff, backoff)
            logger.warning(
                "google signing keys not fetched; pushes are refused until the next try",
                metadata: ["google.jwks.retry_in": "\(backoff)", "error.message": "\(error)"])
            throw error
        }
    }

    nonisolated func fetch() async throws -> GoogleJWKS {
        let bytes: [UInt8]
        if location.hasPrefix("http://") || location.hasPrefix("https://") {
            do {
                let response = try await http.execute(HTTPClientRequest(url: location), timeout: .seconds(10), logger: logger)
                guard response.status == .ok else { throw GooglePlayError.unavailable("HTTP \(response.status.code) from the JWKS") }
                bytes = Array(buffer: try await response.body.collect(upTo: 1 << 20))
            } catch let error as GooglePlayError {
                throw error
            } catch {
                throw GooglePlayError.unavailable("the JWKS: \(error)")
            }
        } else {
            guard let data = FileManager.default.contents(atPath: location) else {
                throw GooglePlayError.configuration("cannot read the JWKS file \(location)")
            }
            bytes = Array(data)
        }
        return try GoogleJWKS(json: bytes)
    }
}
