import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore

/// Read-your-writes at the HTTP edge: appends answer the position they reached (`Ledger-Position`); reads
/// take the position their answer must include (`min_position` or `Ledger-Min-Position`) and answer the
/// position the state they read reflects (docs/api.md).
enum LedgerPosition {
    static let header = HTTPField.Name("Ledger-Position")!
    static let minimumHeader = HTTPField.Name("Ledger-Min-Position")!

    /// The least position a read's answer must include: the larger of `min_position` and
    /// `Ledger-Min-Position` (0 when neither is given); a malformed value is 400 naming it.
    static func minimum(_ request: Request) throws -> Int64 {
        var minimum: Int64 = 0
        if let text = request.uri.queryParameters["min_position"] {
            minimum = try parse(String(text), name: "query parameter 'min_position'")
        }
        let values = request.headers[values: minimumHeader]
        if values.count > 1 { throw APIError.invalidRequest("header 'Ledger-Min-Position' must be given once") }
        if let text = values.first {
            minimum = max(minimum, try parse(text, name: "header 'Ledger-Min-Position'"))
        }
        return minimum
    }

    private static func parse(_ text: String, name: String) throws -> Int64 {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, trimmed.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = Int64(trimmed) else {
            throw APIError.invalidRequest("\(name) must be a ledger position, an integer from 0 to \(Int64.max), not '\(text)'")
        }
        return n
    }
}

extension Response {
    /// The response with `Ledger-Position: position`.
    func ledgerPosition(_ position: Int64) -> Response {
        var response = self
        response.headers[LedgerPosition.header] = String(max(0, position))
        return response
    }
}
