/// The documented ceilings on what one request may carry (docs/limits.md). No honest client reaches them;
/// each keeps one request from trapping report arithmetic, holding the append lock for seconds or
/// multiplying a read.
public enum Limits {
    /// Money in minor units: `|amount| ≤ 10^15` (ten trillion dollars in cents). Sums of any number of such
    /// amounts stay far inside the 128-bit arithmetic the reports use.
    public static let maxMoneyMinor: Int64 = 1_000_000_000_000_000
    /// Every other integer an event carries (versions, catalog revisions).
    public static let maxInteger: Int64 = 1_000_000_000_000_000
    /// Entitlements one event or catalog product may name.
    public static let maxEntitlements = 64
    /// Free-text members of `data` (`reason`, `granted_by`).
    public static let maxTextBytes = 1_000
    /// `metadata` as canonical JSON.
    public static let maxMetadataBytes = 16 * 1024
    /// Events in one subscriber's stream, and windows its fold may hold: an append refolds and rewrites the
    /// subscriber's projection under the append lock, so these bound how long it makes other writers wait.
    /// Ten years of monthly renewals of five products with every notice is about a thousand.
    public static let maxEventsPerSubscriber = 20_000
    public static let maxWindowsPerSubscriber = 10_000
    /// Windows one `transfer_in` may carry (a purchase's windows still running at the transfer).
    public static let maxTransferredWindows = 1_000

    /// Refuses `metadata` over its size limit or holding a string PostgreSQL cannot store (U+0000).
    public static func checkMetadata(_ metadata: [String: JSONValue], field: String) throws(EventValidationError) {
        let size = JSONValue.object(metadata).canonicalBytes().count
        guard size <= maxMetadataBytes else {
            throw EventValidationError(field: field, reason: "must be at most \(maxMetadataBytes) bytes as JSON, not \(size)")
        }
        if let path = nulPath(.object(metadata), path: field) {
            throw EventValidationError(field: path, reason: "must not contain the character U+0000")
        }
    }

    /// The path of the first string (or key) holding U+0000, if any.
    static func nulPath(_ value: JSONValue, path: String) -> String? {
        switch value {
        case .string(let s): return s.utf8.contains(0) ? path : nil
        case .array(let a):
            for (i, v) in a.enumerated() { if let p = nulPath(v, path: "\(path)[\(i)]") { return p } }
            return nil
        case .object(let o):
            for (k, v) in o {
                if k.utf8.contains(0) { return path }
                if let p = nulPath(v, path: "\(path).\(k)") { return p }
            }
            return nil
        default: return nil
        }
    }
}
