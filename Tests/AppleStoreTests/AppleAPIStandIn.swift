import AppleStore
@preconcurrency import Crypto
import Foundation
import Hummingbird
import LedgerCore
import LedgerTestSupport
import Logging
import NIOCore
import Synchronization

/// The remote side of the App Store Server API on loopback: it checks each request's token as Apple does
/// (ES256 signature with the key's public half, `kid`, `iss`, `aud`, `bid`, `iat`/`exp` at most an hour
/// apart and not expired) and answers the documented shapes (Get Notification History, Get Transaction
/// History v2, Get All Subscription Statuses) from pages of payloads signed by the test CA.
final class AppleAPIStandIn: Sendable {
    struct State {
        var notificationPages: [[String]] = []
        var transactionPages: [String: [[String]]] = [:]
        /// The next requests answered 429 with this `Retry-After` (seconds).
        var throttled: [Int] = []
        var requests = 0
        var refused: [String] = []
        var historyBodies: [JSONValue] = []
        /// Send Consumption Information requests: transaction id and body.
        var consumption: [(String, JSONValue)] = []
        /// The next this many history requests answer `hasMore` with the same token (a broken or hostile API).
        var stuckAnswers = 0
        /// Get All Subscription Statuses: each original transaction's `lastTransactions` item (`status`,
        /// `signedTransactionInfo`, `signedRenewalInfo`); an id not here is 404, as Apple answers.
        var statuses: [String: [String: JSONValue]] = [:]
    }

    let publicKey: P256.Signing.PublicKey
    let issuerID: String
    let keyID: String
    let bundleID: String
    let state = Mutex(State())

    init(publicKey: P256.Signing.PublicKey, issuerID: String, keyID: String, bundleID: String) {
        self.publicKey = publicKey
        self.issuerID = issuerID
        self.keyID = keyID
        self.bundleID = bundleID
    }

    /// Why Apple would refuse the token, or nil.
    func problem(with authorization: String?) -> String? {
        guard let auth = authorization, auth.hasPrefix("Bearer ") else { return "no bearer token" }
        let parts = auth.dropFirst("Bearer ".count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let h = decode(parts[0]), let c = decode(parts[1]), let sig = decodeBytes(parts[2]) else {
            return "not a JWS"
        }
        guard h["alg"] == "ES256", h["kid"] == .string(keyID), h["typ"] == "JWT" else { return "header \(h)" }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: sig),
            publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8))
        else { return "bad signature" }
        guard c["iss"] == .string(issuerID), c["aud"] == "appstoreconnect-v1", c["bid"] == .string(bundleID) else { return "claims \(c)" }
        guard let iat = c["iat"]?.numberValue?.int64Value, let exp = c["exp"]?.numberValue?.int64Value else { return "no iat/exp" }
        let now = Int64(Date().timeIntervalSince1970)
        guard exp > now, iat <= now + 60, exp - iat <= 3600 else { return "expired or too long: iat \(iat) exp \(exp)" }
        return nil
    }

    private func decodeBytes(_ s: Substring) -> [UInt8]? {
        var t = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while t.count % 4 != 0 { t += "=" }
        return Data(base64Encoded: t).map(Array.init)
    }

    private func decode(_ s: Substring) -> [String: JSONValue]? {
        decodeBytes(s).flatMap { try? JSONParser.parse($0).objectValue } ?? nil
    }

    private func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: value.canonicalString())))
    }

    /// Authorization, throttling, then the route's answer.
    private func gate(_ request: Request, _ answer: () -> Response) -> Response {
        if let problem = problem(with: request.headers[.authorization]) {
            state.withLock { $0.refused.append(problem) }
            return json(["errorCode": 4_010_000, "errorMessage": "Unauthorized"], status: .unauthorized)
        }
        let retryAfter = state.withLock { s -> Int? in
            s.requests += 1
            return s.throttled.isEmpty ? nil : s.throttled.removeFirst()
        }
        if let retryAfter {
            var r = json(["errorCode": 4_290_000, "errorMessage": "Rate limit exceeded."], status: .tooManyRequests)
            r.headers[.retryAfter] = "\(retryAfter)"
            return r
        }
        return answer()
    }

    /// Whether this request is answered as stuck (counting it down).
    private func stuck() -> Bool {
        state.withLock { s in
            guard s.stuckAnswers > 0 else { return false }
            s.stuckAnswers -= 1
            return true
        }
    }

    func serve<T: Sendable>(_ body: @escaping @Sendable (String) async throws -> T) async throws -> T {
        let router = Router()
        router.post("inApps/v1/notifications/history") { request, _ -> Response in
            let bytes = try await request.body.collect(upTo: 1 << 20)
            let parsed = try? JSONParser.parse(Array(buffer: bytes))
            return self.gate(request) {
                guard let parsed, parsed.objectValue?["startDate"]?.numberValue != nil, parsed.objectValue?["endDate"]?.numberValue != nil else {
                    return self.json(["errorCode": 4_000_006, "errorMessage": "Invalid request."], status: .badRequest)
                }
                self.state.withLock { $0.historyBodies.append(parsed) }
                if self.stuck() { return self.json(["hasMore": true, "paginationToken": "same", "notificationHistory": []]) }
                let pages = self.state.withLock { $0.notificationPages }
                let index = request.uri.queryParameters["paginationToken"].flatMap { Int(String($0)) } ?? 0
                let page = index < pages.count ? pages[index] : []
                let more = index + 1 < pages.count
                var answer: [String: JSONValue] = [
                    "hasMore": .bool(more),
                    "notificationHistory": .array(
                        page.map {
                            .object([
                                "signedPayload": .string($0),
                                "sendAttempts": [["attemptDate": 1_698_148_900_000, "sendAttemptResult": "NO_RESPONSE"]],
                            ])
                        }),
                ]
                if more { answer["paginationToken"] = .string("\(index + 1)") }
                return self.json(.object(answer))
            }
        }
        router.get("inApps/v2/history/:id") { request, context -> Response in
            self.gate(request) {
                let id = context.parameters.get("id") ?? ""
                if self.stuck() {
                    return self.json(["revision": "same", "hasMore": true, "bundleId": .string(self.bundleID), "signedTransactions": []])
                }
                guard let pages = self.state.withLock({ $0.transactionPages[id] }) else {
                    return self.json(["errorCode": 4_040_010, "errorMessage": "Transaction id not found."], status: .notFound)
                }
                let index = request.uri.queryParameters["revision"].flatMap { Int(String($0)) } ?? 0
                let more = index + 1 < pages.count
                return self.json([
                    "revision": .string("\(index + 1)"), "hasMore": .bool(more), "bundleId": .string(self.bundleID), "appAppleId": 1234,
                    "environment": "Production", "signedTransactions": .array((index < pages.count ? pages[index] : []).map(JSONValue.string)),
                ])
            }
        }
        router.get("inApps/v1/subscriptions/:id") { request, context -> Response in
            self.gate(request) {
                let id = context.parameters.get("id") ?? ""
                guard var last = self.state.withLock({ $0.statuses[id] }) else {
                    return self.json(["errorCode": 4_040_010, "errorMessage": "Transaction id not found."], status: .notFound)
                }
                last["originalTransactionId"] = .string(id)
                return self.json([
                    "environment": "Production", "bundleId": .string(self.bundleID), "appAppleId": 1234,
                    "data": [["subscriptionGroupIdentifier": "20000001", "lastTransactions": [.object(last)]]],
                ])
            }
        }
        router.put("inApps/v1/transactions/consumption/:id") { request, context -> Response in
            let bytes = try await request.body.collect(upTo: 1 << 20)
            let parsed = try? JSONParser.parse(Array(buffer: bytes))
            return self.gate(request) {
                guard let parsed, parsed.objectValue?["customerConsented"] == .bool(true) else {
                    return self.json(["errorCode": 4_000_047, "errorMessage": "Invalid customer consent."], status: .badRequest)
                }
                self.state.withLock { $0.consumption.append((context.parameters.get("id") ?? "", parsed)) }
                return Response(status: .accepted)
            }
        }
        return try await LocalHTTPServer.serve(router, label: "apple-stand-in") { port in try await body("http://127.0.0.1:\(port)") }
    }
}
