import AppleStore
import AsyncHTTPClient
import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import StoreAdapters
import Testing

@Suite("Reconciliation against the App Store Server API (stand-in) on PostgreSQL")
struct AppleReconciliationTests {
    typealias W = AppleWorld

    /// Halfway through February 2025: the scenarios' "now".
    static let now = Timestamp(microseconds: W.month(1).microseconds + 15 * 86_400_000_000)

    /// The transactions the ledger was told, appended as the notifications would have appended them.
    static func tell(_ intake: EventIntake, _ subscriber: String, _ transactions: [[String: JSONValue]]) async throws {
        let drafts = try transactions.map {
            try AppleNotificationMapper.transactionDraft($0, environment: .production, meta: ["store": "apple", "origin": "test"])
        }
        _ = try await intake.append(drafts: drafts, subscriber: subscriber, source: "apple")
    }

    func status(_ world: W, _ status: Int, transaction: [String: JSONValue], renewal: [String: JSONValue]) -> [String: JSONValue] {
        [
            "status": .number(JSONNumber(Int64(status))),
            "signedTransactionInfo": .string(world.signedTransaction(transaction, signedAt: W.month(1))),
            "signedRenewalInfo": .string(world.signer.sign(.object(renewal))),
        ]
    }

    static func renewal(_ original: String, auto: Int, signedAt: Timestamp, extra: [String: JSONValue] = [:]) -> [String: JSONValue] {
        var r: [String: JSONValue] = [
            "originalTransactionId": .string(original), "autoRenewProductId": "pro.monthly", "productId": "pro.monthly",
            "autoRenewStatus": .number(JSONNumber(Int64(auto))), "signedDate": W.ms(signedAt), "environment": "Production",
        ]
        for (k, v) in extra { r[k] = v }
        return r
    }

    func reconciler(_ intake: EventIntake, _ client: PostgresClient, instance: String = "test-a") -> Reconciler {
        Reconciler(
            intake: intake, records: ReconciliationStore(database: Database(client: client, logger: TestDatabase.logger)),
            logger: TestDatabase.logger, instance: instance, clock: { Self.now })
    }

    @Test("a missed refund, auto-renew off, expiry and renewal are each appended once with Apple's times; a second run repairs nothing")
    func repairsOnce() async throws {
        let world = try W()
        let (a, b, c, d, e, f) = (uid(), uid(), uid(), uid(), uid(), uid())
        let refundedAt = Timestamp(microseconds: W.month(1).microseconds + 10 * 86_400_000_000)
        let autoOffAt = Timestamp(microseconds: W.month(1).microseconds + 5 * 86_400_000_000)
        // A: its renewal was refunded; the ledger never heard of the refund.
        let a0 = W.transaction("7000", original: "7000", from: W.month(0), to: W.month(1), token: a)
        let a1 = W.transaction("7001", original: "7000", from: W.month(1), to: W.month(2), token: a)
        var a1Refunded = a1
        a1Refunded["revocationDate"] = W.ms(refundedAt)
        a1Refunded["revocationReason"] = 1
        a1Refunded["revocationType"] = "REFUND_FULL"
        // B: auto-renew turned off; the ledger missed the notification.
        let b0 = W.transaction("7100", original: "7100", from: W.month(1), to: W.month(2), token: b)
        // C: lapsed at the end of January; the ledger has no expiration.
        let c0 = W.transaction("7200", original: "7200", from: W.month(0), to: W.month(1), token: c)
        // D: renewed in February; the ledger missed the renewal.
        let d0 = W.transaction("7300", original: "7300", from: W.month(0), to: W.month(1), token: d)
        let d1 = W.transaction("7301", original: "7300", from: W.month(1), to: W.month(2), token: d)
        // E: a purchase Apple does not know.
        let e0 = W.transaction("7400", original: "7400", from: W.month(1), to: W.month(2), token: e)
        // F: Apple answers with another app's transaction (a misconfigured key): not comparable, the run goes on.
        let f0 = W.transaction("7600", original: "7600", from: W.month(1), to: W.month(2), token: f)
        var f0Other = f0
        f0Other["bundleId"] = "com.example.other"
        world.standIn.state.withLock { s in
            s.statuses["7000"] = status(world, 5, transaction: a1Refunded, renewal: Self.renewal("7000", auto: 1, signedAt: W.month(1)))
            s.statuses["7100"] = status(world, 1, transaction: b0, renewal: Self.renewal("7100", auto: 0, signedAt: autoOffAt))
            s.statuses["7200"] = status(
                world, 2, transaction: c0, renewal: Self.renewal("7200", auto: 0, signedAt: W.month(1), extra: ["expirationIntent": 1]))
            s.statuses["7300"] = status(world, 1, transaction: d1, renewal: Self.renewal("7300", auto: 1, signedAt: W.month(1)))
            s.transactionPages["7300"] = [[d0, d1].map { world.signedTransaction($0, signedAt: W.month(1)) }]
            s.statuses["7600"] = status(world, 1, transaction: f0Other, renewal: Self.renewal("7600", auto: 1, signedAt: W.month(1)))
        }
        try await world.run { api, intake, client in
            try await Self.tell(intake, a, [a0, a1])
            try await Self.tell(intake, b, [b0])
            try await Self.tell(intake, c, [c0])
            try await Self.tell(intake, d, [d0])
            try await Self.tell(intake, e, [e0])
            try await Self.tell(intake, f, [f0])
            let store = AppleReconciliation(client: api, verifier: world.verifier, bundleID: W.bundleID)
            let reconciler = reconciler(intake, client)
            let first = try await reconciler.run(store, since: nil, trigger: .cli)
            #expect(first.status == .succeeded, "\(first.error ?? "")")
            #expect(first.purchases == 6)
            let records = ReconciliationStore(database: Database(client: client, logger: TestDatabase.logger))
            let found = try await records.differences(runID: first.id, afterOrdinal: 0, limit: 100)
            func row(_ subscriber: String, _ field: String) -> ReconciliationStore.Difference? {
                found.first { $0.subscriberID == subscriber && $0.field == field }
            }
            // A: refunded, and no access since.
            #expect(row(a, "refunded")?.repaired == true && row(a, "refunded")?.ledgerValue == "false" && row(a, "refunded")?.storeValue == "true")
            #expect(row(a, "active")?.repaired == true)
            let refund = try await intake.store.event(source: "apple", idempotencyKey: "apple:refund:7001")
            #expect(refund?.occurredAt == refundedAt && refund?.type == .refund)
            #expect(row(a, "refunded")?.eventIDs == [refund!.eventID])
            // B: auto-renew off at the renewal info's signed date.
            #expect(row(b, "auto_renew")?.repaired == true && row(b, "auto_renew")?.storeValue == "false")
            let off = try await client.query(
                "SELECT occurred_at, data->>'enabled' FROM events WHERE subscriber_id = \(b) AND type = 'auto_renew_changed'",
                logger: TestDatabase.logger
            ).decode((Timestamp, String).self).all()
            #expect(off.count == 1 && off.first?.0 == autoOffAt && off.first?.1 == "false")
            // C: the lapse at Apple's expiry, voluntary.
            #expect(row(c, "lapsed")?.repaired == true)
            let lapse = try await intake.store.event(source: "apple", idempotencyKey: "apple:reconcile:expired:7200")
            #expect(lapse?.occurredAt == W.month(1) && lapse?.data["reason"] == "voluntary")
            #expect(row(c, "auto_renew")?.repaired == true, "it lapsed with auto-renew off")
            // D: the missed renewal, from the history, with its own period.
            #expect(row(d, "expires_at")?.repaired == true && row(d, "active")?.repaired == true)
            #expect(row(d, "expires_at")?.storeValue == W.month(2).rfc3339)
            let renewal = try await intake.store.event(source: "apple", idempotencyKey: "apple:txn:7301")
            #expect(renewal?.type == .renewal && renewal?.data["period_start"] == .string(W.month(1).rfc3339))
            // E: recorded as not comparable, with Apple's answer.
            #expect(row(e, "purchase")?.repaired == false && row(e, "purchase")?.reason?.contains("does not know") == true)
            #expect(row(f, "purchase")?.repaired == false && row(f, "purchase")?.reason?.contains("does not verify") == true)
            #expect(first.eventsAppended == 5 && first.unrepaired == 2)
            #expect(first.repaired == found.filter(\.repaired).count && first.differences == found.count)

            let events = try await client.query("SELECT count(*)::int8 FROM events", logger: TestDatabase.logger).decode(Int64.self).all()
            let second = try await reconciler.run(store, since: nil, trigger: .schedule)
            #expect(second.status == .succeeded && second.eventsAppended == 0 && second.repaired == 0)
            #expect(second.differences == 2 && second.unrepaired == 2, "only E, which Apple still does not know, and F")
            #expect(try await client.query("SELECT count(*)::int8 FROM events", logger: TestDatabase.logger).decode(Int64.self).all() == events)
            #expect(world.standIn.state.withLock { $0.refused }.isEmpty, "every request carried a valid JWT")
        }
    }

    @Test("an unreachable App Store is a failed run, recorded with why; a store another instance holds is refused, and skipped by the schedule")
    func unreachableAndLeased() async throws {
        let world = try W()
        let a = uid()
        try await world.run { _, intake, client in
            try await Self.tell(intake, a, [W.transaction("7500", original: "7500", from: W.month(1), to: W.month(2), token: a)])
            // AsyncHTTPClient retries a refused connection until its connect timeout (10 s by default): short here,
            // so that each of the two failed runs below does not wait 10 s for what is refused at once.
            let http = HTTPClient(
                eventLoopGroupProvider: .singleton, configuration: .init(timeout: .init(connect: .milliseconds(500))))
            let dead = AppStoreServerAPIClient(
                http: http, credentials: world.credentials, baseURL: "http://127.0.0.1:1", logger: TestDatabase.logger, maxAttempts: 1)
            let store = AppleReconciliation(client: dead, verifier: world.verifier, bundleID: W.bundleID)
            let run = try await reconciler(intake, client).run(store, since: nil, trigger: .cli)
            #expect(run.status == .failed && run.finishedAt != nil)
            #expect(run.error?.contains("App Store Server API") == true, "\(run.error ?? "")")
            #expect(run.eventsAppended == 0)

            let records = ReconciliationStore(database: Database(client: client, logger: TestDatabase.logger))
            try await records.acquire(store: "apple", holder: "test-b", runID: UUID(), duration: .seconds(60))
            await #expect(throws: ReconciliationStore.Busy.self) {
                _ = try await reconciler(intake, client).run(store, since: nil, trigger: .schedule)
            }
            let runs = try await records.runs(store: "apple", beforeSeq: nil, limit: 10)
            #expect(runs.count == 1, "a refused run records nothing")
            // The schedule skips a store another instance holds, and runs it once the lease is given back.
            let service = ReconcileService(
                reconciler: reconciler(intake, client), stores: [store], interval: .seconds(3600), logger: TestDatabase.logger)
            try await service.runOnce()
            #expect(try await records.runs(store: "apple", beforeSeq: nil, limit: 10).count == 1)
            try await records.release(store: "apple", holder: "test-b")
            try await service.runOnce()
            let scheduled = try await records.runs(store: "apple", beforeSeq: nil, limit: 10)
            #expect(scheduled.count == 2 && scheduled.first?.trigger == "schedule" && scheduled.first?.since != nil)
            #expect(scheduled.map(\.seq) == scheduled.map(\.seq).sorted(by: >), "newest first")
            try await http.shutdown()
        }
    }

    func uid() -> String { UUID().uuidString.lowercased() }
}
