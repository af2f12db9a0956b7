import Foundation

/// One entitlement granted over a half-open UTC interval `[start, end)` (docs/semantics.md section 3).
public struct Window: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case paid, trial, intro, promo, free, lifetime, credit, grace

        /// Windows that are paid service for churn, MRR and revenue (grace counts only beside them).
        public var isPaid: Bool { self == .paid || self == .intro || self == .promo }
    }

    /// What cut a window short, remembered so that a reversal can remove exactly its own cut.
    public struct Cut: Sendable, Hashable {
        public enum Cause: String, Sendable, Hashable {
            case refund, cancellation, expiration
            case creditReversal = "credit_reversal"
            /// The purchase moved to another subscriber (`transfer_out`): access follows the owner, money does not move.
            case transfer
        }
        public var at: Timestamp
        public var eventID: UUID
        public var cause: Cause

        public init(at: Timestamp, eventID: UUID, cause: Cause) {
            self.at = at
            self.eventID = eventID
            self.cause = cause
        }
    }

    public var entitlement: String
    public var start: Timestamp
    /// The end as granted, before any cut; nil means the window never ends.
    public var grantedEnd: Timestamp?
    public var kind: Kind
    public var productID: String?
    public var transactionID: String?
    public var sourceEventID: UUID
    /// Position of the event that created the window (a stable tie-breaker).
    public var sourcePosition: Int64
    /// The source event's environment: sandbox windows never count in churn or revenue.
    public var environment: LedgerEnvironment
    public var cuts: [Cut] = []

    public init(
        entitlement: String, start: Timestamp, grantedEnd: Timestamp?, kind: Kind, productID: String?,
        transactionID: String?, sourceEventID: UUID, sourcePosition: Int64, environment: LedgerEnvironment,
        cuts: [Cut] = []
    ) {
        self.entitlement = entitlement
        self.start = start
        self.grantedEnd = grantedEnd
        self.kind = kind
        self.productID = productID
        self.transactionID = transactionID
        self.sourceEventID = sourceEventID
        self.sourcePosition = sourcePosition
        self.environment = environment
        self.cuts = cuts
    }

    /// The earliest cut that ends the window before its granted end.
    public var effectiveCut: Cut? { earliestCut { _ in true } }

    /// The earliest cut of the causes `included` that ends the window before its granted end (revenue leaves
    /// transfers out: money follows the transaction, not its owner).
    public func earliestCut(_ included: (Cut.Cause) -> Bool) -> Cut? {
        var first: Cut?
        for c in cuts where included(c.cause) {
            if let f = first, (f.at, f.eventID.uuidString) <= (c.at, c.eventID.uuidString) { continue }
            first = c
        }
        guard let first else { return nil }
        if let grantedEnd, first.at >= grantedEnd { return nil }
        return first
    }

    /// The end after cuts: `min(end, cut)`; a cut at or before the start voids the window (end == start).
    public var end: Timestamp? {
        guard let cut = effectiveCut else { return grantedEnd }
        return max(start, cut.at)
    }

    public var isVoid: Bool { end == start }

    public func covers(_ t: Timestamp) -> Bool {
        start <= t && (end.map { t < $0 } ?? true)
    }
}
