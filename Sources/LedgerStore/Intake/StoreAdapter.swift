import LedgerCore
import Logging

/// A store on the intake seam (docs/data-flow.md): what `StoreIntake` needs to know of it. Each store's folder
/// has one conformance; its verification produces the typed `Message`, its pure mapper does the mapping.
public protocol StoreAdapter: Sendable {
    /// A verified message of the store, typed (a notification, a webhook event, a resolved push).
    associatedtype Message: Sendable
    /// The store's name: the events' `source` and the key of its inbox rows and account links.
    var store: String { get }
    /// The inbox row of a message as received (its status, subscriber and reason are the intake's).
    func record(_ message: Message) -> StoreInbox.Message
    /// What the message says for the ledger: the store's pure mapper, completed with what the ledger already
    /// learned from the store (read on `tx`: an earlier transaction's period, an invoice's transaction).
    func map(_ message: Message, on tx: StoreTransaction) async throws -> StoreMapping
    /// Called once before the messages that waited for a link are re-read (`remap`): what they teach is
    /// recorded before any of them is resolved (Stripe). By default nothing.
    func prepare(replaying pending: [StoreInbox.Message], on tx: StoreTransaction) async throws
    /// The drafts of a message that waited for a link, re-read from its stored payload, just before it is
    /// applied (after the ones before it). An `EventValidationError` leaves it pending, saying why; no drafts
    /// marks it applied with no events.
    func remap(_ stored: StoreInbox.Message, on tx: StoreTransaction) async throws -> [EventDraft]
    /// The accounts to link with `accounts` when they are linked: ids their pending messages (`pending`, read
    /// once by the caller) name (Stripe's payment intents and invoices). By default, just `accounts`.
    func expand(_ accounts: [String], pending: [StoreInbox.Message], on tx: StoreTransaction) async throws -> [String]
    /// The whole of a message's way in, on `session` (one transaction). By default `session.ingest` of its
    /// record and mapping; a store whose messages also teach links around their own (Stripe) says so here,
    /// with the same session calls.
    func apply(_ message: Message, on session: StoreSession<Self>) async throws -> StoreOutcome
}

extension StoreAdapter {
    public func expand(_ accounts: [String], pending: [StoreInbox.Message], on tx: StoreTransaction) async throws -> [String] {
        accounts
    }

    public func prepare(replaying pending: [StoreInbox.Message], on tx: StoreTransaction) async throws {}

    public func apply(_ message: Message, on session: StoreSession<Self>) async throws -> StoreOutcome {
        try await session.ingest(record(message), try await map(message, on: session.tx))
    }
}

/// What a store message says for the ledger.
public struct StoreMapping: Sendable {
    /// The events it says, before the catalog completes them; none for a message that changes nothing (a notice).
    public var drafts: [EventDraft]
    /// The store's own account id it is about (original transaction, purchase token, customer).
    public var accountID: String?
    /// A subscriber id the message itself carries (Apple's `appAccountToken`, Google's obfuscated account id,
    /// Stripe's `client_reference_id`): it wins, and links the account to it.
    public var subscriberHint: String?
    /// Verified, but not for this ledger (another account's event, a type the ledger does not map).
    public var ignored: Bool
    /// The environment of its inbox row, when the mapping learned it (Google's state says); else the record's.
    public var environment: LedgerEnvironment?

    public init(
        drafts: [EventDraft], accountID: String? = nil, subscriberHint: String? = nil, ignored: Bool = false,
        environment: LedgerEnvironment? = nil
    ) {
        self.drafts = drafts
        self.accountID = accountID
        self.subscriberHint = subscriberHint
        self.ignored = ignored
        self.environment = environment
    }
}

/// What became of a store message; the HTTP edge answers it in one place (LedgerServer's `StoreAnswer`).
public enum StoreOutcome: Sendable {
    /// Seen before (and not waiting): nothing appended.
    case duplicate
    /// Nothing to append; kept in the inbox.
    case notice
    /// Its subscriber is not known yet; kept and applied when a link arrives.
    case pending
    /// Verified, but not for this ledger: recorded as `ignored`.
    case ignored
    /// Recorded; resolved in the background (a store whose API must be asked first).
    case received
    /// Its events are in the ledger (messages that waited for its links may have been applied with it:
    /// `StoreIntake.Result.replayed`).
    case applied(subscriber: String, events: [RecordedEvent])
    /// Its events were refused (a product the catalog lacks): kept `received`, saying why; `StoreIntake`
    /// throws the error once the transaction has committed.
    case refused(EventValidationError)

    public var name: String {
        switch self {
        case .duplicate: "duplicate"
        case .notice: "notice"
        case .pending: "pending"
        case .ignored: "ignored"
        case .received: "received"
        case .applied: "applied"
        case .refused: "refused"
        }
    }
}
