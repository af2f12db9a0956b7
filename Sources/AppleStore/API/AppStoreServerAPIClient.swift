import AsyncHTTPClient
import Foundation
import LedgerCore
import Logging
import NIOCore
import NIOHTTP1
import StoreAdapters

/// A client of the App Store Server API (the endpoints the ledger needs: notification history,
/// transaction history v2, subscription statuses).
///
/// Every request carries a fresh ES256 token. A 429 is retried after its `Retry-After` (capped), a 5xx or a
/// network failure after an exponential backoff, up to `maxAttempts`; other answers are errors naming
/// Apple's `errorCode`. Signed payloads it returns are only strings here: callers verify them with the
/// same `AppleJWSVerifier` as notifications.
public struct AppStoreServerAPIClient: Sendable {
    public static let productionURL = "https://api.storekit.itunes.apple.com"
    public static let sandboxURL = "https://api.storekit-sandbox.itunes.apple.com"

    let http: HTTPClient
    let credentials: AppStoreAPICredentials
    let baseURL: String
    let logger: Logger
    let maxAttempts: Int
    let firstBackoff: Duration
    /// Longest wait a `Retry-After` may ask for; a longer one fails the call (the caller runs again later).
    let maxRetryAfter: Duration
    let requestTimeout: TimeAmount

    public init(
        http: HTTPClient, credentials: AppStoreAPICredentials, baseURL: String, logger: Logger, maxAttempts: Int = 5,
        firstBackoff: Duration = .seconds(1), maxRetryAfter: Duration = .seconds(60), requestTimeout: TimeAmount = .seconds(30)
    ) {
        self.http = http
        self.credentials = credentials
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.logger = logger
        self.maxAttempts = max(1, maxAttempts)
        self.firstBackoff = firstBackoff
        self.maxRetryAfter = maxRetryAfter
        self.requestTimeout = requestTimeout
    }

    /// An answer other than 2xx, after the retries it allows.
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var status: Int?
        public var errorCode: Int64?
        public var message: String
        public var description: String {
            "App Store Server API: "
                + [status.map { "HTTP \($0)" }, errorCode.map { "errorCode \($0)" }, message].compactMap { $0 }
                .joined(separator: ", ")
        }
    }

    // MARK: endpoints

    public struct NotificationHistoryPage: Sendable {
        public var signedPayloads: [String]
        public var hasMore: Bool
        public var paginationToken: String?
    }

    /// Get Notification History: the notifications Apple sent (or tried to) between two times, at most 180
    /// days back.
    public func notificationHistory(start: Timestamp, end: Timestamp, paginationToken: String?) async throws -> NotificationHistoryPage {
        let body: JSONValue = .object([
            "startDate": .number(JSONNumber(start.microseconds / 1000)), "endDate": .number(JSONNumber(end.microseconds / 1000)),
        ])
        let answer = try await send(
            .POST, "/inApps/v1/notifications/history", query: paginationToken.map { [("paginationToken", $0)] } ?? [], body: body)
        let items = answer["notificationHistory"]?.arrayValue ?? []
        return NotificationHistoryPage(
            signedPayloads: items.compactMap { $0.objectValue?["signedPayload"]?.stringValue },
            hasMore: answer["hasMore"]?.boolValue ?? false, paginationToken: answer["paginationToken"]?.stringValue)
    }

    public struct TransactionHistoryPage: Sendable {
        public var signedTransactions: [String]
        public var hasMore: Bool
        public var revision: String?
        public var environment: String?
    }

    /// Get Transaction History v2, oldest first, paged by `revision`.
    public func transactionHistory(transactionID: String, revision: String?) async throws -> TransactionHistoryPage {
        var query = [("sort", "ASCENDING")]
        if let revision { query.append(("revision", revision)) }
        let answer = try await send(.GET, "/inApps/v2/history/\(try Self.pathSegment(transactionID))", query: query, body: nil)
        return TransactionHistoryPage(
            signedTransactions: (answer["signedTransactions"]?.arrayValue ?? []).compactMap(\.stringValue),
            hasMore: answer["hasMore"]?.boolValue ?? false, revision: answer["revision"]?.stringValue,
            environment: answer["environment"]?.stringValue)
    }

    public struct SubscriptionStatus: Sendable {
        public var originalTransactionID: String?
        /// 1 active, 2 expired, 3 billing retry, 4 billing grace period, 5 revoked.
        public var status: Int64?
        public var signedTransactionInfo: String?
        public var signedRenewalInfo: String?
    }

    /// Get All Subscription Statuses: the latest transaction and renewal info of each subscription.
    public func subscriptionStatuses(transactionID: String) async throws -> [SubscriptionStatus] {
        let answer = try await send(.GET, "/inApps/v1/subscriptions/\(try Self.pathSegment(transactionID))", query: [], body: nil)
        var statuses: [SubscriptionStatus] = []
        for group in answer["data"]?.arrayValue ?? [] {
            for last in group.objectValue?["lastTransactions"]?.arrayValue ?? [] {
                guard let o = last.objectValue else { continue }
                statuses.append(
                    SubscriptionStatus(
                        originalTransactionID: o["originalTransactionId"]?.stringValue, status: o["status"]?.numberValue?.int64Value,
                        signedTransactionInfo: o["signedTransactionInfo"]?.stringValue, signedRenewalInfo: o["signedRenewalInfo"]?.stringValue))
            }
        }
        return statuses
    }

    /// Send Consumption Information for a `CONSUMPTION_REQUEST` (Apple answers 202 Accepted).
    public func sendConsumptionInformation(transactionID: String, request: JSONValue) async throws {
        _ = try await send(.PUT, "/inApps/v1/transactions/consumption/\(try Self.pathSegment(transactionID))", query: [], body: request)
    }

    // MARK: transport

    /// The base URL requests go to.
    public var configuredBaseURL: String { baseURL }

    /// A transaction id in a path: Apple's are digits; anything else is refused before a request is made.
    static func pathSegment(_ id: String) throws -> String {
        guard !id.isEmpty, id.utf8.count <= 64, id.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw Failure(status: nil, errorCode: nil, message: "'\(id)' is not an App Store transaction id (digits only)")
        }
        return id
    }

    func send(_ method: HTTPMethod, _ path: String, query: [(String, String)], body: JSONValue?) async throws -> [String: JSONValue] {
        var url = baseURL + path
        if !query.isEmpty {
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            url += "?" + query.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }.joined(separator: "&")
        }
        var attempt = 0
        var backoff = firstBackoff
        while true {
            attempt += 1
            var request = HTTPClientRequest(url: url)
            request.method = method
            request.headers.add(name: "Authorization", value: "Bearer \(try credentials.token(now: Date()))")
            request.headers.add(name: "Accept", value: "application/json")
            if let body {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(string: body.canonicalString()))
            }
            let retryAfter: Duration
            do {
                let response = try await http.execute(request, timeout: requestTimeout)
                let bytes = try await response.body.collect(upTo: 16 << 20)
                let status = Int(response.status.code)
                if (200..<300).contains(status) {
                    if bytes.readableBytes == 0 { return [:] }
                    guard let object = try? JSONParser.parse(Array(buffer: bytes)).objectValue else {
                        throw Failure(status: status, errorCode: nil, message: "the answer is not a JSON object")
                    }
                    return object
                }
                let apple = (try? JSONParser.parse(Array(buffer: bytes)).objectValue) ?? nil
                let failure = Failure(
                    status: status, errorCode: apple?["errorCode"]?.numberValue?.int64Value,
                    message: apple?["errorMessage"]?.stringValue ?? response.status.reasonPhrase)
                guard status == 429 || status >= 500, attempt < maxAttempts else { throw failure }
                if status == 429, let seconds = response.headers.first(name: "Retry-After").flatMap({ Int64($0) }), seconds >= 0 {
                    guard .seconds(seconds) <= maxRetryAfter else { throw failure }
                    retryAfter = .seconds(seconds)
                } else {
                    retryAfter = backoff
                }
                logger.warning(
                    "App Store Server API answered \(status); retrying",
                    metadata: ["apple.api.path": "\(path)", "apple.api.attempt": "\(attempt)", "apple.api.retry_in": "\(retryAfter)"])
            } catch let failure as Failure {
                throw failure
            } catch {
                guard attempt < maxAttempts else {
                    throw Failure(status: nil, errorCode: nil, message: "\(method) \(path) failed: \(OutboundHTTP.describe(error))")
                }
                retryAfter = backoff
                logger.warning(
                    "App Store Server API unreachable; retrying",
                    metadata: ["apple.api.path": "\(path)", "apple.api.attempt": "\(attempt)", "apple.api.error": "\(OutboundHTTP.describe(error))"])
            }
            try await Task.sleep(for: retryAfter)
            backoff = min(backoff * 2, .seconds(30))
        }
    }
}
