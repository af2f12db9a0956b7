import Foundation
import LedgerCore
import Logging

/// Who asks to link a store account to a subscriber: the app (a receipt upload, a submitted purchase token:
/// a claim that may be refused) or the store itself (a notification: a fact, never refused).
public enum ClaimKind: Sendable {
    case app
    case store
}

extension EventIntake {
    /// Links `accounts` of `store` to `subscriber` under the transfer policy (docs/identity.md) and answers
    /// whom the message's events go to. An account another subscriber (A) holds moves to `subscriber` with
    /// its purchases (`transfer`, or `transfer_if_no_active` while A has no active entitlement): a
    /// `transfer_out`/`transfer_in` pair per purchase, reason `restore`, then the link. Otherwise an app's
    /// claim is refused (409 `purchase_owned`, nothing stored, nothing about A said) and a store's fact goes
    /// to A.
    public func claim(
        store: String, accounts: [String], for subscriber: String, by origin: String, kind: ClaimKind, at: Timestamp, logger: Logger
    ) async throws -> String {
        var subscriber = subscriber
        // A merged subscriber: a store's fact follows the merge, an app's claim is refused.
        for _ in 0..<8 {
            guard let into = try await IdentityChecks.mergedInto([subscriber], database: database)[subscriber] else { break }
            if kind == .app { throw IdentityError.subscriberMerged(subscriber: subscriber, into: into) }
            subscriber = into
        }
        guard !accounts.isEmpty else { return subscriber }
        // Each round settles one other owner; a few accounts can belong to a few owners.
        for _ in 0..<8 {
            do {
                try await links.link(store: store, accounts, to: subscriber, by: origin)
                return subscriber
            } catch let conflict as StoreLinks.Conflict {
                let owner = conflict.subscriberID
                let identity = IdentityStore(intake: self, database: database, defaultPolicy: transferPolicy)
                let policy = try await identity.policy(of: owner)
                let moves: Bool
                switch policy {
                case .transfer: moves = true
                case .keep: moves = false
                case .transferIfNoActive: moves = try await !identity.hasActiveEntitlement(owner, at: at)
                }
                guard moves else {
                    if kind == .app { throw IdentityError.purchaseOwned(store: store, purchaseID: conflict.accountID) }
                    logger.info(
                        "store message names another subscriber for a purchase its owner keeps",
                        metadata: ["store.name": "\(store)", "store.account_id": "\(conflict.accountID)", "identity.policy": "\(policy.rawValue)"])
                    return owner
                }
                let owned = try await links.accounts(store: store, subscriber: owner).filter(accounts.contains)
                try await identity.moveAccounts(store: store, accounts: owned, from: owner, to: subscriber, at: at)
                try await links.relink(store: store, owned, to: subscriber, by: origin)
                logger.info(
                    "purchase transferred by the transfer policy",
                    metadata: ["store.name": "\(store)", "identity.from": "\(owner)", "identity.to": "\(subscriber)"])
            }
        }
        throw StoreError.unavailable("the store account kept changing owner while it was being linked")
    }
}

extension IdentityStore {
    /// Whether the subscriber has an active entitlement at `t` from any purchase.
    func hasActiveEntitlement(_ subscriber: String, at t: Timestamp) async throws -> Bool {
        Fold.fold(try await stream(subscriber)).entitlements(at: t).contains { $0.active }
    }

    /// Moves every purchase of `from` that came through the store's `accounts` to `to` (reason `restore`),
    /// in one append. A purchase is the account's when one of its transactions names it (its
    /// `original_transaction_id` or `transaction_id`, or a store id in its metadata).
    func moveAccounts(store: String, accounts: [String], from: String, to: String, at t: Timestamp) async throws {
        guard !accounts.isEmpty else { return }
        let merged = try await mergedInto([to])
        if let into = merged[to] { throw IdentityError.subscriberMerged(subscriber: to, into: into) }
        let named = Set(accounts)
        _ = try await appendMoving(from: from) { events in
            // The events that name one of the accounts, found in one pass.
            let naming = Set(
                events.lazy.filter { e in
                    e.source == store
                        && (named.contains(e.data[EventDataKey.originalTransactionID]?.stringValue ?? "")
                            || named.contains(e.data[EventDataKey.transactionID]?.stringValue ?? "")
                            || e.metadata.values.contains { named.contains($0.stringValue ?? "") })
                }.map(\.eventID))
            let purchases = PurchaseOwnership.owned(events).filter { !$0.sourceEventIDs.isDisjoint(with: naming) }
            guard !purchases.isEmpty else { return nil }
            let ledger = Fold.fold(events)
            let facts = SubscriberFacts.derive(events: events, ledger: ledger)
            let version = events.last?.version ?? 0
            var all: [NewEvent] = []
            for p in purchases {
                let key = Self.digest(store, from, to, p.purchaseID, String(version))
                let move = Move(
                    from: from, to: to, store: p.store, purchaseID: p.purchaseID, reason: .restore, occurredAt: t, source: store, idempotencyKey: key)
                all += Self.pair(
                    move, purchase: p, events: events, ledger: ledger, facts: facts, keys: (out: "restore:\(key):out", in: "restore:\(key):in"))
            }
            return all
        }
    }
}

extension StoreLinks {
    /// Points every account of `from` at `to` (a merge).
    func relinkAll(from: String, to: String, by origin: String) async throws {
        let logger = database.logger
        try await database.withConnection { c in
            try await c.query(
                "UPDATE store_links SET subscriber_id = \(to), linked_by = \(origin) WHERE subscriber_id = \(from)", logger: logger)
        }
    }

    /// Points accounts at another subscriber (a transfer moved their purchases there).
    public func relink(store: String, _ accountIDs: [String], to subscriberID: String, by origin: String) async throws {
        guard !accountIDs.isEmpty else { return }
        let logger = database.logger
        try await database.withConnection { c in
            try await c.query(
                """
                UPDATE store_links SET subscriber_id = \(subscriberID), linked_by = \(origin)
                WHERE store = \(store) AND account_id = ANY(\(accountIDs)::text[])
                """, logger: logger)
        }
    }
}
