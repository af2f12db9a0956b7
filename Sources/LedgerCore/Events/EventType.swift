/// The ledger's event types (docs/semantics.md section 2).
public enum EventType: String, Sendable, Hashable, CaseIterable {
    case purchase
    case renewal
    case refund
    case refundReversal = "refund_reversal"
    case cancellation
    case credit
    case creditReversal = "credit_reversal"
    case autoRenewChanged = "auto_renew_changed"
    case billingIssue = "billing_issue"
    case expiration
}

/// Where an event happened: sandbox events are kept and readable but never count in revenue or churn.
public enum LedgerEnvironment: String, Sendable, Hashable, CaseIterable {
    case production
    case sandbox
}

/// The identifier alphabets and limits of the contract.
public enum Identifiers {
    public static let maxSubscriberIDLength = 200
    public static let maxIdempotencyKeyLength = 255
    public static let maxSourceLength = 64

    /// `[A-Za-z0-9._:@-]{1,200}`
    public static func isValidSubscriberID(_ s: String) -> Bool {
        let u = s.utf8
        return !u.isEmpty && u.count <= maxSubscriberIDLength
            && u.allSatisfy { isAlphanumeric($0) || ".:_@-".utf8.contains($0) }
    }

    /// `[a-z0-9_.-]{1,64}`: `apple`, `google`, `stripe`, `web`, `support`, `import`…
    public static func isValidSource(_ s: String) -> Bool {
        let u = s.utf8
        return !u.isEmpty && u.count <= maxSourceLength
            && u.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || "_.-".utf8.contains($0) }
    }

    /// 1–255 bytes, no control characters.
    public static func isValidIdempotencyKey(_ s: String) -> Bool {
        let u = s.utf8
        return !u.isEmpty && u.count <= maxIdempotencyKeyLength && s.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value != 0x7F }
    }

    /// ISO 4217 alphabetic code: three upper-case letters.
    public static func isValidCurrency(_ s: String) -> Bool {
        let u = s.utf8
        return u.count == 3 && u.allSatisfy { $0 >= 0x41 && $0 <= 0x5A }
    }

    private static func isAlphanumeric(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
    }
}
