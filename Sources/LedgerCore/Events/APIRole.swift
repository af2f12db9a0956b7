/// What an API key may do (the roles table of README.md and docs/api.md).
public enum APIRole: String, Sendable, Hashable, CaseIterable {
    case writer
    case reader
    case auditor
    case analyst
    case admin

    /// A capability a route needs.
    public enum Permission: String, Sendable, Hashable, CaseIterable {
        /// Append events, ingest store payloads.
        case append
        /// Entitlement and window reads.
        case readEntitlements
        /// Event history, feeds, as-of reads, exports, verify.
        case audit
        /// Churn, retention, MRR, revenue, trials.
        case reports
        /// Keys and catalog.
        case manage
    }

    public func allows(_ permission: Permission) -> Bool {
        switch self {
        case .admin: true
        case .writer: permission == .append
        case .reader: permission == .readEntitlements
        case .auditor: permission == .readEntitlements || permission == .audit
        case .analyst: permission == .reports
        }
    }
}
