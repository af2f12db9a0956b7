import Crypto
import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// What happens when a store message or an app names subscriber B for a purchase A holds (docs/identity.md).
public enum TransferPolicy: String, Sendable, Hashable, CaseIterable {
    /// Move it to B (a `transfer_out`/`transfer_in` pair, reason `restore`).
    case transfer
    /// Move it only when A has no active entitlement from any purchase; otherwise as `keep`.
    case transferIfNoActive = "transfer_if_no_active"
    /// Refuse an app's claim (409 `purchase_owned`); a store's own notification stays with A.
    case keep
}

/// Identity failures, mapped to the contract's errors at the HTTP edge.
public enum IdentityError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The subscriber does not hold that purchase (404).
    case purchaseNotOwned(subscriber: String, store: String, purchaseID: String)
    /// The subscriber was merged into `into`: nothing more is appended to it (409 `subscriber_merged`).
    case subscriberMerged(subscriber: String, into: String)
    /// The purchase is held by another subscriber whose policy keeps it (409 `purchase_owned`); says nothing
    /// about that subscriber.
    case purchaseOwned(store: String, purchaseID: String)

    public var description: String {
        switch self {
        case .purchaseNotOwned(let s, let store, let p): "subscriber \(s) does not hold \(store) purchase \(p)"
        case .subscriberMerged(let s, let into): "subscriber \(s) was merged into \(into)"
        case .purchaseOwned(let store, let p): "\(store) purchase \(p) belongs to another subscriber, whose transfer policy keeps it"
        }
    }
}

/// Transfers, merges, ownership reads and transfer policies (docs/identity.md): every move is a
/// `transfer_out` on the subscriber it leaves and a `transfer_in` on the one it reaches, appended together
/// through the intake (both or neither), checked against the source stream's version so that two moves of
/// one purchase at once leave one owner.
public struct IdentityStore: Sendable {
    let intake: EventIntake
    let database: Database
    /// The ledger-wide policy (`serve --transfer-policy`).
    public let defaultPolicy: TransferPolicy

    public init(intake: EventIntake, database: Database, defaultPolicy: TransferPolicy = .transfer) {
        self.intake = intake
        self.database = database
        self.defaultPolicy = defaultPolicy
    }

    /// Streams are read whole to decide a move: bounded by the per-subscriber event limit.
    static let pageSize = 5_000

    /// The subscriber's events, oldest first (those recorded by `asOf` when given).
    func stream(_ subscriber: String, asOf: AsOf? = nil) async throws -> [RecordedEvent] {
        var events: [RecordedEvent] = []
        var after: Int64 = 0
        while true {
            let page = try await intake.store.stream(subscriberID: subscriber, afterVersion: after, limit: Self.pageSize)
            after = page.last?.version ?? after
            switch asOf {
            case nil: events += page
            case .position(let p)?: events += page.filter { $0.position <= p }
            case .recordedAt(let t)?: events += page.filter { $0.recordedAt <= t }
            }
            if page.count < Self.pageSize || after >= Int64(Limits.maxEventsPerSubscriber) { return events }
        }
    }

    /// Which of `subscribers` were merged, and into whom.
    public func mergedInto(_ subscribers: [String]) async throws -> [String: String] {
        try await IdentityChecks.mergedInto(subscribers, database: database)
    }

    /// The purchases `subscriber` holds (held as of `position`), and where it was merged to, if it was.
    public func purchases(_ subscriber: String, asOf: AsOf?, at t: Timestamp) async throws -> (
        purchases: [(OwnedPurchase, active: Bool)], mergedInto: String?
    ) {
        let events = try await stream(subscriber, asOf: asOf)
        let ledger = Fold.fold(events)
        return (PurchaseOwnership.owned(events).map { ($0, $0.isActive(in: ledger, at: t)) }, PurchaseOwnership.mergedInto(events))
    }

    /// A subscriber's own policy, else the ledger-wide one.
    public func policy(of subscriber: String) async throws -> TransferPolicy {
        let logger = database.logger
        return try await StoreError.mapping {
            try await database.withConnection { c in
                for try await (text, ) in try await c.query(
                    "SELECT policy FROM transfer_policies WHERE subscriber_id = \(subscriber)", logger: logger
                ).decode(String.self) {
                    return TransferPolicy(rawValue: text) ?? defaultPolicy
                }
                return defaultPolicy
            }
        }
    }

    public func setPolicy(_ policy: TransferPolicy, for subscriber: String) async throws {
        let logger = database.logger
        try await StoreError.mapping {
            try await database.withConnection { c in
                try await c.query(
                    """
                    INSERT INTO transfer_policies (subscriber_id, policy) VALUES (\(subscriber), \(policy.rawValue))
                    ON CONFLICT (subscriber_id) DO UPDATE SET policy = excluded.policy, updated_at = now()
                    """, logger: logger)
            }
        }
    }

    /// What a move asks for.
    public struct Move: Sendable {
        public var from: String
        public var to: String
        public var store: String?
        public var purchaseID: String
        public var reason: TransferReason
        public var occurredAt: Timestamp
        public var source: String
        public var idempotencyKey: String
        public var environment: LedgerEnvironment

        public init(
            from: String, to: String, store: String? = nil, purchaseID: String, reason: TransferReason, occurredAt: Timestamp,
            source: String = "support", idempotencyKey: String, environment: LedgerEnvironment = .production
        ) {
            (self.from, self.to, self.store, self.purchaseID, self.reason) = (from, to, store, purchaseID, reason)
            (self.occurredAt, self.source, self.idempotencyKey, self.environment) = (occurredAt, source, idempotencyKey, environment)
        }
    }

    /// Moves one purchase from `move.from` to `move.to`: both events or neither. A retry with the same key
    /// returns what was stored.
    public func transfer(_ move: Move) async throws -> AppendResult {
        guard move.from != move.to else {
            throw EventValidationError(field: "to", reason: "must name another subscriber than the one the purchase leaves")
        }
        let keys = (out: "transfer:\(Self.digest(move.idempotencyKey, "out"))", in: "transfer:\(Self.digest(move.idempotencyKey, "in"))")
        if let replay = try await stored(source: move.source, keys: [keys.out, keys.in]) { return replay }
        let merged = try await mergedInto([move.from, move.to])
        for s in [move.from, move.to] { if let into = merged[s] { throw IdentityError.subscriberMerged(subscriber: s, into: into) } }
        return try await appendMoving(from: move.from) { events in
            let purchase = PurchaseOwnership.owned(events).first { p in p.purchaseID == move.purchaseID && (move.store.map { $0 == p.store } ?? true)
            }
            guard let purchase else {
                throw IdentityError.purchaseNotOwned(subscriber: move.from, store: move.store ?? "any", purchaseID: move.purchaseID)
            }
            return Self.pair(move, purchase: purchase, events: events, keys: keys)
        }!
    }

    /// Builds a move's events from `from`'s stream (nil: nothing to move) and appends them all or none,
    /// checked against that stream's version: a concurrent change there (another move of the same purchase)
    /// makes it read and decide again, three times at most.
    func appendMoving(from: String, _ build: ([RecordedEvent]) throws -> [NewEvent]?) async throws -> AppendResult? {
        for attempt in 1...3 {
            let events = try await stream(from)
            guard var all = try build(events) else { return nil }
            // The source stream's version on its first event: nothing may slip in between.
            let version = events.last?.version ?? 0
            var checked = false
            for i in all.indices where all[i].subscriberID == from {
                all[i].expectedVersion = checked ? nil : version
                checked = true
            }
            do {
                return try await intake.append(all, path: { "events[\($0)]" })
            } catch StoreError.versionConflict(let s, _, _, _) where s == from && attempt < 3 {
                continue
            }
        }
        throw StoreError.unavailable("subscriber \(from) kept changing while its purchases were being moved")
    }

    /// Merges `from` into `into`: every purchase and running credit of `from` moves (reason `merge`) and
    /// `from` records `merged`, all in one append.
    public func merge(_ from: String, into: String, idempotencyKey: String, occurredAt: Timestamp, source: String = "support") async throws
        -> AppendResult
    {
        guard from != into else {
            throw EventValidationError(field: "into", reason: "must name another subscriber (a subscriber cannot merge into itself)")
        }
        let mergedKey = "merge:\(Self.digest(idempotencyKey, "merged"))"
        if let replay = try await stored(source: source, keys: [mergedKey]) { return replay }
        let merged = try await mergedInto([from, into])
        if let done = merged[from] { throw IdentityError.subscriberMerged(subscriber: from, into: done) }
        if merged[into] != nil {
            // Following `into`'s merges back to `from` would be a cycle: refused as invalid, not as a conflict.
            var seen: Set<String> = [into]
            var next = merged[into]
            while let n = next, seen.insert(n).inserted, seen.count < 64 {
                if n == from { throw EventValidationError(field: "into", reason: "would make a cycle: \(into) was merged into \(from)") }
                next = try await mergedInto([n])[n]
            }
            throw IdentityError.subscriberMerged(subscriber: into, into: merged[into]!)
        }
        let result = try await appendMoving(from: from) { events in
            let ledger = Fold.fold(events)
            let facts = SubscriberFacts.derive(events: events, ledger: ledger)
            var all: [NewEvent] = []
            let moving = PurchaseOwnership.owned(events) + PurchaseOwnership.runningCredits(events, ledger: ledger, at: occurredAt)
            for purchase in moving {
                let move = Move(
                    from: from, to: into, store: purchase.store, purchaseID: purchase.purchaseID, reason: .merge, occurredAt: occurredAt,
                    source: source, idempotencyKey: idempotencyKey)
                let keys = (
                    out: "merge:\(Self.digest(idempotencyKey, "out", purchase.purchaseID))",
                    in: "merge:\(Self.digest(idempotencyKey, "in", purchase.purchaseID))"
                )
                all += Self.pair(move, purchase: purchase, events: events, ledger: ledger, facts: facts, keys: keys)
            }
            all.append(
                NewEvent(
                    subscriberID: from, type: .merged, occurredAt: occurredAt, source: source, environment: .production,
                    idempotencyKey: mergedKey, data: ["into": .string(into)]))
            return all
        }!
        // Store messages follow the links: every store account of the merged subscriber is the other's now.
        try await StoreLinks(database: database).relinkAll(from: from, to: into, by: "merge")
        return result
    }

    /// The two events of a move, checked against the source stream's version.
    static func pair(
        _ move: Move, purchase: OwnedPurchase, events: [RecordedEvent], ledger: SubscriberLedger? = nil, facts: SubscriberFacts? = nil,
        keys: (out: String, in: String)
    ) -> [NewEvent] {
        let ledger = ledger ?? Fold.fold(events)
        let windows = PurchaseOwnership.windowsToTransfer(purchase, events: events, ledger: ledger, at: move.occurredAt)
        let carried = PurchaseOwnership.carriedTransactions(
            purchase, events: events, facts: facts ?? SubscriberFacts.derive(events: events, ledger: ledger))
        let environment = events.first { purchase.sourceEventIDs.contains($0.eventID) }?.environment ?? move.environment
        let out = NewEvent(
            subscriberID: move.from, type: .transferOut, occurredAt: move.occurredAt, source: move.source, environment: environment,
            idempotencyKey: keys.out,
            data: [
                "store": .string(purchase.store), "purchase_id": .string(purchase.purchaseID), "to_subscriber": .string(move.to),
                "reason": .string(move.reason.rawValue),
            ],
            expectedVersion: events.last?.version ?? 0)
        let into = NewEvent(
            subscriberID: move.to, type: .transferIn, occurredAt: move.occurredAt, source: move.source, environment: environment,
            idempotencyKey: keys.in,
            data: [
                "store": .string(purchase.store), "purchase_id": .string(purchase.purchaseID), "from_subscriber": .string(move.from),
                "reason": .string(move.reason.rawValue), "windows": .array(windows.map(\.json)),
                "transactions": .array(carried.map(\.json)),
            ])
        return [out, into]
    }

    /// The events stored under `keys`, if the first is (a retried move).
    func stored(source: String, keys: [String]) async throws -> AppendResult? {
        guard try await intake.store.event(source: source, idempotencyKey: keys[0]) != nil else { return nil }
        var events: [RecordedEvent] = []
        for k in keys { if let e = try await intake.store.event(source: source, idempotencyKey: k) { events.append(e) } }
        return AppendResult(events: events, createdCount: 0)
    }

    /// Idempotency keys of the events one request writes: derived from the client's key (any length) and
    /// what the event is, so that they fit the key limit and a retry finds them.
    static func digest(_ parts: String...) -> String {
        let hash = SHA256.hash(data: Array(parts.joined(separator: "\u{1F}").utf8))
        return hash.prefix(16).map { String(format: "%02x", $0) }.joined()
    }
}

/// The merge check every append passes (`EventIntake`): one indexed look-up (schema 0022).
enum IdentityChecks {
    static func mergedInto(_ subscribers: [String], database: Database) async throws -> [String: String] {
        guard !subscribers.isEmpty else { return [:] }
        let logger = database.logger
        return try await StoreError.mapping {
            try await database.withConnection { c in try await mergedInto(subscribers, on: c, logger: logger) }
        }
    }

    /// The same on a connection (a store message's transaction).
    static func mergedInto(_ subscribers: [String], on c: PostgresConnection, logger: Logger) async throws -> [String: String] {
        guard !subscribers.isEmpty else { return [:] }
        var out: [String: String] = [:]
        for try await (s, into) in try await c.query(
            "SELECT subscriber_id, data->>'into' FROM events WHERE type = 'merged' AND subscriber_id = ANY(\(subscribers))",
            logger: logger
        ).decode((String, String).self) {
            out[s] = into
        }
        return out
    }
}
