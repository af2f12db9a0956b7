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
        try await refuseMerged(events)
        return try await store.append(events)
    }

    /// The time a store message without a date of its own is taken to happen (a restore's transfer).
    public static func now() -> Timestamp { Timestamp(microseconds: Int64((Date().timeIntervalSince1970 * 1_000_000).rounded(.down))) }

    /// A merged subscriber takes no more events (docs/identity.md): 409 `subscriber_merged`, naming where
    /// it went. Its own `merged` event (the merge itself) passes.
    func refuseMerged(_ events: [NewEvent]) async throws {
        var subscribers: [String] = []
        for e in events where !subscribers.contains(e.subscriberID) { subscribers.append(e.subscriberID) }
        let merged = try await IdentityChecks.mergedInto(subscribers, database: database)
        if let e = events.first(where: { merged[$0.subscriberID] != nil }) {
            throw IdentityError.subscriberMerged(subscriber: e.subscriberID, into: merged[e.subscriberID]!)
        }
    }

    // MARK: store drafts

    /// Drafts of a store for a known subscriber, outside a store message (a sync's slices): completed from the
    /// catalog, validated and appended by group commit. A fact already stored stands as stored.
    public func append(drafts: [EventDraft], subscriber: String, source: String) async throws -> AppendResult {
        let needed = DraftCompletion.productsNeeded(drafts)
        let products = needed.isEmpty ? [:] : try await catalog.latest(needed)
        let events = try StoreIntake.complete(drafts, subscriber: subscriber, source: source, products: products)
        try await refuseMerged(events)
        return try await store.append(events, replays: .keepStored)
    }
}
