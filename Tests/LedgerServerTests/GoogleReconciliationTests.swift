import Foundation
import GoogleStore
import HummingbirdTesting
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@testable import LedgerServer

/// Google Play's reconciliation against the stand-in (OAuth token checked on every call), on PostgreSQL.
@Suite("Reconciliation against Google Play (stand-in)", .serialized)
struct GoogleReconciliationTests {
    typealias G = GoogleStoreAPITests
    static let now = try! Timestamp(rfc3339: "2026-04-05T00:00:00Z")
    static func ms(_ s: String) -> JSONValue { .string(String(G.t(s).microseconds / 1000)) }

    static func submit(_ c: G.Context, _ user: String, token: String) async throws {
        let submit: JSONValue = [
            "subscriber_id": .string(user), "package_name": .string(GooglePlayStandIn.package), "product_id": "pro.monthly",
            "purchase_token": .string(token),
        ]
        let r = try await c.http.execute(
            uri: "/v1/stores/google/purchases", method: .post, headers: c.api.headers(.writer), body: LedgerServerTests.body(submit))
        #expect(r.status == .ok, "\(String(buffer: r.body))")
    }

    /// One run on the test's database, with the stand-in's configuration.
    static func reconcile(_ c: G.Context, port: Int) async throws -> ReconciliationStore.Run {
        let configuration = try c.google.configuration(port: port)
        return try await reconcileOnce(c.url, now: now, instance: "google-test") { intake, database in
            GoogleReconciliation(
                play: GooglePlay(configuration: configuration, intake: intake, logger: TestDatabase.logger),
                marks: StoreSyncMarks(database: database), logger: TestDatabase.logger)
        }
    }

    static func differences(_ c: G.Context, _ run: ReconciliationStore.Run) async throws -> [ReconciliationStore.Difference] {
        try await TestDatabase.run(c.url.clientConfiguration(maximumConnections: 1)) { client in
            try await ReconciliationStore(database: Database(client: client, logger: TestDatabase.logger))
                .differences(runID: run.id, afterOrdinal: 0, limit: 100)
        }
    }

    @Test("a missed void, auto-renew off, lapse and renewal are appended once with Google's times; a second run finds nothing")
    func repairsOnce() async throws {
        try await G.run { c in
            let orders = (1...4).map { "GPA.7\($0)00-0000-0000-0000\($0)" }
            for (i, order) in orders.enumerated() {
                c.google.set("tok-g\(i + 1)", G.purchase(order: order, expiry: "2026-04-01T10:00:00Z", account: nil, acknowledged: true))
                try await Self.submit(c, "user-g\(i + 1)", token: "tok-g\(i + 1)")
            }
            // g1: voided on 10 March (and revoked); the notification was missed.
            c.google.set(
                "tok-g1",
                G.purchase(state: "SUBSCRIPTION_STATE_EXPIRED", order: orders[0], expiry: "2026-03-10T00:00:00Z", account: nil, acknowledged: true))
            c.google.void([
                "kind": "androidpublisher#voidedPurchase", "purchaseToken": "tok-g1", "orderId": .string(orders[0]),
                "purchaseTimeMillis": Self.ms("2026-03-01T10:00:00Z"), "voidedTimeMillis": Self.ms("2026-03-10T00:00:00Z"), "voidedSource": 0,
                "voidedReason": 1,
            ])
            // g2: auto-renew turned off on 5 March; g3: the same on 20 March, then lapsed at the period's end.
            c.google.set(
                "tok-g2",
                G.purchase(
                    state: "SUBSCRIPTION_STATE_CANCELED", order: orders[1], expiry: "2026-04-01T10:00:00Z", autoRenew: false, account: nil,
                    acknowledged: true, canceled: ["userInitiatedCancellation": ["cancelTime": "2026-03-05T00:00:00Z"]]))
            c.google.set(
                "tok-g3",
                G.purchase(
                    state: "SUBSCRIPTION_STATE_EXPIRED", order: orders[2], expiry: "2026-04-01T10:00:00Z", autoRenew: false, account: nil,
                    acknowledged: true, canceled: ["userInitiatedCancellation": ["cancelTime": "2026-03-20T00:00:00Z"]]))
            // g4: renewed on 1 April; the ledger missed it.
            c.google.set("tok-g4", G.purchase(order: "\(orders[3])..0", expiry: "2026-05-01T10:00:00Z", account: nil, acknowledged: true))
            let p = c.port

            let first = try await Self.reconcile(c, port: p)
            #expect(first.status == .succeeded, "\(first.error ?? "")")
            let found = try await Self.differences(c, first)
            #expect(first.purchases == 4 && first.unrepaired == 0, "\(found)")
            #expect(first.voidedSince == Timestamp(microseconds: Self.now.microseconds - 30 * 86_400_000_000 + 600_000_000))
            func row(_ user: String, _ field: String) -> ReconciliationStore.Difference? {
                found.first { $0.subscriberID == user && $0.field == field }
            }
            #expect(row("user-g1", "refunded")?.repaired == true && row("user-g1", "refunded")?.eventIDs.count == 1)
            #expect(row("user-g2", "auto_renew")?.repaired == true)
            #expect(row("user-g3", "lapsed")?.repaired == true && row("user-g3", "auto_renew")?.repaired == true)
            #expect(row("user-g4", "expires_at")?.repaired == true && row("user-g4", "active")?.repaired == true)
            let g1 = try await G.events(c, "user-g1")
            #expect(g1.filter { $0["type"] == "refund" }.map { $0["occurred_at"] } == ["2026-03-10T00:00:00Z"])
            let g2 = try await G.events(c, "user-g2").filter { $0["type"] == "auto_renew_changed" }
            #expect(g2.map { $0["occurred_at"] } == ["2026-03-05T00:00:00Z"])
            let g3 = try await G.events(c, "user-g3").filter { $0["type"] == "expiration" }
            #expect(g3.map { $0["occurred_at"] } == ["2026-04-01T10:00:00Z"])
            let g4 = try await G.events(c, "user-g4").filter { $0["type"] == "renewal" }
            #expect(g4.count == 1 && g4.first?["data"]?.objectValue?["period_end"] == "2026-05-01T10:00:00Z")
            #expect(first.eventsAppended == 5)

            let second = try await Self.reconcile(c, port: p)
            let left = try await Self.differences(c, second)
            #expect(second.status == .succeeded && second.eventsAppended == 0 && second.differences == 0, "\(left)")
            #expect(second.voidedSince == first.startedAt, "voided purchases are read from the previous run's start")
            #expect(c.google.state.withLock { $0.refusedAssertions } == 0)

            c.google.setDown(true)
            let down = try await Self.reconcile(c, port: p)
            #expect(down.status == .failed && down.error?.contains("503") == true, "\(down.error ?? "")")
        }
    }

    @Test("a previous run more than 30 days back: voided purchases are read from Google's reach, and a warning says what is lost")
    func gapLongerThanTheReach() async throws {
        try await G.run { c in
            let configuration = try c.google.configuration(port: c.port)
            let recorder = LogRecorder()
            try await TestDatabase.run(c.url.clientConfiguration(role: "subledger_app", maximumConnections: 1)) { client in
                try await StoreSyncMarks(database: Database(client: client, logger: TestDatabase.logger))
                    .advance(
                        store: "google", name: GoogleReconciliation.markName, to: Timestamp(microseconds: Self.now.microseconds - 40 * 86_400_000_000)
                    )
            }
            let run = try await reconcileOnce(c.url, now: Self.now, instance: "google-gap") { intake, database in
                GoogleReconciliation(
                    play: GooglePlay(configuration: configuration, intake: intake, logger: TestDatabase.logger),
                    marks: StoreSyncMarks(database: database), logger: recorder.logger())
            }
            #expect(run.status == .succeeded)
            #expect(run.voidedSince == Timestamp(microseconds: Self.now.microseconds - 30 * 86_400_000_000 + 600_000_000))
            #expect(
                recorder.all.contains { $0.hasPrefix("warning google voided purchases older than 30 days can no longer be listed") },
                "\(recorder.all)")
        }
    }

    @Test("the schedule refuses an interval Google's 30 days of voided purchases cannot cover")
    func interval() {
        #expect(GoogleReconciliation.maxInterval < .seconds(30 * 86_400))
        #expect(GoogleReconciliation.voidedReach == 30 * 86_400_000_000)
    }
}
