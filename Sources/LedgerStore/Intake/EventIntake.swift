import Foundation
import LedgerCore
import Logging

/// The one way events enter the ledger, whatever their source: a `POST /v1/events` body, an import line,
/// a store's notification. It fills what events leave out from the catalog, validates every payload,
/// resolves the subscriber where a store names only its own account, and appends — or keeps a store's
/// message in its inbox until the subscriber is known. Routes and commands only translate their input
/// and output (docs/data-flow.md).
public struct EventIntake: Sendable {
    public let store: EventStore
    public let catalog: CatalogStore
    public let inbox: StoreInbox
    public let links: StoreLinks
    let database: Database
    /// What happens when a store or an app names another subscriber for a purchase (docs/identity.md).
    public let transferPolicy: TransferPolicy

    public init(store: EventStore, catalog: CatalogStore, database: Database, transferPolicy: TransferPolicy = .transfer) {
        self.store = store
        self.catalog = catalog
        self.database = database
        self.transferPolicy = transferPolicy
        self.inbox = StoreInbox(database: database)
        self.links = StoreLinks(database: database)
    }

    /// Store messages: recorded, linked, appended and marked in one transaction.
    public var stores: StoreIntake { StoreIntake(intake: self) }

    // MARK: complete events (clients, imports)

    /// Fills in from the catalog what `events` leave out and validates every payload; a refusal is an
    /// `EventValidationError` naming the field by its path (`path(i)` is event i's, "" for a lone event).
    public func prepare(_ events: inout [NewEvent], path: (Int) -> String) async throws {
        let needed = CatalogFill.productsNeeded(by: events)
        let products = needed.isEmpty ? [:] : try await catalog.latest(needed)
        for i in events.indices {
            let p = path(i)
            try CatalogFill.apply(&events[i], products: products, path: p)
            try EventDataValidator.validate(
                type: events[i].type, data: events[i].data, occurredAt: events[i].occurredAt, path: p.isEmpty ? "data" : "\(p).data")
        }
    }

    /// `prepare`, then append all or nothing (a reused key with another body is a conflict). The request's
    /// entitlements together are bounded (an import's batches are not: they are projected by the rebuild).
    public func append(_ events: [NewEvent], path: (Int) -> String) async throws -> AppendResult {
        var events = events
        try await prepare(&events, path: path)
        try AppendRequest.checkEntitlements(events)
        return try await Self.refusingMerged { try await store.append(events, refusingMerged: true) }
    }

    /// The time a store message without a date of its own is taken to happen (a restore's transfer).
    public static func now() -> Timestamp { Timestamp(microseconds: Int64((Date().timeIntervalSince1970 * 1_000_000).rounded(.down))) }

    /// A merged subscriber takes no more events (docs/identity.md): 409 `subscriber_merged`, naming where it
    /// went. The append checks it against the streams it holds (`AppendJob.refusesMerged`), in the same trip.
    static func refusingMerged(_ append: () async throws -> AppendResult) async throws -> AppendResult {
        do {
            return try await append()
        } catch StoreError.subscriberMerged(let subscriber, let into) {
            throw IdentityError.subscriberMerged(subscriber: subscriber, into: into)
        }
    }

    // MARK: store drafts

    /// Drafts of a store for a known subscriber, outside a store message (a sync's slices): completed from the
    /// catalog, validated and appended by group commit. A fact already stored stands as stored.
    public func append(drafts: [EventDraft], subscriber: String, source: String) async throws -> AppendResult {
        let needed = DraftCompletion.productsNeeded(drafts)
        let products = needed.isEmpty ? [:] : try await catalog.latest(needed)
        let events = try StoreIntake.complete(drafts, subscriber: subscriber, source: source, products: products)
        return try await Self.refusingMerged { try await store.append(events, replays: .keepStored, refusingMerged: true) }
    }
}
