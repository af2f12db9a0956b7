import LedgerCore

/// A store's pure mapper: a verified payload to ledger event drafts, no I/O, no clock. Its verification
/// (signatures, tokens) lives beside it in the store's folder; the store's `StoreAdapter` (LedgerStore) hands
/// what it maps to `StoreIntake`, which completes the drafts from the catalog, resolves the subscriber and
/// appends them or keeps the message in the store's inbox (docs/data-flow.md).
public protocol StoreMapper: Sendable {
    /// What the adapter maps: a payload whose authenticity has been checked.
    associatedtype VerifiedPayload: Sendable
    /// The store's name: the events' `source` and the key of its inbox and account links.
    static var store: String { get }
    /// The drafts the payload says, in order; none for a message that changes nothing.
    static func map(_ payload: VerifiedPayload) throws(StoreMappingError) -> [EventDraft]
}

/// Why a verified store payload could not be turned into ledger events (422: the payload is not what the
/// store documents).
public struct StoreMappingError: Error, Sendable, Hashable, CustomStringConvertible {
    public var field: String
    public var reason: String
    public init(field: String, reason: String) {
        self.field = field
        self.reason = reason
    }
    public var description: String { "\(field): \(reason)" }
}
