import Foundation

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
    /// A fact of record that changes no window (a refund request, a declined refund, a price-increase
    /// consent): kept for auditors, never revenue, never churn.
    case storeNotice = "store_notice"
    /// A purchase leaves this subscriber at `occurred_at` (docs/identity.md): its windows here are cut there.
    case transferOut = "transfer_out"
    /// A purchase arrives from another subscriber, with the windows it still had there (docs/identity.md).
    case transferIn = "transfer_in"
    /// This subscriber was merged into another: later appends naming it are refused.
    case merged
}

/// Where an event happened: sandbox events are kept and readable but never count in revenue or churn.
public enum LedgerEnvironment: String, Sendable, Hashable, CaseIterable {
    case production
    case sandbox
}

/// The identifier alphabets and limits of the contract.
public enum Identifiers {
    public static let maxSubscriberIDLength = 200
    /// Every other identifier (idempotency keys, product, transaction and entitlement ids): see `problem(_:)`.
    public static let maxIdentifierBytes = 200
    /// Idempotency keys keep the longer limit they always had.
    public static let maxIdempotencyKeyLength = 255
    public static let maxSourceLength = 64

    /// The one rule for identifiers other than subscriber ids and sources: 1–200 bytes of UTF-8, no control
    /// characters, and in Unicode NFC, so that two spellings of the same text ("café" composed or decomposed)
    /// can never name two products or two idempotency keys. Nil when `s` follows it, else why not.
    public static func problem(_ s: String, maxBytes: Int = maxIdentifierBytes) -> String? {
        let u = s.utf8
        if u.isEmpty { return "must not be empty" }
        if u.count > maxBytes { return "must be at most \(maxBytes) bytes of UTF-8, not \(u.count)" }
        var ascii = true
        for b in u {
            if b < 0x20 || b == 0x7F { return "must not contain control characters" }
            if b >= 0x80 { ascii = false }
        }
        guard !ascii else { return nil }
        if s.unicodeScalars.contains(where: { (0x80...0x9F).contains($0.value) }) {
            return "must not contain control characters"
        }
        // ASCII is always NFC; anything else is compared with its own normalisation.
        if !s.precomposedStringWithCanonicalMapping.utf8.elementsEqual(u) {
            return "must be in Unicode normalization form C (NFC): compose accents with their letters"
        }
        return nil
    }

    /// `[A-Za-z0-9._:@$-]{1,200}` (`$` for hosted backends' anonymous ids such as `$RCAnonymousID:…`).
    public static func isValidSubscriberID(_ s: String) -> Bool {
        let u = s.utf8
        return !u.isEmpty && u.count <= maxSubscriberIDLength
            && u.allSatisfy { isAlphanumeric($0) || ".:_@$-".utf8.contains($0) }
    }

    /// Why a subscriber id was refused, for error messages.
    public static let subscriberIDRule = "must be 1–200 characters of A–Z, a–z, 0–9 and . : _ @ $ -"

    /// `[a-z0-9_.-]{1,64}`: `apple`, `google`, `stripe`, `web`, `support`, `import`…
    public static func isValidSource(_ s: String) -> Bool {
        let u = s.utf8
        return !u.isEmpty && u.count <= maxSourceLength
            && u.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || "_.-".utf8.contains($0) }
    }

    /// An identifier (`problem(_:)` finds nothing wrong with it).
    public static func isValidIdempotencyKey(_ s: String) -> Bool { problem(s, maxBytes: maxIdempotencyKeyLength) == nil }

    /// ISO 4217 alphabetic code: three upper-case letters.
    public static func isValidCurrency(_ s: String) -> Bool {
        let u = s.utf8
        return u.count == 3 && u.allSatisfy { $0 >= 0x41 && $0 <= 0x5A }
    }

    private static func isAlphanumeric(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
    }
}
