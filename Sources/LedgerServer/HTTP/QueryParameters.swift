import Hummingbird
import LedgerCore

/// Strict query parameter reading: a malformed value is a 400 naming the parameter, never ignored.
struct QueryParameters {
    let request: Request

    func int64(_ name: String, default value: Int64, range: ClosedRange<Int64>) throws -> Int64 {
        guard let text = request.uri.queryParameters[name[...]] else { return value }
        guard let n = Int64(String(text)), range.contains(n) else {
            throw APIError.invalidRequest("query parameter '\(name)' must be an integer from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
        }
        return n
    }
}
