import AppleStore
import AsyncHTTPClient
@preconcurrency import Crypto
import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import StoreAdapters
import Synchronization
import Testing

/// One App Store world: a test CA signing payloads, an API key, the stand-in API, and a ledger on PostgreSQL.
struct AppleWorld: Sendable {
    static let bundleID = "com.example.app"
    let signer: AppleTestSigner
    let key = P256.Signing.PrivateKey()
    let standIn: AppleAPIStandIn
    let reader: AppleNotificationReader
    let verifier: AppleJWSVerifier

    init() throws {
        signer = try AppleTestSigner()
        standIn = AppleAPIStandIn(
            publicKey: key.publicKey, issuerID: "57246542-96fe-1a63-e053-0824d011072a", keyID: "2X9R4HXF34", bundleID: Self.bundleID)
        verifier = try AppleJWSVerifier(rootsDER: [signer.rootDER])
        // The scenarios are dated in 2025–2026: accept signatures of any age (the limit has its own tests).
        reader = AppleNotificationReader(verifier: verifier, bundleID: Self.bundleID, maxAge: .seconds(100 * 365 * 86_400))
    }

    var credentials: AppStoreAPICredentials {
        AppStoreAPICredentials(issuerID: standIn.issuerID, keyID: standIn.keyID, bundleID: Self.bundleID, privateKey: key)
    }

    static let products = [
        Product(
            productID: "pro.monthly", entitlements: ["pro"], kind: .autoRenewable, period: ISODuration("P1M"), priceMinor: 999,
            currency: "USD", commissionRate: JSONNumber(jsonText: "0.3")!),
        Product(
            productID: "pro.yearly", entitlements: ["pro"], kind: .autoRenewable, period: ISODuration("P1Y"), priceMinor: 9999,
            currency: "USD", commissionRate: JSONNumber(jsonText: "0.3")!),
    ]

    /// Runs `body` with the stand-in listening and an intake on a fresh ledger whose catalog has the products.
    func run(_ body: @escaping @Sendable (AppStoreServerAPIClient, EventIntake, PostgresClient) async throws -> Void) async throws {
        try await TestDatabase.with(role: "subledger_app") { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let intake = EventIntake(store: EventStore(database: database), catalog: CatalogStore(database: database), database: database)
            for p in Self.products { _ = try await intake.catalog.put(p) }
            try await standIn.serve { url in
                let http = HTTPClient(eventLoopGroupProvider: .singleton)
                do {
                    let api = AppStoreServerAPIClient(
                        http: http, credentials: credentials, baseURL: url, logger: TestDatabase.logger, firstBackoff: .milliseconds(50))
                    try await body(api, intake, client)
                    try await http.shutdown()
                } catch {
                    try? await http.shutdown()
                    throw error
                }
            }
        }
    }

    static func t(_ s: String) -> Timestamp { try! Timestamp(rfc3339: s) }
    static func ms(_ t: Timestamp) -> JSONValue { .number(JSONNumber(t.microseconds / 1000)) }
    /// The first of the month, `k` months after January 2025.
    static func month(_ k: Int) -> Timestamp { ReportCalendar.addingMonths(k, to: t("2025-01-01T00:00:00Z")) }

    /// A transaction as Apple signs it.
    static func transaction(
        _ txn: String, original: String, product: String = "pro.monthly", from: Timestamp, to: Timestamp, token: String,
        extra: [String: JSONValue] = [:]
    ) -> [String: JSONValue] {
        var t: [String: JSONValue] = [
            "transactionId": .string(txn), "originalTransactionId": .string(original), "productId": .string(product),
            "purchaseDate": ms(from), "originalPurchaseDate": ms(from), "expiresDate": ms(to), "type": "Auto-Renewable Subscription",
            "price": product == "pro.yearly" ? 99990 : 9990, "currency": "USD", "appAccountToken": .string(token),
            "inAppOwnershipType": "PURCHASED", "bundleId": .string(bundleID), "environment": "Production",
        ]
        for (k, v) in extra { t[k] = v }
        return t
    }

    func signedTransaction(_ t: [String: JSONValue], signedAt: Timestamp) -> String {
        var t = t
        t["signedDate"] = Self.ms(signedAt)
        return signer.sign(.object(t))
    }

    func notification(
        _ type: String, _ subtype: String? = nil, at: Timestamp, transaction: [String: JSONValue], environment: String = "Production"
    ) -> String {
        signer.notificationBody(type: type, subtype: subtype, signedDate: at, environment: environment, transaction: transaction)
            .objectValue!["signedPayload"]!.stringValue!
    }
}

/// A subscriber's windows without ids: what two ledgers of the same history must agree on.
func windows(_ client: PostgresClient, _ subscriber: String) async throws -> [String] {
    try await client.query(
        """
        SELECT entitlement || ' ' || kind || ' ' || start_at::text || ' ' || coalesce(end_at::text, '-') || ' ' ||
               coalesce(product_id, '-') || ' ' || coalesce(cut_cause, '-')
        FROM windows WHERE subscriber_id = \(subscriber) ORDER BY seq
        """, logger: TestDatabase.logger
    ).decode(String.self).all()
}

/// A subscriber's revenue facts without ids.
func revenueFacts(_ client: PostgresClient, _ subscriber: String) async throws -> [String] {
    // Written by the rollup worker as it follows the log: brought to its end first, as a report would.
    try await ReportRollupWorker.catchUpIfBehind(Database(client: client, logger: TestDatabase.logger))
    return try await client.query(
        """
        SELECT kind || ' ' || currency || ' ' || gross || ' ' || commission || ' ' || start_us || ' ' || coalesce(stop_us::text, '-')
               || ' ' || refund_amount::text
        FROM report_transactions WHERE subscriber_id = \(subscriber) ORDER BY start_us
        """, logger: TestDatabase.logger
    ).decode(String.self).all()
}

func eventCount(_ client: PostgresClient, _ subscriber: String) async throws -> Int {
    try await client.query("SELECT count(*)::int8 FROM events WHERE subscriber_id = \(subscriber)", logger: TestDatabase.logger)
        .decode(Int64.self).all().first.map(Int.init) ?? 0
}

extension AsyncSequence where Self: Sendable {
    func all() async throws -> [Element] {
        var out: [Element] = []
        for try await e in self { out.append(e) }
        return out
    }
}

@Suite("App Store Server API: backfill, sync, retries")
struct AppStoreServerAPITests {
    typealias W = AppleWorld

    @Test("a ledger that missed 3 of 10 notifications recovers them from the history; a second run appends nothing")
    func backfill() async throws {
        let world = try W()
        let token = UUID().uuidString.lowercased()
        let payloads = (0..<10).map { i in
            world.notification(
                i == 0 ? "SUBSCRIBED" : "DID_RENEW", i == 0 ? "INITIAL_BUY" : nil, at: Timestamp(microseconds: W.month(i).microseconds + 1_000_000),
                transaction: W.transaction("\(1000 + i)", original: "1000", from: W.month(i), to: W.month(i + 1), token: token))
        }
        world.standIn.state.withLock { $0.notificationPages = [Array(payloads[0..<5]), Array(payloads[5..<10])] }
        try await world.run { api, intake, client in
            for i in [0, 1, 2, 4, 5, 7, 8] {
                let n = try await world.reader.read(signedPayload: payloads[i], now: W.month(12))
                _ = try await intake.ingest(apple: n, signedPayload: payloads[i])
            }
            let before = try await windows(client, token)
            #expect(before.count == 7)
            let backfill = AppleBackfill(client: api, reader: world.reader, intake: intake, logger: TestDatabase.logger)
            let first = try await backfill.run(since: W.month(0), until: W.month(11), now: W.month(12))
            #expect(first.seen == 10 && first.new == 3 && first.duplicates == 7 && first.failed == 0 && first.pages == 2)
            let after = try await windows(client, token)
            #expect(after.count == 10)
            #expect(after.last?.hasPrefix("pro paid 2025-10-01 00:00:00+00 2025-11-01 00:00:00+00") == true, "\(after.last ?? "")")
            #expect(try await eventCount(client, token) == 10)

            let second = try await backfill.run(since: W.month(0), until: W.month(11), now: W.month(12))
            #expect(second.new == 0 && second.duplicates == 10)
            #expect(try await eventCount(client, token) == 10)
            #expect(try await windows(client, token) == after)
            // The history was asked for the range given, in Apple's milliseconds.
            let asked = world.standIn.state.withLock { $0.historyBodies.first }
            #expect(asked?.objectValue?["startDate"] == W.ms(W.month(0)))
            #expect(world.standIn.state.withLock { $0.refused }.isEmpty)
        }
    }

    @Test("sync of 14 renewals, a refund and an upgrade equals what the notifications produced; it is idempotent")
    func syncEqualsNotifications() async throws {
        let world = try W()
        // One history, told twice: to subscriber A by notifications, to B by the API.
        func history(original: Int, token: String) -> [(type: String, subtype: String?, at: Timestamp, t: [String: JSONValue])] {
            var items: [(String, String?, Timestamp, [String: JSONValue])] = []
            for i in 0...14 {
                let t = W.transaction(
                    "\(original + i)", original: "\(original)", from: W.month(i), to: W.month(i + 1), token: token,
                    extra: i == 14 ? ["isUpgraded": true] : [:])
                items.append(
                    (
                        i == 0 ? "SUBSCRIBED" : "DID_RENEW", i == 0 ? "INITIAL_BUY" : nil,
                        Timestamp(microseconds: W.month(i).microseconds + 1_000_000), t
                    ))
            }
            // Renewal 7 refunded in full ten days into its month.
            var refunded = items[7].3
            let revoked = Timestamp(microseconds: W.month(7).microseconds + 10 * 86_400_000_000)
            refunded["revocationDate"] = W.ms(revoked)
            refunded["revocationReason"] = 0
            refunded["revocationType"] = "REFUND_FULL"
            items[7].3 = refunded
            items.append(("REFUND", nil, revoked, refunded))
            // An upgrade to the yearly plan halfway through the last month.
            let upgradeAt = Timestamp(microseconds: W.month(14).microseconds + 15 * 86_400_000_000)
            let yearly = W.transaction(
                "\(original + 15)", original: "\(original)", product: "pro.yearly", from: upgradeAt,
                to: ReportCalendar.addingMonths(12, to: upgradeAt), token: token)
            items.append(("DID_CHANGE_RENEWAL_PREF", "UPGRADE", Timestamp(microseconds: upgradeAt.microseconds + 1_000_000), yearly))
            return items
        }
        let a = UUID().uuidString.lowercased()
        let b = UUID().uuidString.lowercased()
        let now = W.month(20)
        let byNotifications = history(original: 2000, token: a)
        // The API's history: each transaction once, in its latest state (renewal 7 revoked).
        var latest: [String: [String: JSONValue]] = [:]
        var order: [String] = []
        for item in history(original: 3000, token: b) {
            let id = item.t["transactionId"]!.stringValue!
            if latest[id] == nil { order.append(id) }
            latest[id] = item.t
        }
        let signed = order.map { world.signedTransaction(latest[$0]!, signedAt: now) }
        world.standIn.state.withLock { $0.transactionPages["3000"] = [Array(signed[0..<10]), Array(signed[10...])] }

        try await world.run { api, intake, client in
            for item in byNotifications {
                let payload = world.notification(item.type, item.subtype, at: item.at, transaction: item.t)
                let n = try await world.reader.read(signedPayload: payload, now: now)
                _ = try await intake.ingest(apple: n, signedPayload: payload)
            }
            let sync = AppleSync(client: api, verifier: world.verifier, intake: intake, bundleID: W.bundleID, logger: TestDatabase.logger)
            let first = try await sync.sync(originalTransactionID: "3000", subscriber: b, now: now)
            #expect(first.transactions == 16 && first.appended == 17 && first.known == 0)
            let viaNotifications = try await windows(client, a)
            #expect(!viaNotifications.isEmpty)
            #expect(try await windows(client, b) == viaNotifications)
            #expect(try await revenueFacts(client, b) == revenueFacts(client, a))
            #expect(viaNotifications.contains { $0.hasSuffix(" refund") })

            let again = try await sync.sync(originalTransactionID: "3000", subscriber: nil, now: now)
            #expect(again.appended == 0 && again.known == 17 && again.subscriber == b)

            // A sync after the notifications of A appends nothing either (same keys).
            world.standIn.state.withLock { s in
                var latestA: [String: [String: JSONValue]] = [:]
                var orderA: [String] = []
                for item in byNotifications {
                    let id = item.t["transactionId"]!.stringValue!
                    if latestA[id] == nil { orderA.append(id) }
                    latestA[id] = item.t
                }
                s.transactionPages["2000"] = [orderA.map { world.signedTransaction(latestA[$0]!, signedAt: now) }]
            }
            let overNotifications = try await sync.sync(originalTransactionID: "2000", subscriber: nil, now: now)
            #expect(overNotifications.subscriber == a && overNotifications.appended == 0)
            #expect(try await windows(client, a) == viaNotifications)
        }
    }

    @Test("a transaction revoked from Family Sharing is a cancellation by sync too, stored once with its REVOKE notification's")
    func syncFamilyRevoke() async throws {
        let world = try W()
        let a = UUID().uuidString.lowercased()
        let now = W.month(4)
        let revoked = Timestamp(microseconds: W.month(1).microseconds + 5 * 86_400_000_000)
        let first = W.transaction("4000", original: "4000", from: W.month(0), to: W.month(1), token: a)
        let second = W.transaction(
            "4001", original: "4000", from: W.month(1), to: W.month(2), token: a,
            extra: ["inAppOwnershipType": "FAMILY_SHARED", "revocationDate": W.ms(revoked), "revocationType": "FAMILY_REVOKE", "revocationReason": 0])
        world.standIn.state.withLock {
            $0.transactionPages["4000"] = [[first, second].map { world.signedTransaction($0, signedAt: now) }]
        }
        try await world.run { api, intake, client in
            let sync = AppleSync(client: api, verifier: world.verifier, intake: intake, bundleID: W.bundleID, logger: TestDatabase.logger)
            let summary = try await sync.sync(originalTransactionID: "4000", subscriber: nil, now: now)
            #expect(summary.transactions == 2 && summary.appended == 3, "the purchase, the renewal and its revocation")
            let w = try await windows(client, a)
            #expect(w.count == 2 && w.last?.hasSuffix(" cancellation") == true, "\(w)")
            // The REVOKE notification of that transaction, arriving after the sync, is the same fact.
            let payload = world.notification("REVOKE", at: Timestamp(microseconds: revoked.microseconds + 1_000_000), transaction: second)
            _ = try await intake.ingest(apple: try await world.reader.read(signedPayload: payload, now: now), signedPayload: payload)
            #expect(try await eventCount(client, a) == 3)
            #expect(try await windows(client, a) == w)
        }
    }

    @Test("the periodic backfill reads from its durable mark (an hour before it), and the first run 179 days back")
    func periodicBackfill() async throws {
        let world = try W()
        let token = UUID().uuidString.lowercased()
        let payload = world.notification(
            "SUBSCRIBED", "INITIAL_BUY", at: Timestamp(microseconds: W.month(0).microseconds + 1_000_000),
            transaction: W.transaction("5000", original: "5000", from: W.month(0), to: W.month(1), token: token))
        world.standIn.state.withLock { $0.notificationPages = [[payload]] }
        try await world.run { api, intake, client in
            let database = Database(client: client, logger: TestDatabase.logger)
            let clock = Mutex(W.month(1))
            let service = AppleBackfillService(
                backfill: AppleBackfill(client: api, reader: world.reader, intake: intake, logger: TestDatabase.logger),
                marks: StoreSyncMarks(database: database), interval: .seconds(3600), logger: TestDatabase.logger,
                clock: { clock.withLock { $0 } })
            let first = try await service.runOnce()
            #expect(first.new == 1)
            #expect(try await StoreSyncMarks(database: database).mark(store: "apple", name: "notification_history") == W.month(1))
            clock.withLock { $0 = W.month(2) }
            let second = try await service.runOnce()
            #expect(second.duplicates == 1 && second.new == 0)
            let starts = world.standIn.state.withLock { $0.historyBodies.map { $0.objectValue?["startDate"]?.numberValue?.int64Value ?? 0 } }
            #expect(starts == [(W.month(1).microseconds - 179 * 86_400_000_000) / 1000, (W.month(1).microseconds - 3_600_000_000) / 1000])
            #expect(try await eventCount(client, token) == 1)
        }
    }

    @Test("a refund consumption request is a store_notice, answered once with what the ledger knows and the policy states")
    func consumptionRequest() async throws {
        let world = try W()
        let token = UUID().uuidString.lowercased()
        try await world.run { api, intake, client in
            // Four months at 9.99, the last one in progress when the request arrives.
            for i in 0..<4 {
                let payload = world.notification(
                    i == 0 ? "SUBSCRIBED" : "DID_RENEW", at: Timestamp(microseconds: W.month(i).microseconds + 1_000_000),
                    transaction: W.transaction("\(6000 + i)", original: "6000", from: W.month(i), to: W.month(i + 1), token: token))
                _ = try await intake.ingest(apple: try await world.reader.read(signedPayload: payload, now: W.month(4)), signedPayload: payload)
            }
            let requestedAt = Timestamp(microseconds: W.month(3).microseconds + 5 * 86_400_000_000)
            let payload = world.notification(
                "CONSUMPTION_REQUEST", at: requestedAt,
                transaction: W.transaction("6003", original: "6000", from: W.month(3), to: W.month(4), token: token))
            let outcome = try await intake.ingest(apple: try await world.reader.read(signedPayload: payload, now: W.month(4)), signedPayload: payload)
            guard case .applied(_, let events) = outcome else {
                Issue.record("not applied: \(outcome)")
                return
            }
            #expect(events.map(\.type) == [.storeNotice])
            #expect(events.first?.data["kind"] == "consumption_request")

            let database = Database(client: client, logger: TestDatabase.logger)
            let silent = AppleConsumptionResponder(
                client: api, policy: try AppleConsumptionPolicy(json: #"{"customerConsented": false}"#), database: database,
                logger: TestDatabase.logger, clock: { requestedAt })
            #expect(try await silent.runOnce() == 0)
            #expect(world.standIn.state.withLock { $0.consumption.isEmpty })

            let policy = try AppleConsumptionPolicy(
                json: #"{"customerConsented": true, "platform": 1, "playTime": 0, "userStatus": 1, "refundPreference": 3}"#)
            let responder = AppleConsumptionResponder(
                client: api, policy: policy, database: database, logger: TestDatabase.logger, clock: { requestedAt })
            #expect(try await responder.runOnce() == 1)
            #expect(try await responder.runOnce() == 0)
            let sent = world.standIn.state.withLock { $0.consumption }
            #expect(sent.count == 1 && sent.first?.0 == "6003")
            let body = sent.first?.1.objectValue ?? [:]
            // 4 × $9.99 = $39.96 → bucket 2; tenure 95 days → bucket 5; the month in progress → partially consumed.
            #expect(body["lifetimeDollarsPurchased"] == 2 && body["lifetimeDollarsRefunded"] == 1)
            #expect(body["accountTenure"] == 5 && body["consumptionStatus"] == 2)
            #expect(body["customerConsented"] == true && body["appAccountToken"] == .string(token) && body["refundPreference"] == 3)

            // A sandbox transaction's request goes to Apple's sandbox host (here a second stand-in).
            let sandboxToken = UUID().uuidString.lowercased()
            var sandboxTransaction = W.transaction("8000", original: "8000", from: W.month(3), to: W.month(4), token: sandboxToken)
            sandboxTransaction["environment"] = "Sandbox"
            let sandboxPayload = world.notification(
                "CONSUMPTION_REQUEST", at: requestedAt, transaction: sandboxTransaction, environment: "Sandbox")
            _ = try await intake.ingest(
                apple: try await world.reader.read(signedPayload: sandboxPayload, now: W.month(4)), signedPayload: sandboxPayload)
            let sandboxHost = AppleAPIStandIn(
                publicKey: world.key.publicKey, issuerID: world.standIn.issuerID, keyID: world.standIn.keyID, bundleID: W.bundleID)
            try await sandboxHost.serve { url in
                let http = HTTPClient(eventLoopGroupProvider: .singleton)
                let sandbox = AppStoreServerAPIClient(http: http, credentials: world.credentials, baseURL: url, logger: TestDatabase.logger)
                let both = AppleConsumptionResponder(
                    client: api, sandboxClient: sandbox, policy: policy, database: database, logger: TestDatabase.logger,
                    clock: { requestedAt })
                let answered = try await both.runOnce()
                try await http.shutdown()
                #expect(answered == 1)
            }
            #expect(sandboxHost.state.withLock { $0.consumption.map(\.0) } == ["8000"])
            #expect(world.standIn.state.withLock { $0.consumption.count } == 1)
        }
        #expect(throws: AppleConsumptionPolicy.Invalid.self) { _ = try AppleConsumptionPolicy(json: #"{"platform": 1}"#) }
        #expect(throws: AppleConsumptionPolicy.Invalid.self) { _ = try AppleConsumptionPolicy(json: #"{"customerConsented": true, "playTime": 99}"#) }
    }

    @Test("429 is retried after its Retry-After; a token Apple would refuse is an error, not retried")
    func retriesAndAuthorization() async throws {
        let world = try W()
        world.standIn.state.withLock {
            $0.throttled = [1, 1]
            $0.notificationPages = [[]]
        }
        try await world.run { api, _, _ in
            let started = ContinuousClock.now
            let page = try await api.notificationHistory(start: W.month(0), end: W.month(1), paginationToken: nil)
            #expect(page.signedPayloads.isEmpty && !page.hasMore)
            #expect(ContinuousClock.now - started >= .seconds(2))
            #expect(world.standIn.state.withLock { $0.requests } == 3)

            let stranger = AppStoreAPICredentials(
                issuerID: world.standIn.issuerID, keyID: world.standIn.keyID, bundleID: W.bundleID, privateKey: P256.Signing.PrivateKey())
            let http = HTTPClient(eventLoopGroupProvider: .singleton)
            defer { _ = http.shutdown() }
            let forged = AppStoreServerAPIClient(http: http, credentials: stranger, baseURL: api.configuredBaseURL, logger: TestDatabase.logger)
            await #expect {
                _ = try await forged.notificationHistory(start: W.month(0), end: W.month(1), paginationToken: nil)
            } throws: { error in
                (error as? AppStoreServerAPIClient.Failure)?.status == 401 && (error as? AppStoreServerAPIClient.Failure)?.errorCode == 4_010_000
            }
            #expect(world.standIn.state.withLock { $0.refused } == ["bad signature"])
            // A transaction id that is not Apple's is refused before any request.
            await #expect(throws: AppStoreServerAPIClient.Failure.self) {
                _ = try await api.transactionHistory(transactionID: "../../x", revision: nil)
            }
        }
    }

    @Test("an API answering hasMore with the same token ends backfill and sync with an error after two requests")
    func endlessPagination() async throws {
        let world = try W()
        // Without the check the loops would end only when the stand-in gives up, after 500 answers.
        world.standIn.state.withLock { $0.stuckAnswers = 500 }
        try await world.run { api, intake, _ in
            let backfill = AppleBackfill(client: api, reader: world.reader, intake: intake, logger: TestDatabase.logger)
            await #expect {
                _ = try await backfill.run(since: W.month(0), until: W.month(1), now: W.month(1))
            } throws: { error in
                (error as? PaginationError)?.reason == .repeatedToken && "\(error)".contains("notification history")
            }
            #expect(world.standIn.state.withLock { $0.requests } == 2)

            let sync = AppleSync(client: api, verifier: world.verifier, intake: intake, bundleID: W.bundleID, logger: TestDatabase.logger)
            await #expect {
                _ = try await sync.sync(originalTransactionID: "1000", subscriber: "user-1", now: W.month(1))
            } throws: { error in
                (error as? PaginationError)?.reason == .repeatedToken && "\(error)".contains("transaction history of 1000")
            }
            #expect(world.standIn.state.withLock { $0.requests } == 4)
        }
    }

    @Test("the request token is ES256 with Apple's claims and lives at most an hour")
    func token() throws {
        let world = try W()
        let token = try world.credentials.token(now: Date(), lifetime: .seconds(7200))
        #expect(world.standIn.problem(with: "Bearer \(token)") == nil)
        let claims = token.split(separator: ".")[1]
        var b64 = claims.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.count % 4 != 0 { b64 += "=" }
        let c = try JSONParser.parse(Array(Data(base64Encoded: b64)!)).objectValue!
        #expect(c["exp"]!.numberValue!.int64Value! - c["iat"]!.numberValue!.int64Value! == 3600)
        #expect(c["aud"] == "appstoreconnect-v1" && c["bid"] == .string(W.bundleID))
        #expect(throws: AppStoreAPICredentials.Invalid.self) {
            _ = try AppStoreAPICredentials(issuerID: "i", keyID: "k", bundleID: "b", privateKeyPEM: "not a key")
        }
    }
}
