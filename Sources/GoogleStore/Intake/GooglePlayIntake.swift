import AsyncHTTPClient
import Foundation
import LedgerCore
import LedgerStore
import Logging
import Metrics
import PostgresNIO
import ServiceLifecycle
import StoreAdapters

/// What `serve` is told about Google Play (docs/google.md). Without an audience and a push service account
/// the notification route answers 503 `not_configured`; without a service-account file nothing can be resolved.
public struct GooglePlayConfiguration: Sendable {
    public var packageNames: Set<String>
    public var serviceAccount: GoogleServiceAccount?
    public var apiBaseURL: String
    public var pubsubAudience: String?
    public var pubsubServiceAccount: String?
    public var oidcJWKS: String
    /// First delay before a notification whose resolution failed is tried again; doubled each time, at most an hour.
    public var retryBase: Duration
    /// How often the background resolver looks for notifications that are due.
    public var pollInterval: Duration
    /// Delays between attempts of one API call.
    public var callBackoff: [Duration]
    /// How often `serve` reads voided purchases (nil: never).
    public var reconcileInterval: Duration?

    public static let defaultAPIBaseURL = "https://androidpublisher.googleapis.com"

    public init(
        packageNames: Set<String> = [], serviceAccount: GoogleServiceAccount? = nil, apiBaseURL: String = defaultAPIBaseURL,
        pubsubAudience: String? = nil, pubsubServiceAccount: String? = nil, oidcJWKS: String = GoogleKeySource.defaultURL,
        retryBase: Duration = .seconds(5), pollInterval: Duration = .seconds(5),
        callBackoff: [Duration] = [.milliseconds(200), .milliseconds(800), .seconds(2)], reconcileInterval: Duration? = .seconds(3600)
    ) {
        self.reconcileInterval = reconcileInterval
        self.packageNames = packageNames
        self.serviceAccount = serviceAccount
        self.apiBaseURL = apiBaseURL
        self.pubsubAudience = pubsubAudience
        self.pubsubServiceAccount = pubsubServiceAccount
        self.oidcJWKS = oidcJWKS
        self.retryBase = retryBase
        self.pollInterval = pollInterval
        self.callBackoff = callBackoff
    }

    /// Whether pushes can be verified (and so accepted at all).
    public var acceptsPushes: Bool { pubsubAudience != nil && pubsubServiceAccount != nil && !packageNames.isEmpty }
}

/// Google Play on the intake seam: verifies pushes, records each notification in the inbox before anything
/// else, resolves it with the Play Developer API and appends what Google's state says (docs/google.md).
public final class GooglePlay: Sendable {
    public static let store = "google"

    public let configuration: GooglePlayConfiguration
    let intake: EventIntake
    let keys: GoogleKeySource
    let api: GooglePlayAPI?
    let logger: Logger
    /// The configured clock (`serve`'s, a test's): a push token's validity, the time of a submitted purchase
    /// or a voided purchase Google gave no time for, and how far back Google keeps voided purchases. The
    /// Play API's own JWT `iat` stays real time (GooglePlayAPI): Google checks it.
    let clock: WallClock
    let wakeups = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))

    public init(configuration: GooglePlayConfiguration, intake: EventIntake, http: HTTPClient, logger: Logger, clock: WallClock = .system) {
        self.configuration = configuration
        self.clock = clock
        self.intake = intake
        self.logger = logger
        keys = GoogleKeySource(location: configuration.oidcJWKS, http: http, logger: logger)
        api = configuration.serviceAccount.map {
            GooglePlayAPI(baseURL: configuration.apiBaseURL, account: $0, http: http, logger: logger, backoff: configuration.callBackoff)
        }
    }

    /// Over the process-wide HTTP client.
    public convenience init(configuration: GooglePlayConfiguration, intake: EventIntake, logger: Logger, clock: WallClock = .system) {
        self.init(configuration: configuration, intake: intake, http: HTTPClient.shared, logger: logger, clock: clock)
    }

    /// What became of a notification.
    public enum Outcome: Sendable {
        /// Verified, but for a package this ledger does not serve: recorded as `ignored`.
        case ignored
        case duplicate
        /// Recorded; Google could not be asked yet: the background resolver will.
        case received
        case notice
        case pending
        case applied(subscriber: String, events: [RecordedEvent])
        /// Recorded, but Google refused to say more (a token it does not know): kept as `failed`.
        case failed(String)

        public var name: String {
            switch self {
            case .ignored: "ignored"
            case .duplicate: "duplicate"
            case .received: "received"
            case .notice: "notice"
            case .pending: "pending"
            case .applied: "applied"
            case .failed: "failed"
            }
        }
    }

    /// Verifies a push's `Authorization: Bearer <OIDC token>`; the error says why not (401).
    public func verifyPush(bearer token: String) async throws -> [String: JSONValue] {
        guard let audience = configuration.pubsubAudience, let email = configuration.pubsubServiceAccount else {
            throw GoogleTokenError("Google Play pushes are not configured")
        }
        let jwks: GoogleJWKS
        do {
            jwks = try await keys.keys(for: GoogleOIDCVerifier.keyID(of: token))
        } catch {
            throw GoogleTokenError("Google's signing keys could not be read: \(error)")
        }
        return try GoogleOIDCVerifier(audience: audience, serviceAccountEmail: email)
            .verify(token, keys: jwks, now: clock.now().microseconds / 1_000_000)
    }

    /// A push's `Authorization: Bearer <OIDC token>` checked (Pub/Sub's service account, the audience); the
    /// error says why not (401). Before the body is read.
    public func authorizePush(header: String, logger: Logger) async throws(GoogleTokenError) {
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw GoogleTokenError("the Authorization header must be 'Bearer <Google OIDC token>'")
        }
        do {
            _ = try await verifyPush(bearer: String(parts[1]).trimmingCharacters(in: CharacterSet(charactersIn: " \t")))
        } catch {
            logger.warning("google push refused", metadata: ["error.message": "\(error)"])
            throw GoogleTokenError("the Pub/Sub OIDC token is not valid: \(error)")
        }
    }

    /// Why an authorized push's body is not a notification: 400 (not a JSON object) or 422 (not a push).
    public enum PushRefusal: Error, Sendable {
        case body
        case mapping(StoreMappingError)
    }

    /// An authorized push's body read: the notification and its `data` as received (logged).
    public func readPush(_ bytes: [UInt8], logger: Logger) throws(PushRefusal) -> (notification: GoogleNotification, raw: String) {
        guard case .object(let body)? = try? JSONParser.parse(bytes[...], maxDepth: 32) else { throw .body }
        let n: GoogleNotification
        do throws(StoreMappingError) {
            n = try GoogleNotification(pushBody: body)
        } catch {
            throw .mapping(error)
        }
        logger.info(
            "google notification",
            metadata: ["google.message_id": "\(n.messageID)", "google.kind": "\(n.kind)", "google.type": "\(n.subtype ?? "")"])
        return (n, body["message"]?.objectValue?["data"]?.stringValue ?? "")
    }

    /// Records a verified notification (committed before this returns) for the background resolver, which
    /// `wake` wakes at once: `received` (answered 202), or `ignored`, `duplicate`, `notice`.
    public func receive(_ n: GoogleNotification, raw: String, wake: Bool = true) async throws -> StoreOutcome {
        guard configuration.packageNames.contains(n.packageName) else {
            _ = try await intake.inbox.recordIfNew(message(n, raw: raw, status: .ignored))
            Counter(label: "subledger_google_notifications_ignored_total").increment()
            logger.warning(
                "google notification for a package that is not configured: recorded as ignored",
                metadata: ["google.package_name": "\(n.packageName)", "google.message_id": "\(n.messageID)"])
            count(.ignored)
            return .ignored
        }
        let status: StoreInbox.Status = n.kind == "test" || n.kind == "unknown" ? .notice : .received
        // Pub/Sub waits 10 s by default for the answer: the notification is only recorded here, and resolved
        // by the background resolver (woken now), however long Google's API takes.
        let isNew = try await intake.inbox.recordIfNew(message(n, raw: raw, status: status))
        if !isNew {
            guard try await intake.inbox.status(store: Self.store, messageID: n.messageID) == .received else {
                count(.duplicate)
                return .duplicate
            }
        }
        if status == .notice {
            count(.notice)
            return .notice
        }
        if wake { self.wake() }
        count(.received)
        return .received
    }

    /// Wakes the background resolver (`GoogleResolverService`): a notification waits in the inbox.
    public func wake() { wakeups.continuation.yield() }

    /// Resolves every notification that is due now; returns how many were tried.
    @discardableResult
    public func resolveDue(limit: Int = 20) async throws -> Int {
        var tried = 0
        while true {
            let due = try await intake.inbox.due(store: Self.store, limit: limit)
            for m in due {
                count(await resolve(stored: m))
            }
            tried += due.count
            if due.count < limit { return tried }
        }
    }

    /// Resolves a notification the inbox kept (the background resolver's step).
    public func resolve(stored m: StoreInbox.Message) async -> Outcome {
        do {
            let n = try GoogleNotification(messageID: m.messageID, notification: m.payload)
            return await resolve(n, raw: m.raw, attempts: m.attempts)
        } catch {
            try? await intake.inbox.attemptFailed(
                store: Self.store, messageID: m.messageID, error: "\(error)", retryAfter: .zero, giveUp: true)
            return .failed("\(error)")
        }
    }

    /// Asks Google and appends; a failure is recorded on the inbox row (retried later, or `failed`).
    func resolve(_ n: GoogleNotification, raw: String, attempts: Int) async -> Outcome {
        do {
            return try await resolveOnce(n, raw: raw)
        } catch let error as GooglePlayError {
            if case .refused = error {
                return await failed(n, error: "\(error)", attempts: attempts, giveUp: true)
            }
            return await failed(n, error: "\(error)", attempts: attempts, giveUp: false)
        } catch let error as StoreMappingError {
            return await failed(n, error: "\(error)", attempts: attempts, giveUp: true)
        } catch let error as StoreLinks.Conflict {
            // The token is linked to another subscriber than the one Google names: for an operator.
            return await failed(n, error: "\(error)", attempts: attempts, giveUp: true)
        } catch let error as EventValidationError {
            // What the mapping produced is not a valid batch (a repeated key): retrying cannot help.
            return await failed(n, error: "\(error)", attempts: attempts, giveUp: true)
        } catch let error as PSQLError {
            return await failed(n, error: Self.describe(error), attempts: attempts, giveUp: false)
        } catch {
            // The catalog lacks the product, the database refused: try again later.
            return await failed(n, error: "\(error)", attempts: attempts, giveUp: false)
        }
    }

    private func failed(_ n: GoogleNotification, error: String, attempts: Int, giveUp: Bool) async -> Outcome {
        let exponent = min(attempts, 10)
        let delay = min(configuration.retryBase * (1 << exponent), .seconds(3600))
        logger.warning(
            "google notification not resolved yet",
            metadata: [
                "google.message_id": "\(n.messageID)", "google.attempts": "\(attempts + 1)", "error.message": "\(error)",
                "google.gave_up": "\(giveUp)",
            ])
        do {
            try await intake.inbox.attemptFailed(store: Self.store, messageID: n.messageID, error: error, retryAfter: delay, giveUp: giveUp)
        } catch {
            logger.error("google inbox update failed", metadata: ["google.message_id": "\(n.messageID)", "error.message": "\(error)"])
        }
        return giveUp ? .failed(error) : .received
    }

    func resolveOnce(_ n: GoogleNotification, raw: String) async throws -> Outcome {
        guard let api else { throw GooglePlayError.unavailable("no service account is configured (--google-service-account-file)") }
        guard let token = n.purchaseToken else { return try await ingest(n, raw: raw, drafts: [], environment: .production, hint: nil) }
        switch n.kind {
        case "subscription":
            let purchase = try await api.subscription(package: n.packageName, token: token)
            let r = try GoogleSubscriptionMapper.resolve(
                n, purchase: purchase, orders: await orders(of: purchase, package: n.packageName), periods: await periods(of: purchase))
            var drafts = r.drafts
            if let linked = r.linkedPurchaseToken {
                // The new token belongs to the old one's subscriber (an upgrade, a top-up, a re-subscription):
                // linked in the intake's transaction (`GoogleStore.map`).
                if let first = drafts.first(where: { $0.type == .purchase }) {
                    let old = try await api.subscription(package: n.packageName, token: linked)
                    let cause = GoogleSubscriptionMapper.linkCause(new: purchase, old: old)
                    logger.info(
                        "google linked purchase token",
                        metadata: ["google.message_id": "\(n.messageID)", "google.link_cause": "\(cause.rawValue)"])
                    if cause == .replacement {
                        // Replaced mid-period: the old order's time ends when the new one starts.
                        let currency =
                            (purchase["lineItems"]?.arrayValue?.first?.objectValue?["autoRenewingPlan"]?.objectValue?["recurringPrice"]?
                            .objectValue?["currencyCode"]?.stringValue).flatMap { Identifiers.isValidCurrency($0) ? $0 : nil }
                        drafts += GoogleSubscriptionMapper.replacement(old: old, at: first.occurredAt, currency: currency, n: n)
                    }
                }
            }
            let outcome = try await ingest(
                n, raw: raw, drafts: drafts, environment: r.environment, hint: r.subscriberHint, linkedPurchaseToken: r.linkedPurchaseToken)
            if case .applied = outcome, let product = r.acknowledgeProductID {
                do {
                    try await api.acknowledge(package: n.packageName, productID: product, token: token)
                } catch {
                    logger.warning(
                        "google purchase not acknowledged yet (retried when Google next notifies)",
                        metadata: ["google.message_id": "\(n.messageID)", "error.message": "\(error)"])
                }
            }
            return outcome
        case "voided_purchase":
            return try await resolveVoided(n, raw: raw, token: token, api: api)
        case "one_time_product" where n.subtype == "1":
            guard let sku = n.productID else { return try await ingest(n, raw: raw, drafts: [], environment: .production, hint: nil) }
            let purchase = try await api.product(package: n.packageName, productID: sku, token: token)
            let order = try await readOrder(package: n.packageName, id: purchase["orderId"]?.stringValue)
            let r = try GoogleProductMapper.resolve(n, product: sku, purchase: purchase, order: order)
            let outcome = try await ingest(n, raw: raw, drafts: r.drafts, environment: r.environment, hint: r.subscriberHint)
            if case .applied = outcome, let product = r.acknowledgeProductID {
                do {
                    try await api.acknowledgeProduct(package: n.packageName, productID: product, token: token)
                } catch {
                    logger.warning(
                        "google product purchase not acknowledged yet",
                        metadata: ["google.message_id": "\(n.messageID)", "error.message": "\(error)"])
                }
            }
            return outcome
        default:
            // Cancelled pending one-time purchases, test notifications: kept as notices.
            return try await ingest(n, raw: raw, drafts: [], environment: .production, hint: nil)
        }
    }

    /// A resolved notification through the intake (one transaction: recorded, linked, appended, marked).
    func ingest(
        _ n: GoogleNotification, raw: String, drafts: [EventDraft], environment: LedgerEnvironment, hint: String?,
        linkedPurchaseToken: String? = nil
    ) async throws -> Outcome {
        let message = GoogleStore.Message(
            notification: n, raw: raw, drafts: drafts, environment: environment, subscriberHint: hint,
            linkedPurchaseToken: linkedPurchaseToken)
        switch try await intake.stores.ingest(GoogleStore(), message, logger: logger).outcome {
        case .duplicate: return .duplicate
        case .notice: return .notice
        case .pending: return .pending
        case .ignored: return .ignored
        case .received, .refused: return .received
        case .applied(let s, let e): return .applied(subscriber: s, events: e)
        }
    }

    /// A purchase token the app submits for a subscriber (`POST /v1/stores/google/purchases`).
    public struct Submission: Sendable {
        public var subscriber: String
        public var package: String
        public var productID: String
        public var token: String
    }

    /// A submission's body read: every field present and bounded, the subscriber id valid, the package configured.
    public func readSubmission(_ body: [String: JSONValue]) throws(StoreMappingError) -> Submission {
        func field(_ name: String, max: Int = GoogleNotification.maxIdentifierBytes) throws(StoreMappingError) -> String {
            guard let s = body[name]?.stringValue, !s.isEmpty, s.utf8.count <= max else {
                throw StoreMappingError(field: name, reason: "is required (1–\(max) bytes)")
            }
            return s
        }
        let subscriber = try field("subscriber_id")
        guard Identifiers.isValidSubscriberID(subscriber) else {
            throw StoreMappingError(field: "subscriber_id", reason: Identifiers.subscriberIDRule)
        }
        let package = try field("package_name")
        let product = try field("product_id")
        let token = try field("purchase_token", max: GoogleNotification.maxTokenBytes)
        guard configuration.packageNames.contains(package) else {
            throw StoreMappingError(field: "package_name", reason: "\(package) is not configured")
        }
        return Submission(subscriber: subscriber, package: package, productID: product, token: token)
    }

    /// A client-submitted purchase: Google's state of the token, linked to `subscriber` and appended; the
    /// token's notifications that waited for a subscriber are then marked applied (the state covers them).
    public func submit(subscriber: String, package: String, productID: String, token: String) async throws -> [RecordedEvent] {
        guard let api else { throw GooglePlayError.configuration("Google Play is not configured (--google-service-account-file)") }
        var n = try GoogleNotification(
            messageID: "purchase",
            notification: [
                "packageName": .string(package), "eventTimeMillis": .string(String(clock.now().microseconds / 1000)),
            ])
        n.purchaseToken = token
        let r: GoogleResolution
        do {
            let purchase = try await api.subscription(package: package, token: token)
            let products = purchase["lineItems"]?.arrayValue?.compactMap { $0.objectValue?["productId"]?.stringValue } ?? []
            guard products.contains(productID) else {
                throw StoreMappingError(
                    field: "product_id", reason: "the purchase token is for \(products.joined(separator: ", ")), not \(productID)")
            }
            r = try GoogleSubscriptionMapper.resolve(
                n, purchase: purchase, orders: await orders(of: purchase, package: package), periods: await periods(of: purchase))
        } catch GooglePlayError.refused(let status, _) where status == 404 || status == 410 {
            // Not a subscription token: a one-time product's, or unknown (then products.get refuses it too).
            let purchase = try await api.product(package: package, productID: productID, token: token)
            let order = try await readOrder(package: package, id: purchase["orderId"]?.stringValue)
            r = try GoogleProductMapper.resolve(n, product: productID, purchase: purchase, order: order)
        }
        let isProduct = r.drafts.contains { $0.metadata["origin"] == "one_time_product" }
        // Claimed under the transfer policy (a purchase another subscriber keeps: 409, nothing stored), then
        // linked, Google's state appended, and the token's waiting notifications marked applied (the state
        // covers them), in one transaction.
        let events: [RecordedEvent]
        do {
            events = try await intake.stores.claim(
                GoogleStore(), accounts: [token], to: subscriber, by: "purchase", drafts: r.drafts,
                at: r.drafts.map(\.occurredAt).min() ?? EventIntake.now(), logger: logger
            ).events
        } catch let error as PSQLError {
            logger.error("google purchase not stored", metadata: ["error.message": "\(Self.describe(error))"])
            throw error
        }
        if let product = r.acknowledgeProductID {
            do {
                if isProduct {
                    try await api.acknowledgeProduct(package: package, productID: product, token: token)
                } else {
                    try await api.acknowledge(package: package, productID: product, token: token)
                }
            } catch {
                logger.warning("google purchase not acknowledged yet", metadata: ["error.message": "\(error)"])
            }
        }
        return events
    }

    /// Most pages of voided purchases (1,000 each) one reconciliation reads per package.
    public static let maxVoidedPages = 1_000

    /// Reads `purchases.voidedpurchases.list` for every configured package (from `since`, else Google's
    /// default of 30 days) and feeds each voided order through the inbox as a voided-purchase notification
    /// (`voided:<orderId>`), so refunds whose notification was missed still land, once. Returns how many
    /// voided purchases were read and how many were new to the inbox.
    public func reconcile(since: Timestamp?) async throws -> (read: Int, new: Int) {
        guard let api else { throw GooglePlayError.configuration("Google Play is not configured (--google-service-account-file)") }
        var read = 0
        var new = 0
        for package in configuration.packageNames.sorted() {
            var pageToken: String?
            var cursor = PageCursor("voided purchases of \(package)", maxPages: Self.maxVoidedPages)
            repeat {
                let page = try await api.voidedPurchases(package: package, since: since.map { $0.microseconds / 1000 }, pageToken: pageToken)
                for v in page["voidedPurchases"]?.arrayValue?.compactMap(\.objectValue) ?? [] {
                    guard let order = v["orderId"]?.stringValue, let token = v["purchaseToken"]?.stringValue else { continue }
                    read += 1
                    let voided: [String: JSONValue] = [
                        "purchaseToken": .string(token), "orderId": .string(order),
                        "refundType": v["voidedQuantity"] == nil ? 1 : 2,
                    ]
                    let n: GoogleNotification
                    do {
                        n = try GoogleNotification(
                            messageID: "voided:\(order)",
                            notification: [
                                "packageName": .string(package),
                                "eventTimeMillis": v["voidedTimeMillis"] ?? .string(String(clock.now().microseconds / 1000)),
                                "voidedPurchaseNotification": .object(voided),
                            ])
                    } catch {
                        logger.warning("google voided purchase skipped", metadata: ["google.order_id": "\(order)", "error.message": "\(error)"])
                        continue
                    }
                    // Resolved here, not by the background resolver: `subledger google reconcile` runs without one.
                    switch try await receive(n, raw: "", wake: false) {
                    case .duplicate: continue
                    case .received: count(await resolve(n, raw: "", attempts: 0))
                    default: break
                    }
                    new += 1
                }
                let next = page["tokenPagination"]?.objectValue?["nextPageToken"]?.stringValue
                pageToken = try cursor.next(hasMore: next != nil, token: next)
            } while pageToken != nil
        }
        Counter(label: "subledger_google_reconciled_voided_total").increment(by: new)
        return (read, new)
    }

    /// An order (`orders.get`); nil when Google does not give it (the orders permission may be missing).
    /// Unavailability is thrown: the notification is tried again later.
    func readOrder(package: String, id: String?) async throws -> [String: JSONValue]? {
        guard let api, let id, Identifiers.problem(id) == nil else { return nil }
        do {
            return try await api.order(package: package, orderID: id)
        } catch GooglePlayError.refused(let status, let message) {
            logger.info("google order not read", metadata: ["google.order_id": "\(id)", "http.status": "\(status)", "error.message": "\(message)"])
            return nil
        }
    }

    /// The orders a subscription's line items name, each read once (line items of one order share it), and
    /// for a renewal whose order states no period the previous order (its end is this one's start). An
    /// order that cannot be read is left out: the catalog's price stands (logged).
    func orders(of purchase: [String: JSONValue], package: String) async -> [String: [String: JSONValue]] {
        var out: [String: [String: JSONValue]] = [:]
        var tried: Set<String> = []
        func read(_ id: String) async {
            guard tried.insert(id).inserted else { return }
            do {
                if let o = try await readOrder(package: package, id: id) { out[id] = o }
            } catch {
                logger.info("google order not read; the catalog's price stands", metadata: ["google.order_id": "\(id)", "error.message": "\(error)"])
            }
        }
        for item in purchase["lineItems"]?.arrayValue?.compactMap(\.objectValue) ?? [] {
            guard let id = item["latestSuccessfulOrderId"]?.stringValue, let product = item["productId"]?.stringValue else { continue }
            await read(id)
            if GoogleSubscriptionMapper.servicePeriod(out[id], product: product) == nil, let previous = GoogleSubscriptionMapper.previousOrder(id) {
                await read(previous)
            }
        }
        return out
    }

    /// The catalog's billing periods of a subscription's products (the last resort for a renewal's start).
    func periods(of purchase: [String: JSONValue]) async -> [String: ISODuration] {
        let products = Set((purchase["lineItems"]?.arrayValue ?? []).compactMap { $0.objectValue?["productId"]?.stringValue })
        guard !products.isEmpty, let latest = try? await intake.catalog.latest(products) else { return [:] }
        return latest.compactMapValues(\.period)
    }

    /// A voided purchase (a refund or chargeback): a `refund` of its order only once Google confirms it
    /// (the order is refunded, or `voidedpurchases.list` names it); the push's OIDC token is not bound to
    /// its body. Unconfirmed, it is kept as a `store_notice` saying why. Subscriptions and one-time products
    /// alike: the order names the product and its kind.
    func resolveVoided(_ n: GoogleNotification, raw: String, token: String, api: GooglePlayAPI) async throws -> Outcome {
        let order = try await readOrder(package: n.packageName, id: n.orderID)
        let item = order?["lineItems"]?.arrayValue?.first?.objectValue
        var product = item?["productId"]?.stringValue
        var env = LedgerEnvironment.production
        let oneTime = item.map { $0["subscriptionDetails"] == nil && ($0["oneTimePurchaseDetails"] != nil || n.subtype == "2") } ?? (n.subtype == "2")
        if oneTime {
            if let product, let p = try? await api.product(package: n.packageName, productID: product, token: token) {
                env = p["purchaseType"]?.numberValue?.int64Value == 0 ? .sandbox : .production
            }
        } else {
            do {
                let p = try await api.subscription(package: n.packageName, token: token)
                env = p["testPurchase"] != nil ? .sandbox : .production
                product = product ?? p["lineItems"]?.arrayValue?.first?.objectValue?["productId"]?.stringValue
            } catch GooglePlayError.refused(let status, _) where status == 404 || status == 410 {
                // Not a subscription's token, and no order to say whose: nothing to refund by.
                if product == nil { return try await ingest(n, raw: raw, drafts: [], environment: .production, hint: nil) }
            }
        }
        guard let product else { return try await ingest(n, raw: raw, drafts: [], environment: env, hint: nil) }
        let state = order?["state"]?.stringValue
        var at = GoogleSubscriptionMapper.refundTime(order)
        var confirmed = state == "REFUNDED" || state == "PARTIALLY_REFUNDED" || state == "CANCELED"
        if !confirmed, let listed = try await listedVoid(n) {
            confirmed = true
            at = listed
        }
        guard confirmed else {
            logger.warning(
                "google voided purchase not confirmed by Google: kept as a notice",
                metadata: [
                    "google.message_id": "\(n.messageID)", "google.order_id": "\(n.orderID ?? "")", "google.order_state": "\(state ?? "unknown")",
                ])
            let notice = GoogleSubscriptionMapper.notice(
                n, env: env, kind: "void_unconfirmed", order: n.orderID, key: "google:notice:\(n.messageID)",
                meta: ["store": "google", "origin": "voided_purchase", "message_id": .string(n.messageID)],
                detail: [
                    EventDataKey.productID: .string(product), "order_state": state.map(JSONValue.string) ?? .null,
                    "why": "orders.get does not say the order was refunded and voidedpurchases.list does not name it",
                ])
            return try await ingest(n, raw: raw, drafts: [notice], environment: env, hint: nil)
        }
        var drafts = GoogleSubscriptionMapper.voided(n, product: product, environment: env, at: at)
        if let order {
            for i in drafts.indices { GoogleOrderPricing.applyRefund(order: order, to: &drafts[i]) }
        }
        return try await ingest(n, raw: raw, drafts: drafts, environment: env, hint: nil)
    }

    /// Google's time of voiding when `voidedpurchases.list` (the 30 days it keeps, a few pages) names the
    /// notification's order.
    func listedVoid(_ n: GoogleNotification) async throws -> Timestamp? {
        guard let api, let order = n.orderID else { return nil }
        let floor = clock.now().microseconds / 1000 - 30 * 86_400_000 + 60_000
        let since = max(n.eventTime.microseconds / 1000 - 30 * 86_400_000, floor)
        var pageToken: String?
        var cursor = PageCursor("voided purchases of \(n.packageName)", maxPages: 10)
        repeat {
            let page: [String: JSONValue]
            do {
                page = try await api.voidedPurchases(package: n.packageName, since: since, pageToken: pageToken)
            } catch GooglePlayError.refused {
                return nil
            }
            for v in page["voidedPurchases"]?.arrayValue?.compactMap(\.objectValue) ?? [] where v["orderId"]?.stringValue == order {
                let millis = v["voidedTimeMillis"]?.stringValue.flatMap { Int64($0) } ?? v["voidedTimeMillis"]?.numberValue?.int64Value
                return millis.flatMap(GoogleTime.millis) ?? n.eventTime
            }
            let next = page["tokenPagination"]?.objectValue?["nextPageToken"]?.stringValue
            pageToken = try cursor.next(hasMore: next != nil, token: next)
        } while pageToken != nil
        return nil
    }

    /// A database error with its SQLSTATE and server message (PostgresNIO's description hides both).
    static func describe(_ error: PSQLError) -> String {
        let state = error.serverInfo?[.sqlState] ?? "none"
        let message = error.serverInfo?[.message] ?? "\(error.code)"
        return "database error \(state): \(message)"
    }

    private func message(_ n: GoogleNotification, raw: String, status: StoreInbox.Status) -> StoreInbox.Message {
        StoreInbox.Message(
            store: Self.store, messageID: n.messageID, kind: n.kind, subtype: n.subtype, environment: .production,
            accountID: n.purchaseToken, status: status, raw: raw, payload: n.payload)
    }

    private func count(_ outcome: Outcome) {
        Counter(label: "subledger_google_notifications_total", dimensions: [("outcome", outcome.name)]).increment()
    }
}
