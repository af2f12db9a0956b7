import LedgerCore
import LedgerStore
import Logging
import StoreAdapters

/// The App Store's side of a reconciliation (docs/switching.md "Reconcile"): Get All Subscription Statuses
/// for each original transaction the ledger knows (the latest transaction, its renewal info, the status), and
/// when the ledger lacks the latest transaction, the transaction history to bring every one it lacks. Facts
/// are mapped as `apple sync` and the notifications map them, under the same keys.
public struct AppleReconciliation: StoreReconciliation {
    let client: AppStoreServerAPIClient
    let verifier: AppleJWSVerifier
    let bundleID: String?
    public let environment: LedgerEnvironment

    public init(client: AppStoreServerAPIClient, verifier: AppleJWSVerifier, bundleID: String?, environment: LedgerEnvironment = .production) {
        self.client = client
        self.verifier = verifier
        self.bundleID = bundleID
        self.environment = environment
    }

    public var store: String { AppleNotificationMapper.store }

    /// A payload of the App Store that does not verify or cannot be mapped concerns that purchase alone: it is
    /// recorded as not comparable, and the run goes on.
    public func check(_ p: ReconciliationStore.KnownPurchase, ledger: LedgerPurchase, now: Timestamp) async throws -> StoreVerdict {
        try await PurchaseNotComparable.scoping(why: Self.scoped) { try await verdict(p, ledger: ledger, now: now) }
    }

    static func scoped(_ error: any Error) -> String? {
        switch error {
        case let e as AppleSignatureError: "the App Store's answer does not verify: \(e)"
        case let e as StoreMappingError: "the App Store's answer cannot be mapped: \(e)"
        default: nil
        }
    }

    func verdict(_ p: ReconciliationStore.KnownPurchase, ledger: LedgerPurchase, now: Timestamp) async throws -> StoreVerdict {
        let statuses: [AppStoreServerAPIClient.SubscriptionStatus]
        do {
            statuses = try await client.subscriptionStatuses(transactionID: p.purchaseID)
        } catch let failure as AppStoreServerAPIClient.Failure
            where failure.status == nil && failure.message.contains("not an App Store transaction id")
        {
            throw PurchaseNotComparable(failure.message)
        } catch let failure as AppStoreServerAPIClient.Failure where failure.status == 404 || failure.status == 400 {
            throw PurchaseNotComparable("the App Store does not know original transaction \(p.purchaseID): \(failure)")
        }
        guard let status = statuses.first(where: { $0.originalTransactionID == p.purchaseID }) ?? statuses.first,
            let signed = status.signedTransactionInfo
        else {
            throw PurchaseNotComparable("the App Store answers no subscription status for original transaction \(p.purchaseID)")
        }
        let t = try await verify(signed, now: now)
        let renewal = try await status.signedRenewalInfo.asyncMap { try await verify($0, now: now) }
        let meta: [String: JSONValue] = ["store": "apple", "origin": "reconciliation", "raw": .object(t)]
        let env = ledger.environment

        var state = PurchaseState()
        state.expiresAt = Self.time(t["expiresDate"])
        state.refunded = t["revocationDate"] != nil
        if let renewal, let auto = renewal["autoRenewStatus"]?.numberValue?.int64Value { state.autoRenew = auto == 1 }
        // 1 active, 2 expired, 3 billing retry, 4 billing grace period, 5 revoked.
        switch status.status {
        case 1?, 4?: state.active = true
        case 2?, 3?, 5?: state.active = false
        default: break
        }
        state.lapsed = status.status == 2
        if state.refunded == true { state.lapsed = nil }

        var verdict = StoreVerdict(state: state)
        guard let txn = t["transactionId"]?.stringValue else { throw PurchaseNotComparable("the latest transaction has no transactionId") }
        // The transactions the ledger lacks, oldest first: the latest alone, or all of them from the history.
        var missing: [EventDraft] = []
        if !ledger.transactionIDs.contains(txn) {
            missing = try await history(p.purchaseID, lacking: ledger.transactionIDs, now: now, env: env)
            if !missing.contains(where: { $0.idempotencyKey == "apple:txn:\(txn)" }) {
                missing.append(try AppleNotificationMapper.transactionDraft(t, environment: env, meta: meta))
            }
        }
        verdict.repairs[.expiresAt] = missing
        verdict.repairs[.active] = missing
        if let l = ledger.state.expiresAt, let s = state.expiresAt, l > s, ledger.transactionIDs.contains(txn) {
            verdict.reasons[.expiresAt] =
                "the ledger's period ends at \(l.rfc3339), after the App Store's \(s.rfc3339): events are never edited (a support cancellation ends it)"
        }
        if t["revocationDate"] != nil {
            let revoke = try AppleNotificationMapper.revokedDraft(t, environment: env, meta: meta)
            verdict.repairs[.refunded] = missing + [revoke]
            verdict.repairs[.active, default: []].append(revoke)
        }
        if let renewal, let enabled = state.autoRenew {
            // Apple's renewal info does not say when auto-renew changed: the time Apple signed it, at or after the change.
            let at = Self.time(renewal["signedDate"]) ?? now
            let product = renewal["autoRenewProductId"]?.stringValue ?? t["productId"]?.stringValue
            verdict.repairs[.autoRenew] =
                missing + [
                    EventDraft(
                        type: .autoRenewChanged, occurredAt: at, environment: env,
                        idempotencyKey: "apple:reconcile:auto_renew:\(p.purchaseID):\(at.microseconds / 1000)", productID: product,
                        originalTransactionID: p.purchaseID,
                        data: EventData.AutoRenewChanged(enabled: enabled, productID: product).object,
                        metadata: ["store": "apple", "origin": "reconciliation", "raw_renewal": .object(renewal)])
                ]
        }
        if status.status == 2, let expired = state.expiresAt {
            let reason: String =
                switch renewal?["expirationIntent"]?.numberValue?.int64Value {
                case 1?: "voluntary"
                case 2?: "billing"
                case 3?: "price_increase"
                case 4?: "product_unavailable"
                default: "other"
                }
            let product = t["productId"]?.stringValue
            verdict.repairs[.lapsed] =
                missing + [
                    EventDraft(
                        type: .expiration, occurredAt: expired, environment: env, idempotencyKey: "apple:reconcile:expired:\(txn)",
                        productID: product,
                        originalTransactionID: p.purchaseID,
                        data: EventData.Expiration(productID: product, reason: reason).object, metadata: meta)
                ]
        }
        return verdict
    }

    /// The history's transactions (and their refunds) that the ledger lacks, oldest first.
    func history(_ original: String, lacking known: Set<String>, now: Timestamp, env: LedgerEnvironment) async throws -> [EventDraft] {
        var drafts: [EventDraft] = []
        var revision: String?
        var cursor = PageCursor("transaction history of \(original)", maxPages: AppleSync.maxPages)
        repeat {
            let page = try await client.transactionHistory(transactionID: original, revision: revision)
            for signed in page.signedTransactions {
                let t = try await verify(signed, now: now)
                guard let id = t["transactionId"]?.stringValue, !known.contains(id) else { continue }
                let meta: [String: JSONValue] = ["store": "apple", "origin": "reconciliation", "raw": .object(t)]
                drafts.append(try AppleNotificationMapper.transactionDraft(t, environment: env, meta: meta))
                if t["revocationDate"] != nil { drafts.append(try AppleNotificationMapper.revokedDraft(t, environment: env, meta: meta)) }
            }
            revision = try cursor.next(hasMore: page.hasMore, token: page.revision)
        } while revision != nil
        return drafts
    }

    func verify(_ jws: String, now: Timestamp) async throws -> [String: JSONValue] {
        let o = try await verifier.verify(jws, now: now)
        if let bundleID, let b = o["bundleId"]?.stringValue, b != bundleID {
            throw AppleSignatureError("transaction for bundle \"\(b)\", not \"\(bundleID)\"")
        }
        return o
    }

    /// An App Store time (milliseconds), within the ledger's range.
    static func time(_ value: JSONValue?) -> Timestamp? {
        guard let ms = value?.numberValue?.int64Value else { return nil }
        let (us, overflow) = ms.multipliedReportingOverflow(by: 1000)
        guard !overflow else { return nil }
        let t = Timestamp(microseconds: us)
        return t >= .minimum && t <= .maximum ? t : nil
    }
}

extension Optional where Wrapped: Sendable {
    fileprivate func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
