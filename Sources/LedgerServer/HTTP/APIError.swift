import Hummingbird
import LedgerCore
import NIOCore

/// An error the API answers with the contract's body: `{"error": {"code", "message"}}`.
public struct APIError: Error, Sendable, CustomStringConvertible {
    public var status: HTTPResponse.Status
    public var code: String
    public var message: String
    /// For `invalid_event`: the JSON path of the offending field.
    public var field: String?
    public var headers: HTTPFields = [:]
    /// Further members of the error object the contract names for this code (`merged_into`).
    public var extra: [String: JSONValue] = [:]

    public init(_ status: HTTPResponse.Status, code: String, message: String, field: String? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.field = field
    }

    public var description: String { "\(status.code) \(code): \(message)" }

    public static func invalidRequest(_ message: String) -> APIError {
        APIError(.badRequest, code: "invalid_request", message: message)
    }

    public static func invalidEvent(_ error: EventValidationError) -> APIError {
        APIError(.unprocessableContent, code: "invalid_event", message: error.description, field: error.field)
    }

    public static func notFound(_ message: String) -> APIError {
        APIError(.notFound, code: "not_found", message: message)
    }

    public var body: JSONValue {
        var error: [String: JSONValue] = ["code": .string(code), "message": .string(message)]
        if let field { error["field"] = .string(field) }
        for (k, v) in extra where error[k] == nil { error[k] = v }
        return .object(["error": .object(error)])
    }

    public func response() -> Response {
        var response = Response.json(body, status: status)
        response.headers.append(contentsOf: headers)
        return response
    }
}

extension Response {
    /// A JSON response from a `JSONValue` (canonical bytes: sorted keys, exact numbers).
    public static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: value.canonicalBytes())))
    }

    /// A JSON response from bytes already written canonically (`CanonicalObject`).
    public static func json(canonical bytes: [UInt8], status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}
