import Foundation
import LedgerCore
import LedgerStore
import Logging
import StoreAdapters
import Synchronization

/// Google Play's side of a reconciliation (docs/switching.md "Reconcile"): `purchases.subscriptionsv2.get`
/// for each purchase token the ledger knows, and `purchases.voidedpurchases.list` since the previous run.
/// Google lists voided purchases for 30 days only: a run reads from the previous run's start (at most 30
/// days back, saying so when the gap was longer), so runs must come at least every 30 days.
public final class GoogleReconciliation: StoreReconciliation {
    let play: GooglePlay
    let marks: StoreSyncMarks
    let logger: Logger
    /// Voided orders read this run, by purchase token: the order and Google's time for the void.
    let voided = Mutex<[String: [(order: String, at: Timestamp)]]>([:])

    public static let markName = "reconcile_voided"
    /// How far back Google lists voided purchases.
    public static let voidedReach: Int64 = 30 * 86_400_000_000
    /// Kept clear of the reach, so a request at its edge is not refused by Google's own clock.
    static let margin: Int64 = 600_000_000

    public init(play: GooglePlay, marks: StoreSyncMarks, logger: Logger) {
        self.play = play
        self.marks = marks
        self.logger = logger
    }

    public var store: String { GooglePlay.store }
    public var environment: LedgerEnvironment { .production }

    /// The longest interval a schedule may have and still read every voided purchase.
    public static let maxInterval: Duration = .seconds(29 * 86_400)

    public func prepare(now: Timestamp) async throws -> Timestamp? {
        guard let api = play.api else {
            throw GooglePlayError.configuration("Google Play is not configured (--google-service-account-file)")
        }
        let floor = now.microseconds - Self.voidedReach + Self.margin
        let mark = try await marks.mark(store: store, name: Self.markName)
        if let mark, mark.microseconds < floor {
            logger.warning(
                "google voided purchases older than 30 days can no longer be listed: voids between the last reconciliation and the reach are not read",
                metadata: ["google.voided.last_run": "\(mark.rfc3339)", "google.voided.since": "\(Timestamp(microseconds: floor).rfc3339)"])
        }
        let since = Timestamp(microseconds: max(floor, mark?.microseconds ?? floor))
        var found: [String: [(order: String, at: Timestamp)]] = [:]
        for package in play.configuration.packageNames.sorted() {
            var pageToken: String?
            var cursor = PageCursor("voided purchases of \(package)", maxPages: GooglePlay.maxVoidedPages)
            repeat {
                let page = try await api.voidedPurchases(package: package, since: since.microseconds / 1000, pageToken: pageToken)
                for v in page["voidedPurchases"]?.arrayValue?.compactMap(\.objectValue) ?? [] {
                    guard let order = v["orderId"]?.stringValue, let token = v["purchaseToken"]?.stringValue else { continue }
                    let millis = v["voidedTimeMillis"]?.stringValue.flatMap { Int64($0) } ?? v["voidedTimeMillis"]?.numberValue?.int64Value
                    found[token, default: []].append((order, millis.flatMap(GoogleTime.millis) ?? now))
                }
                let next = page["tokenPagination"]?.objectValue?["nextPageToken"]?.stringValue
                pageToken = try cursor.next(hasMore: next != nil, token: next)
            } while pageToken != nil
        }
        voided.withLock { $0 = found }
        return since
    }

    public func finished(now: Timestamp) async throws {
        try await marks.advance(store: store, name: Self.markName, to: now)
    }

    /// A payload of Google Play that does not verify or cannot be mapped concerns that purchase alone: it is
    /// recorded as not comparable, and the run goes on.
    public func check(_ p: ReconciliationStore.KnownPurchase, ledger: LedgerPurchase, now: Timestamp) async throws -> StoreVerdict {
        try await PurchaseNotComparable.scoping(why: Self.scoped) { try await verdict(p, ledger: ledger, now: now) }
    }

    static func scoped(_ error: any Error) -> String? {
        (error as? StoreMappingError).map { "Google Play's answer cannot be mapped: \($0)" }
    }

    func verdict(_ p: ReconciliationStore.KnownPurchase, ledger: LedgerPurchase, now: Timestamp) async throws -> StoreVerdict {
        guard let api = play.api else { throw GooglePlayError.configuration("Google Play is not configured") }
        guard let token = p.account else { throw PurchaseNotComparable("the ledger recorded no purchase token for \(p.purchaseID)") }
        guard let package = p.package ?? (play.configuration.packageNames.count == 1 ? play.configuration.packageNames.first : nil) else {
            throw PurchaseNotComparable("the ledger recorded no package name for \(p.purchaseID)")
        }
        let purchase: [String: JSONValue]
        do {
            purchase = try await api.subscription(package: package, token: token)
        } catch GooglePlayError.refused(let status, let message) where status == 404 || status == 410 || status == 400 {
            throw PurchaseNotComparable("Google does not know the purchase token of \(p.purchaseID) (HTTP \(status): \(message))")
        }
        let items = purchase["lineItems"]?.arrayValue?.compactMap(\.objectValue) ?? []
        guard let item = items.first(where: { ($0["productId"]?.stringValue).map(ledger.products.contains) ?? false }) ?? items.first else {
            throw PurchaseNotComparable("Google's answer has no line items")
        }
        let product = item["productId"]?.stringValue
        let latestOrder = item["latestSuccessfulOrderId"]?.stringValue
        let state = purchase["subscriptionState"]?.stringValue ?? ""
        let env = ledger.environment
        let expiry = GoogleTime.parse(item["expiryTime"]?.stringValue)

        var s = PurchaseState()
        s.expiresAt = expiry
        if let plan = item["autoRenewingPlan"]?.objectValue { s.autoRenew = plan["autoRenewEnabled"]?.boolValue ?? false }
        switch state {
        case "SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_IN_GRACE_PERIOD": s.active = true
        case "SUBSCRIPTION_STATE_CANCELED": s.active = expiry.map { $0 > now }
        case "SUBSCRIPTION_STATE_ON_HOLD", "SUBSCRIPTION_STATE_PAUSED", "SUBSCRIPTION_STATE_EXPIRED": s.active = false
        default: break
        }
        s.lapsed = state == "SUBSCRIPTION_STATE_EXPIRED"
        let voids = voided.withLock { $0[token] ?? [] }
        // Absent from the 30-day list proves nothing: only a listed void of the latest order is compared.
        let latestVoid = voids.first { $0.order == (ledger.latestTransactionID ?? latestOrder) }
        if latestVoid != nil {
            // Voided: Google's expiry and state then tell the revocation, not the paid period.
            s.refunded = true
            s.lapsed = nil
            s.expiresAt = nil
        }
        var verdict = StoreVerdict(state: s)

        // An order the ledger lacks (a missed renewal): mapped as a renewal notification with Google's state.
        var missing: [EventDraft] = []
        if let latestOrder, !ledger.transactionIDs.contains(latestOrder) {
            let n = try notification(
                package: package, messageID: "reconcile:\(latestOrder)", now: now,
                ["subscriptionNotification": ["version": "1.0", "notificationType": 2, "purchaseToken": .string(token)]])
            let r = try GoogleSubscriptionMapper.resolve(
                n, purchase: purchase, orders: await play.orders(of: purchase, package: package), periods: await play.periods(of: purchase))
            missing = r.drafts.filter { $0.type == .purchase || $0.type == .renewal }
        }
        verdict.repairs[.expiresAt] = missing
        verdict.repairs[.active] = missing
        if let l = ledger.state.expiresAt, let e = expiry, l > e, missing.isEmpty {
            verdict.reasons[.expiresAt] =
                "the ledger's period ends at \(l.rfc3339), after Google's expiry \(e.rfc3339): events are never edited (a deferral is a credit; a support cancellation ends it)"
        }
        for v in voids {
            let n = try notification(
                package: package, messageID: "voided:\(v.order)", now: v.at,
                ["voidedPurchaseNotification": ["purchaseToken": .string(token), "orderId": .string(v.order), "refundType": 1]])
            var drafts = GoogleSubscriptionMapper.voided(n, product: product, environment: env, at: v.at)
            if let order = try? await play.readOrder(package: package, id: v.order) {
                for i in drafts.indices { GoogleOrderPricing.applyRefund(order: order, to: &drafts[i]) }
            }
            for i in drafts.indices { drafts[i].metadata["origin"] = "reconciliation" }
            verdict.repairs[.refunded, default: []] += drafts
            verdict.repairs[.active, default: []] += drafts
        }
        if let enabled = s.autoRenew, let product {
            let ctx = purchase["canceledStateContext"]?.objectValue
            if !enabled, let at = GoogleTime.parse(ctx?["userInitiatedCancellation"]?.objectValue?["cancelTime"]?.stringValue) {
                verdict.repairs[.autoRenew] = [
                    draft(
                        .autoRenewChanged, at, key: "google:reconcile:auto_renew:\(p.purchaseID):\(at.microseconds / 1000)", product: product,
                        p: p, env: env, EventData.AutoRenewChanged(enabled: false, productID: product).object)
                ]
            } else {
                verdict.reasons[.autoRenew] = "Google's state does not say when auto-renew was turned \(enabled ? "back on" : "off")"
            }
        }
        if state == "SUBSCRIPTION_STATE_EXPIRED", let at = expiry, let product, let order = latestOrder ?? ledger.latestTransactionID {
            let ctx = purchase["canceledStateContext"]?.objectValue
            let reason =
                ctx?["userInitiatedCancellation"] != nil ? "voluntary" : ctx?["systemInitiatedCancellation"] != nil ? "billing" : "other"
            verdict.repairs[.lapsed] =
                missing + [
                    draft(
                        .expiration, at, key: "google:expired:\(order)", product: product, p: p, env: env,
                        EventData.Expiration(productID: product, reason: reason).object)
                ]
        }
        return verdict
    }

    func draft(
        _ type: EventType, _ at: Timestamp, key: String, product: String, p: ReconciliationStore.KnownPurchase, env: LedgerEnvironment,
        _ data: [String: JSONValue]
    ) -> EventDraft {
        EventDraft(
            type: type, occurredAt: at, environment: env, idempotencyKey: key, productID: product, originalTransactionID: p.purchaseID,
            data: data, metadata: ["store": "google", "origin": "reconciliation", "purchase_token": p.account.map(JSONValue.string) ?? .null])
    }

    func notification(package: String, messageID: String, now: Timestamp, _ body: [String: JSONValue]) throws -> GoogleNotification {
        var n = body
        n["packageName"] = .string(package)
        n["eventTimeMillis"] = .string(String(now.microseconds / 1000))
        return try GoogleNotification(messageID: messageID, notification: n)
    }
}
