import Foundation
import LedgerCore
import Logging
import Synchronization

/// The one way a store's messages enter the ledger, for every store (docs/data-flow.md). In one database
/// transaction: the message is recorded in its store's inbox, its subscriber resolved (or its links created),
/// its events completed from the catalog and appended, its inbox row marked; a link that arrives applies the
/// messages that waited for it, re-read through the store's `remap`, in the same place. Calls to a store's
/// API happen before (the route, a background resolver), never inside the transaction.
public struct StoreIntake: Sendable {
    let intake: EventIntake
    var events: EventStore { intake.store }

    init(intake: EventIntake) {
        self.intake = intake
    }

    /// A link the transaction could not make (the account is another subscriber's, or the subscriber was
    /// merged): the transfer policy decides (`EventIntake.claim`, docs/identity.md) outside the transaction,
    /// which may move purchases with events of their own, and the message's transaction runs again with the
    /// subscriber the claim answered.
    struct ClaimNeeded: Error {
        var accounts: [String]
        var subscriber: String
        var origin: String
        var at: Timestamp
    }

    /// Runs a session's work in one transaction; a `ClaimNeeded` rolls it back, claims, and runs it again, as
    /// does `EventStore.RunAgain` (a key stored meanwhile, a deadlock).
    func run<A: StoreAdapter, T: Sendable>(
        _ adapter: A, logger: Logger, _ body: @escaping @Sendable (StoreSession<A>) async throws -> T
    ) async throws -> (T, replayed: Int) {
        // First in a transaction shared with the messages arriving meanwhile; alone if that one was rolled back.
        do {
            return try await events.sharedTransaction { tx in
                let session = StoreSession(adapter: adapter, tx: tx, logger: logger)
                let value = try await body(session)
                return (value, session.replayed)
            }
        } catch let failed as SharedTransaction.Failed {
            logger.debug(
                "store message runs alone after its shared transaction was rolled back",
                metadata: ["store.name": "\(adapter.store)", "error.message": "\(failed.cause)"])
        }
        var owners: [String: String] = [:]
        for _ in 0..<4 {
            do {
                return try await events.transaction { [owners] tx in
                    let session = StoreSession(adapter: adapter, tx: tx, logger: logger, owners: owners)
                    let value = try await body(session)
                    return (value, session.replayed)
                }
            } catch let claim as ClaimNeeded {
                owners[claim.subscriber] = try await intake.claim(
                    store: adapter.store, accounts: claim.accounts, for: claim.subscriber, by: claim.origin, kind: .store, at: claim.at,
                    logger: logger)
            } catch let again as EventStore.RunAgain {
                logger.debug(
                    "store message's transaction runs again",
                    metadata: ["store.name": "\(adapter.store)", "transaction.reason": "\(again.reason)"])
            }
        }
        throw StoreError.unavailable(
            "the store message's transaction ran four times (its account kept changing owner, or other writers kept storing its keys)")
    }

    /// What an ingest did: its outcome, and how many waiting messages its links applied with it (their
    /// events are not in the outcome's: an answer's position is then the primary's).
    public struct Result: Sendable {
        public var outcome: StoreOutcome
        public var replayed: Int

        public init(outcome: StoreOutcome, replayed: Int = 0) {
            self.outcome = outcome
            self.replayed = replayed
        }
    }

    /// A verified message, in one transaction. Events the catalog cannot complete are refused with their
    /// `EventValidationError` once the message is recorded (`received`, saying why: the store's retry applies it).
    public func ingest<A: StoreAdapter>(_ adapter: A, _ message: A.Message, logger: Logger) async throws -> Result {
        let (outcome, replayed) = try await run(adapter, logger: logger) { session in try await adapter.apply(message, on: session) }
        if case .refused(let error) = outcome { throw error }
        return Result(outcome: outcome, replayed: replayed)
    }

    /// The app names the subscriber of store accounts (a receipt, a client-submitted purchase): the claim
    /// under the transfer policy first (a purchase another subscriber keeps: 409 `purchase_owned`, nothing
    /// stored; `at`: when the claim is taken to happen), then in one transaction the links, what the submission
    /// itself says, and what waited for them. A refusal of the submission's own events is thrown once the
    /// links are committed.
    public func claim<A: StoreAdapter>(
        _ adapter: A, accounts: [String], to subscriber: String, by origin: String, drafts: [EventDraft], at: Timestamp, logger: Logger
    ) async throws -> (events: [RecordedEvent], replayed: Int) {
        _ = try await intake.claim(store: adapter.store, accounts: accounts, for: subscriber, by: origin, kind: .app, at: at, logger: logger)
        let (outcome, _) = try await run(adapter, logger: logger) { session -> Swift.Result<([RecordedEvent], Int), EventValidationError> in
            try await session.tx.link(store: adapter.store, accounts, to: subscriber, by: origin)
            var recorded: [RecordedEvent] = []
            if !drafts.isEmpty {
                do {
                    recorded = try await session.append(drafts, subscriber: subscriber).events
                } catch let error as EventValidationError {
                    return .failure(error)
                }
            }
            return .success((recorded, try await session.link(accounts, to: subscriber, by: origin, counted: false)))
        }
        let (recorded, replayed) = try outcome.get()
        return (recorded, replayed)
    }

    /// Links accounts to a subscriber (and what the adapter expands them to) and applies what waited for them.
    public func link<A: StoreAdapter>(_ adapter: A, accounts: [String], to subscriber: String, by origin: String, logger: Logger)
        async throws -> Int
    {
        try await run(adapter, logger: logger) { session in try await session.link(accounts, to: subscriber, by: origin) }.0
    }

    /// Store drafts for a known subscriber → validated events of `source`. Two facts of one payload under one
    /// key (an adapter's mistake) would be a unique violation in the database: refused here, saying which.
    public static func complete(
        _ drafts: [EventDraft], subscriber: String, source: String, products: [String: Product]
    ) throws(EventValidationError) -> [NewEvent] {
        let events = try DraftCompletion.complete(drafts, subscriberID: subscriber, source: source, products: products)
        var keys: [String: Int] = [:]
        for (i, e) in events.enumerated() {
            if let first = keys[e.idempotencyKey] {
                throw EventValidationError(
                    field: "events[\(i)].idempotency_key",
                    reason: "\(source) mapped two facts to the key \(e.idempotencyKey) (events[\(first)] has it too)")
            }
            keys[e.idempotencyKey] = i
        }
        return events
    }
}

/// One store message's transaction: the steps of `StoreIntake`, for a store's `apply`.
public final class StoreSession<A: StoreAdapter>: Sendable {
    public let adapter: A
    public let tx: StoreTransaction
    public let logger: Logger
    /// Subscribers a claim answered for another (the owner that keeps a purchase, where a merge went).
    let owners: [String: String]
    private let replays = Mutex(0)
    /// What this transaction learned of subscribers (merged into whom, or not) and of the catalog (a product
    /// absent from it: nil), asked once each.
    private let known = Mutex<(merged: [String: String?], products: [String: Product?])>(([:], [:]))

    init(adapter: A, tx: StoreTransaction, logger: Logger, owners: [String: String] = [:]) {
        self.adapter = adapter
        self.tx = tx
        self.logger = logger
        self.owners = owners
    }

    var replayed: Int { replays.withLock { $0 } }
    var store: String { adapter.store }

    /// Records the message, then appends its drafts when the subscriber is known; otherwise it waits in the
    /// inbox (`pending`) for a link.
    public func ingest(_ record: StoreInbox.Message, _ mapping: StoreMapping) async throws -> StoreOutcome {
        var r = record
        if let environment = mapping.environment { r.environment = environment }
        if let account = mapping.accountID { r.accountID = account }
        r.subscriberID = nil
        r.reason = nil
        if mapping.ignored {
            r.status = .ignored
            _ = try await tx.recordIfNew(r)
            return .ignored
        }
        let hint = mapping.subscriberHint.flatMap { Identifiers.isValidSubscriberID($0) ? $0 : nil }
        let productIDs = DraftCompletion.productsNeeded(mapping.drafts)
        let lookup = try await tx.lookup(
            store: store, messageID: r.messageID, accountID: mapping.accountID, subscribers: [hint].compactMap { $0 },
            products: productIDs)
        learn(lookup, products: productIDs)
        if let status = lookup.status, status != .pending && status != .received {
            return .duplicate
        }
        guard !mapping.drafts.isEmpty else {
            r.status = .notice
            try await tx.record(r)
            return .notice
        }
        guard let (subscriber, link) = try await resolve(mapping, linked: lookup.linked) else {
            r.status = .pending
            r.reason = StoreInbox.unlinkedReason(store: store, accountID: r.accountID)
            try await tx.record(r)
            return .pending
        }
        r.subscriberID = subscriber
        var drafts = mapping.drafts
        if let hint = mapping.subscriberHint, hint != subscriber, owners[hint] == subscriber, try await mergedInto(hint) == nil,
            let first = drafts.min(by: { $0.occurredAt < $1.occurredAt })
        {
            // The owner's policy kept the purchase: the other account the store named is kept as a fact of
            // record (docs/identity.md).
            drafts.append(
                EventDraft(
                    type: .storeNotice, occurredAt: first.occurredAt, environment: first.environment,
                    idempotencyKey: "\(store):other_subscriber:\(r.messageID)", productID: nil, originalTransactionID: nil,
                    data: ["store": .string(store), "kind": "other_subscriber_named", "detail": ["subscriber_id": .string(hint)]],
                    metadata: ["store": .string(store)]))
        }
        let result: AppendResult
        do {
            let events = try await completed(drafts, subscriber: subscriber)
            // Marked applied before the append: the append lock is held from the append to the commit, so
            // every statement moved before it is a round trip less that other messages wait for.
            r.status = .applied
            try await writeInboxRow(r, linking: link)
            result = try await tx.append(events, replays: .keepStored)
        } catch let error as EventValidationError {
            // It stays `received` until the store's retry gets through (a product added to the catalog): say why.
            r.status = .received
            r.reason = error.description
            try await writeInboxRow(r, linking: link)
            return .refused(error)
        }
        return .applied(subscriber: subscriber, events: result.events)
    }

    /// A link `ingest` writes with the message's inbox row (`writeInboxRow`); `claim`: what a conflict
    /// needs, nil when the subscriber is already the owner a claim answered (a conflict is then an error).
    struct Link {
        var accounts: [String]
        var subscriber: String
        var origin: String
        var claim: StoreIntake.ClaimNeeded?
    }

    /// The subscriber a message names (its account linked to it, under the transfer policy: the store's fact is
    /// never refused, and goes to the owner that keeps the purchase), with the link still to write when the
    /// account is not linked to it yet; else the one its account is linked to (`linked`, as `lookup` read it).
    func resolve(_ m: StoreMapping, linked: String?) async throws -> (String, Link?)? {
        if let hint = m.subscriberHint, Identifiers.isValidSubscriberID(hint) {
            guard let account = m.accountID else { return (hint, nil) }
            let at = m.drafts.map(\.occurredAt).min() ?? EventIntake.now()
            if let owner = owners[hint] {
                return (owner, linked == owner ? nil : Link(accounts: [account], subscriber: owner, origin: "message", claim: nil))
            }
            let needed = StoreIntake.ClaimNeeded(accounts: [account], subscriber: hint, origin: "message", at: at)
            if try await mergedInto(hint) != nil { throw needed }
            return (hint, linked == hint ? nil : Link(accounts: [account], subscriber: hint, origin: "message", claim: needed))
        }
        return linked.map { ($0, nil) }
    }

    /// Records the message's inbox row, with the link `resolve` left to write in the same statement.
    func writeInboxRow(_ r: StoreInbox.Message, linking link: Link?) async throws {
        guard let link else { return try await tx.record(r) }
        do {
            try await tx.record(r, linking: link.accounts, to: link.subscriber, by: link.origin)
        } catch let conflict as StoreLinks.Conflict {
            throw link.claim ?? conflict
        }
    }

    /// Keeps what a `lookup` read, so that no later step of this transaction asks again.
    func learn(_ lookup: StoreTransaction.Lookup, products asked: Set<String>) {
        known.withLock { k in
            k.merged.merge(lookup.merged) { _, new in new }
            for id in asked { k.products[id] = .some(lookup.products[id]) }
        }
    }

    /// Where `subscriber` was merged into, if it was (one look-up per subscriber and transaction).
    func mergedInto(_ subscriber: String) async throws -> String? {
        if let into = known.withLock({ $0.merged[subscriber] }) { return into }
        let into = try await IdentityChecks.mergedInto([subscriber], on: tx.connection, logger: tx.logger)[subscriber]
        known.withLock { $0.merged[subscriber] = .some(into) }
        return into
    }

    /// The catalog's latest revision of each product named (read once per transaction).
    func products(_ ids: Set<String>) async throws -> [String: Product] {
        let (have, missing) = known.withLock { k -> ([String: Product], Set<String>) in
            var have: [String: Product] = [:]
            var missing: Set<String> = []
            for id in ids {
                if let p = k.products[id] { p.map { have[id] = $0 } } else { missing.insert(id) }
            }
            return (have, missing)
        }
        guard !missing.isEmpty else { return have }
        let read = try await tx.products(missing)
        known.withLock { k in for id in missing { k.products[id] = .some(read[id]) } }
        return have.merging(read) { a, _ in a }
    }

    /// Links accounts to `subscriber` (or the owner a claim answered for it); an account another subscriber
    /// holds, or a merged subscriber, needs the transfer policy: `StoreIntake.ClaimNeeded`.
    func linkOrClaim(_ accounts: [String], to subscriber: String, by origin: String, at: Timestamp) async throws {
        if let owner = owners[subscriber] {
            try await tx.link(store: store, accounts, to: owner, by: origin)
            return
        }
        let needed = StoreIntake.ClaimNeeded(accounts: accounts, subscriber: subscriber, origin: origin, at: at)
        if try await mergedInto(subscriber) != nil { throw needed }
        do {
            try await tx.link(store: store, accounts, to: subscriber, by: origin)
        } catch is StoreLinks.Conflict {
            throw needed
        }
    }

    /// Drafts completed from the catalog and appended for `subscriber`; a fact already stored (the same store
    /// id, by another path) stands as stored.
    public func append(_ drafts: [EventDraft], subscriber: String) async throws -> AppendResult {
        try await tx.append(try await completed(drafts, subscriber: subscriber), replays: .keepStored)
    }

    /// Drafts completed from the catalog for `subscriber`, who must not have been merged (docs/identity.md:
    /// 409 `subscriber_merged`).
    func completed(_ drafts: [EventDraft], subscriber: String) async throws -> [NewEvent] {
        let products = try await products(DraftCompletion.productsNeeded(drafts))
        let events = try StoreIntake.complete(drafts, subscriber: subscriber, source: store, products: products)
        if let into = try await mergedInto(subscriber) {
            throw IdentityError.subscriberMerged(subscriber: subscriber, into: into)
        }
        return events
    }

    /// Links accounts (expanded by the adapter) to a subscriber, and applies what waited for them; returns how
    /// many. `counted`: they count in `StoreIntake.Result.replayed` (the answer's position is then the primary's).
    @discardableResult
    public func link(_ accounts: [String], to subscriber: String, by origin: String, counted: Bool = true) async throws -> Int {
        var unique: [String] = []
        for a in accounts where !unique.contains(a) { unique.append(a) }
        // Their pending messages, read once: for the adapter's expansion, and replayed below unless it added accounts.
        let pending = try await tx.pending(store: store, accountIDs: unique)
        let all = try await adapter.expand(unique, pending: pending, on: tx)
        try await linkOrClaim(all, to: subscriber, by: origin, at: EventIntake.now())
        // A store's fact about a purchase its owner keeps: what waited applies to the owner.
        let applied = try await replay(
            all == unique ? pending : try await tx.pending(store: store, accountIDs: all), to: owners[subscriber] ?? subscriber)
        if counted { replays.withLock { $0 += applied } }
        return applied
    }

    /// Applies the messages that waited for the accounts just linked (`pending`, oldest first), each re-read by `remap`. One
    /// that still cannot be applied stays pending, saying why (logged).
    func replay(_ pending: [StoreInbox.Message], to subscriber: String) async throws -> Int {
        guard !pending.isEmpty else { return 0 }
        try await adapter.prepare(replaying: pending, on: tx)
        var applied = 0
        for p in pending {
            do {
                let drafts = try await adapter.remap(p, on: tx)
                if !drafts.isEmpty { _ = try await append(drafts, subscriber: subscriber) }
                try await tx.mark(store: store, messageID: p.messageID, status: .applied, subscriberID: subscriber)
                applied += 1
            } catch let error as EventValidationError {
                try await tx.explain(store: store, messageID: p.messageID, reason: "linked to \(subscriber), but \(error)")
                logger.warning(
                    "pending store message still cannot be applied",
                    metadata: ["store.name": "\(store)", "store.message_id": "\(p.messageID)", "error.message": "\(error)"])
            }
        }
        return applied
    }
}
