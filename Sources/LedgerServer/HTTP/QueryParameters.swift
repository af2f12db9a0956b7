import Hummingbird
import LedgerCore
import LedgerStore

/// Strict query parameter reading: a malformed value is a 400 naming the parameter, never ignored.
struct QueryParameters {
    let request: Request

    func int64(_ name: String, default value: Int64, range: ClosedRange<Int64>) throws -> Int64 {
        guard let text = request.uri.queryParameters[name[...]] else { return value }
        guard let n = Int64(String(text)), range.contains(n) else {
            throw APIError.invalidRequest(
                "query parameter '\(name)' must be an integer from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
        }
        return n
    }

    func timestamp(_ name: String) throws -> Timestamp? {
        guard let text = request.uri.queryParameters[name[...]] else { return nil }
        let value = String(text).percentDecoded
        do {
            return try Timestamp(rfc3339: value.replacingOccurrences(of: " ", with: "+"))
        } catch {
            throw APIError.invalidRequest("query parameter '\(name)' \(error), not '\(value)'")
        }
    }

    /// `as_of`: a position (digits) or a recorded time (RFC 3339).
    func asOf() throws -> AsOf? {
        guard let text = request.uri.queryParameters["as_of"] else { return nil }
        if let p = Int64(String(text)) {
            guard p >= 0 else { throw APIError.invalidRequest("query parameter 'as_of' must be a position ≥ 0 or an RFC 3339 time") }
            return .position(p)
        }
        guard let t = try timestamp("as_of") else { return nil }
        return .recordedAt(t)
    }

    /// A report bound: `YYYY-MM-DD` (midnight UTC) or an RFC 3339 time.
    func dateOrTimestamp(_ name: String) throws -> Timestamp? {
        guard let text = request.uri.queryParameters[name[...]] else { return nil }
        let value = String(text)
        if value.utf8.count == 10, let t = try? Timestamp(rfc3339: value + "T00:00:00Z") { return t }
        return try timestamp(name)
    }
}

extension String {
    /// Percent-decoded, or as is when nothing is encoded: Foundation's decoding is costly enough to show in
    /// an entitlement read's profile, and almost no identifier or timestamp needs it.
    var percentDecoded: String {
        utf8.contains(UInt8(ascii: "%")) ? (removingPercentEncoding ?? self) : self
    }
}
