import AsyncHTTPClient
import Foundation
import HTTPTypes
import OpenAPIAsyncHTTPClient
import OpenAPIRuntime

/// A typed client of the ledger's HTTP API for backend services, generated from
/// `Sources/LedgerServer/Resources/openapi.yaml` by swift-openapi-generator (`Generated/`, refreshed by
/// `tools/generate-client`) over AsyncHTTPClient. It covers the reads and writes a backend makes: appending
/// events, a subscriber's entitlements, windows and events, and the RevenueCat-compatible read.
extension Client {
    /// A client of the ledger at `baseURL` (`https://ledger.example.com`) that sends `key` as its bearer key.
    public static func subledger(baseURL: String, key: String, httpClient: HTTPClient = .shared) throws -> Client {
        guard let url = URL(string: baseURL) else { throw InvalidBaseURL(text: baseURL) }
        return Client(
            serverURL: url, configuration: Configuration(dateTranscoder: LedgerDates()),
            transport: AsyncHTTPClientTransport(configuration: .init(client: httpClient)), middlewares: [BearerKey(key: key)])
    }
}

/// The ledger's times: RFC 3339 in UTC, with a fraction of a second only when it is not zero
/// (`2026-03-01T10:00:00Z`, `2026-03-01T10:00:00.250000Z`).
struct LedgerDates: DateTranscoder {
    func encode(_ date: Date) throws -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }

    func decode(_ text: String) throws -> Date {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = text.contains(".") ? [.withInternetDateTime, .withFractionalSeconds] : [.withInternetDateTime]
        guard let date = formatter.date(from: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "not an RFC 3339 time: \(text)"))
        }
        return date
    }
}

/// A base URL that does not parse.
public struct InvalidBaseURL: Error, CustomStringConvertible {
    public var text: String
    public var description: String { "not a URL: \(text)" }
}

/// Adds `Authorization: Bearer <key>` to every request.
struct BearerKey: ClientMiddleware {
    let key: String

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        request.headerFields[.authorization] = "Bearer \(key)"
        return try await next(request, body, baseURL)
    }
}
