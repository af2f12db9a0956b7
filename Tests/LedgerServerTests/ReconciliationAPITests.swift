import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerStore
import LedgerTestSupport
import NIOCore
import PostgresNIO
import StoreAdapters
import StripeStore
import Testing

@testable import LedgerServer

/// Stripe's reconciliation against a stand-in of its API, and `GET /v1/reconciliations[/{id}]` over the real
/// application, on PostgreSQL.
@Suite("Reconciliation API (Stripe stand-in)", .serialized)
struct ReconciliationAPITests {
    typealias S = StripeHelpers
    static let key = "sk_test_reconcile"
    static let now = try! Timestamp(rfc3339: "2026-03-15T00:00:00Z")

    static func t(_ s: String) -> JSONValue { S.n(s) }

    /// Three subscriptions whose webhooks the ledger got only in part: R1 ended on 10 March (the deletion
    /// missed), R2 set to cancel at its period's end on 5 March (missed), R3's payment refunded in full on 12
    /// March (missed).
    static let standIn: StripeAPIStandIn = {
        let standIn = StripeAPIStandIn(
            key: key,
            subscriptions: [
                "sub_R1": S.subscription(
                    "sub_R1", customer: "cus_R1", subscriber: "web-r1", status: "canceled",
                    [
                        "ended_at": t("2026-03-10T00:00:00Z"), "canceled_at": t("2026-03-10T00:00:00Z"),
                        "current_period_end": t("2026-04-01T10:00:00Z"),
                        "cancellation_details": ["comment": .null, "feedback": .null, "reason": "cancellation_requested"],
                    ]),
                "sub_R2": S.subscription(
                    "sub_R2", customer: "cus_R2", subscriber: "web-r2", status: "active",
                    ["cancel_at_period_end": true, "canceled_at": t("2026-03-05T00:00:00Z"), "current_period_end": t("2026-04-01T10:00:00Z")]),
                "sub_R3": S.subscription(
                    "sub_R3", customer: "cus_R3", subscriber: "web-r3", status: "active", ["current_period_end": t("2026-04-01T10:00:00Z")]),
            ])
        // The latest payments' charges and the refunds of R3's (Stripe's list APIs, filtered by the stand-in).
        standIn.setList(
            "charges",
            [
                [
                    "id": "ch_R1", "object": "charge", "amount": 1000, "amount_refunded": 0, "currency": "usd", "refunded": false,
                    "status": "succeeded", "payment_intent": "pi_R1", "created": t("2026-03-01T10:00:00Z"),
                ],
                [
                    "id": "ch_R3", "object": "charge", "amount": 1000, "amount_refunded": 1000, "currency": "usd", "refunded": true,
                    "status": "succeeded", "payment_intent": "pi_R3", "created": t("2026-03-01T10:00:00Z"),
                ],
            ])
        standIn.setList(
            "refunds",
            [
                [
                    "id": "re_R3", "object": "refund", "amount": 1000, "currency": "usd", "charge": "ch_R3", "payment_intent": "pi_R3",
                    "status": "succeeded", "reason": "requested_by_customer", "created": t("2026-03-12T00:00:00Z"),
                ]
            ])
        return standIn
    }()

    static func invoice(_ n: String) -> [UInt8] {
        S.event(
            "evt_R\(n)", "invoice.paid", at: "2026-03-01T10:00:05Z",
            S.invoice(
                "in_R\(n)", "subscription_create", customer: "cus_R\(n)", sub: "sub_R\(n)", pi: "pi_R\(n)", paidAt: "2026-03-01T10:00:00Z",
                lines: [S.line("il_R\(n)", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-r\(n)"))
    }

    /// One reconciliation of Stripe against the stand-in, on the harness's database.
    static func reconcile(_ api: APIHarness, base: String, key: String = key) async throws -> ReconciliationStore.Run {
        try await reconcileOnce(api.url!, now: now, instance: "api-test") { _, _ in
            StripeReconciliation(client: StripeAPIClient(apiKey: key, baseURL: base, attempts: 1))
        }
    }

    static func get(_ http: any TestClientProtocol, _ api: APIHarness, _ uri: String, role: APIRole? = .auditor) async throws -> TestResponse {
        try await http.execute(uri: uri, method: .get, headers: api.headers(role))
    }

    @Test("missed deletion, cancel-at-period-end and refund are appended once as the webhooks map them; the routes list the runs")
    func stripeRepairsAndRoutes() async throws {
        try await Self.standIn.serve { base in
            try await APIHarness.run { http, api in
                try await S.catalog(http, api)
                for n in ["1", "2", "3"] { #expect(S.status(try await S.post(http, Self.invoice(n))) == "applied") }
                #expect(try await S.active(http, api, "web-r1", at: "2026-03-12T00:00:00Z"))

                let first = try await Self.reconcile(api, base: base)
                #expect(first.status == .succeeded, "\(first.error ?? "")")
                #expect(first.purchases == 3 && first.unrepaired == 0)
                // R1: the lapse and the end of access on 10 March; R2: auto-renew off on 5 March; R3: the refund.
                #expect(!(try await S.active(http, api, "web-r1", at: "2026-03-12T00:00:00Z")))
                #expect(try await S.active(http, api, "web-r1", at: "2026-03-09T00:00:00Z"))
                #expect(!(try await S.active(http, api, "web-r3", at: "2026-03-13T00:00:00Z")))
                let r2 = try await S.entitlement(http, api, "web-r2", "pro", at: "2026-03-06T00:00:00Z")
                #expect(r2?["will_renew"] == false && r2?["active"] == true, "\(String(describing: r2))")

                // The list: newest first, the numbers of the run.
                let list = try await Self.get(http, api, "/v1/reconciliations")
                #expect(list.status == .ok, "\(String(buffer: list.body))")
                let runs = try #require(try list.json.objectValue?["runs"]?.arrayValue)
                #expect(runs.count == 1)
                let run = try #require(runs.first?.objectValue)
                #expect(run["id"] == .string(first.id.lowercasedString) && run["store"] == "stripe" && run["status"] == "succeeded")
                #expect(run["purchases_compared"] == 3 && run["trigger"] == "cli" && run["error"] == .null)
                #expect(run["differences_found"] == .number(JSONNumber(Int64(first.differences))))
                #expect(run["events_appended"] == .number(JSONNumber(Int64(first.eventsAppended))))

                // The run: each difference, with the events appended for it.
                let shown = try await Self.get(http, api, "/v1/reconciliations/\(first.id.lowercasedString)")
                #expect(shown.status == .ok)
                let differences = try #require(try shown.json.objectValue?["differences"]?.arrayValue?.compactMap(\.objectValue))
                #expect(differences.count == first.differences)
                func row(_ subscriber: String, _ field: String) -> [String: JSONValue]? {
                    differences.first { $0["subscriber_id"] == .string(subscriber) && $0["field"] == .string(field) }
                }
                #expect(row("web-r1", "lapsed")?["outcome"] == "repaired" && row("web-r1", "lapsed")?["purchase_id"] == "sub_R1")
                #expect(row("web-r1", "active")?["ledger_value"] == "true" && row("web-r1", "active")?["store_value"] == "false")
                #expect(row("web-r2", "auto_renew")?["outcome"] == "repaired" && row("web-r2", "auto_renew")?["reason"] == .null)
                let refund = try #require(row("web-r3", "refunded"))
                #expect(refund["outcome"] == "repaired" && refund["event_ids"]?.arrayValue?.count == 2, "\(refund)")
                let appended = Set(differences.flatMap { $0["event_ids"]?.arrayValue ?? [] })
                #expect(
                    appended.count == first.eventsAppended && first.eventsAppended == 5, "R1's lapse and cut, R2's auto-renew, R3's refund and cut")
                // The webhook that arrives later adds nothing: the same keys.
                let before = try await Self.get(http, api, "/v1/subscribers/web-r1/events").events.count
                let deleted = S.event(
                    "evt_R1_deleted", "customer.subscription.deleted", at: "2026-03-10T00:00:01Z", Self.standIn.subscriptions["sub_R1"]!)
                #expect(try await S.post(http, deleted).status.code < 300)
                #expect(try await Self.get(http, api, "/v1/subscribers/web-r1/events").events.count == before)

                let second = try await Self.reconcile(api, base: base)
                #expect(second.status == .succeeded && second.eventsAppended == 0 && second.differences == 0 && second.repaired == 0)

                // A wrong key: Stripe refuses, the run fails and says why.
                let failed = try await Self.reconcile(api, base: base, key: "sk_test_wrong")
                #expect(failed.status == .failed && failed.error?.contains("401") == true, "\(failed.error ?? "")")
                let all = try await Self.get(http, api, "/v1/reconciliations?limit=2")
                let page = try #require(try all.json.objectValue)
                #expect(page["runs"]?.arrayValue?.map { $0.objectValue?["status"] } == ["failed", "succeeded"])
                let next = try #require(page["next_before"]?.stringValue)
                let older = try await Self.get(http, api, "/v1/reconciliations?limit=2&before=\(next)")
                #expect(try older.json.objectValue?["runs"]?.arrayValue?.map { $0.objectValue?["id"] } == [.string(first.id.lowercasedString)])
                #expect(try older.json.objectValue?["next_before"] == nil)
                let onlyApple = try await Self.get(http, api, "/v1/reconciliations?store=apple")
                #expect(try onlyApple.json.objectValue?["runs"]?.arrayValue?.isEmpty == true)
            }
        }
    }

    /// R4 renewed on 1 March; the ledger missed that invoice.paid and still ends its access on 1 March.
    static let renewalStandIn: StripeAPIStandIn = {
        let standIn = StripeAPIStandIn(
            key: key,
            subscriptions: [
                "sub_R4": S.subscription(
                    "sub_R4", customer: "cus_R4", subscriber: "web-r4", status: "active",
                    ["current_period_end": t("2026-04-01T10:00:00Z"), "latest_invoice": "in_R4b"])
            ])
        var renewal = S.invoice(
            "in_R4b", "subscription_cycle", customer: "cus_R4", sub: "sub_R4", pi: "pi_R4b", paidAt: "2026-03-01T10:00:00Z",
            lines: [S.line("il_R4b", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-r4")
        renewal["status"] = "paid"
        renewal["created"] = t("2026-03-01T09:00:00Z")
        standIn.setList("invoices", [renewal])
        return standIn
    }()

    @Test("a missed renewal is appended from Stripe's latest paid invoice, as its invoice.paid maps it; a second run finds nothing")
    func stripeMissedRenewal() async throws {
        try await Self.renewalStandIn.serve { base in
            try await APIHarness.run { http, api in
                try await S.catalog(http, api)
                let first = S.event(
                    "evt_R4", "invoice.paid", at: "2026-02-01T10:00:05Z",
                    S.invoice(
                        "in_R4", "subscription_create", customer: "cus_R4", sub: "sub_R4", pi: "pi_R4", paidAt: "2026-02-01T10:00:00Z",
                        lines: [S.line("il_R4", 1000, "2026-02-01T10:00:00Z", "2026-03-01T10:00:00Z", "pro.monthly")], subscriber: "web-r4"))
                #expect(S.status(try await S.post(http, first)) == "applied")
                #expect(!(try await S.active(http, api, "web-r4", at: "2026-03-10T00:00:00Z")))

                let run = try await Self.reconcile(api, base: base)
                #expect(run.status == .succeeded && run.unrepaired == 0, "\(run.error ?? "") \(run.unrepaired)")
                #expect(run.repaired >= 1 && run.eventsAppended >= 1)
                #expect(try await S.active(http, api, "web-r4", at: "2026-03-10T00:00:00Z"))
                let renewals = try await Self.get(http, api, "/v1/subscribers/web-r4/events").events.filter {
                    $0["type"] == "renewal" || $0["type"] == "purchase"
                }
                #expect(renewals.count == 2, "\(renewals)")

                // The webhook that arrives late adds nothing; a second run finds nothing to repair.
                let before = try await Self.get(http, api, "/v1/subscribers/web-r4/events").events.count
                var late = S.invoice(
                    "in_R4b", "subscription_cycle", customer: "cus_R4", sub: "sub_R4", pi: "pi_R4b", paidAt: "2026-03-01T10:00:00Z",
                    lines: [S.line("il_R4b", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-r4")
                late["status"] = "paid"
                #expect(try await S.post(http, S.event("evt_R4b", "invoice.paid", at: "2026-03-01T10:00:05Z", late)).status.code < 300)
                #expect(try await Self.get(http, api, "/v1/subscribers/web-r4/events").events.count == before)
                let second = try await Self.reconcile(api, base: base)
                #expect(second.status == .succeeded && second.eventsAppended == 0 && second.repaired == 0, "\(second)")
            }
        }
    }

    @Test("serve --reconcile-interval: the live application reconciles Stripe on its own, recorded as the schedule's run")
    func schedule() async throws {
        try await Self.standIn.serve { base in
            try await APIHarness.run(stripeAPIKey: Self.key, stripeAPIBaseURL: base, reconcileInterval: .seconds(3600)) { http, api in
                try await S.catalog(http, api)
                #expect(S.status(try await S.post(http, Self.invoice("2"))) == "applied")
                // The first round runs as the application starts: it is recorded as the schedule's.
                var runs: [JSONValue] = []
                for _ in 0..<100 where runs.isEmpty {
                    runs = try await Self.get(http, api, "/v1/reconciliations?store=stripe").json.objectValue?["runs"]?.arrayValue ?? []
                    if runs.isEmpty { try await Task.sleep(for: .milliseconds(100)) }
                }
                let run = try #require(runs.first?.objectValue)
                #expect(run["trigger"] == "schedule" && run["status"] == "succeeded", "\(run)")
                #expect(run["since"] != .null, "the schedule compares the last 90 days")
            }
        }
    }

    @Test("roles: admin and auditor read runs; others 403, no key 401; bad parameters 400 naming them; an unknown run 404")
    func rolesAndParameters() async throws {
        try await APIHarness.run { http, api in
            for role in APIRole.allCases {
                let r = try await Self.get(http, api, "/v1/reconciliations", role: role)
                #expect(r.status == (role == .admin || role == .auditor ? .ok : .forbidden), "\(role)")
            }
            #expect(try await Self.get(http, api, "/v1/reconciliations", role: nil).status == .unauthorized)
            for (uri, named) in [
                ("/v1/reconciliations?limit=0", "'limit'"), ("/v1/reconciliations?limit=501", "'limit'"),
                ("/v1/reconciliations?before=x", "'before'"),
                ("/v1/reconciliations?store=amazon", "'store'"), ("/v1/reconciliations/not-a-uuid", "'id'"),
                ("/v1/reconciliations/\(UUID().uuidString)?limit=0", "'limit'"), ("/v1/reconciliations/\(UUID().uuidString)?after=-1", "'after'"),
            ] {
                let r = try await Self.get(http, api, uri)
                #expect(r.status == .badRequest && r.errorCode == "invalid_request", "\(uri)")
                #expect(String(buffer: r.body).contains(named), "\(uri): \(String(buffer: r.body))")
            }
            let missing = try await Self.get(http, api, "/v1/reconciliations/\(UUID().uuidString)")
            #expect(missing.status == .notFound && missing.errorCode == "not_found")
        }
    }
}

/// One reconciliation run on a test database (as the service role), `now` the reconciler's clock.
func reconcileOnce(
    _ url: DatabaseURL, now: Timestamp, instance: String, _ store: @escaping @Sendable (EventIntake, Database) throws -> any StoreReconciliation
) async throws -> ReconciliationStore.Run {
    let client = PostgresClient(
        configuration: url.clientConfiguration(role: "subledger_app", maximumConnections: 4), backgroundLogger: TestDatabase.logger)
    return try await withThrowingTaskGroup(of: ReconciliationStore.Run?.self) { group in
        group.addTask {
            await client.run()
            return nil
        }
        let database = Database(client: client, logger: TestDatabase.logger)
        let intake = EventIntake(store: EventStore(database: database), catalog: CatalogStore(database: database), database: database)
        let reconciler = Reconciler(
            intake: intake, records: ReconciliationStore(database: database), logger: TestDatabase.logger, instance: instance, clock: { now })
        let run = try await reconciler.run(try store(intake, database), since: nil, trigger: .cli)
        group.cancelAll()
        return run
    }
}
