import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerTestSupport
import Logging
import NIOCore
import StoreAdapters
import StripeStore
import Synchronization
import Testing

/// Signed Stripe events built from Stripe's own example objects (Resources/stripe, MIT).
enum StripeHelpers {
    static let secret = "whsec_test_secret"
    static let fixtures: [String: JSONValue] = {
        let url = Bundle.module.url(forResource: "Resources/stripe/fixtures", withExtension: "json")!
        return try! JSONParser.parse(Array(Data(contentsOf: url)), maxDepth: 1000).objectValue!
    }()

    static func s(_ rfc: String) -> Int64 { try! Timestamp(rfc3339: rfc).microseconds / 1_000_000 }
    static func n(_ rfc: String) -> JSONValue { .number(JSONNumber(s(rfc))) }

    static func object(_ name: String, _ overrides: [String: JSONValue]) -> [String: JSONValue] {
        var o = fixtures[name]!.objectValue!
        for (k, v) in overrides { o[k] = v }
        return o
    }

    static func event(_ id: String, _ type: String, at: String, _ object: [String: JSONValue], previous: [String: JSONValue]? = nil) -> [UInt8] {
        var e = fixtures["event"]!.objectValue!
        e["id"] = .string(id)
        e["type"] = .string(type)
        e["created"] = n(at)
        e["livemode"] = true
        var data: [String: JSONValue] = ["object": .object(object)]
        if let previous { data["previous_attributes"] = .object(previous) }
        e["data"] = .object(data)
        return JSONValue.object(e).canonicalBytes()
    }

    static func price(_ lookup: String) -> JSONValue {
        var p = fixtures["subscription"]!.objectValue!["items"]!.objectValue!["data"]!.arrayValue![0].objectValue!["price"]!.objectValue!
        p["id"] = .string("price_\(lookup)")
        p["lookup_key"] = .string(lookup)
        return .object(p)
    }

    static func line(_ id: String, _ amount: Int64, _ from: String, _ to: String, _ lookup: String, proration: Bool = false, credited: String? = nil)
        -> JSONValue
    {
        var l = fixtures["invoice"]!.objectValue!["lines"]!.objectValue!["data"]!.arrayValue![0].objectValue!
        l["id"] = .string(id)
        l["amount"] = .number(JSONNumber(amount))
        l["period"] = ["start": n(from), "end": n(to)]
        l["price"] = price(lookup)
        l["proration"] = .bool(proration)
        if let credited { l["proration_details"] = ["credited_items": ["invoice": .string(credited), "invoice_line_items": []]] }
        return .object(l)
    }

    static func invoice(
        _ id: String, _ reason: String, customer: String, sub: String, pi: String, paidAt: String, lines: [JSONValue], subscriber: String? = nil
    ) -> [String: JSONValue] {
        object(
            "invoice",
            [
                "id": .string(id), "billing_reason": .string(reason), "customer": .string(customer), "subscription": .string(sub),
                "payment_intent": .string(pi), "lines": ["object": "list", "data": .array(lines)], "currency": "usd",
                "status_transitions": ["paid_at": n(paidAt), "finalized_at": .null, "marked_uncollectible_at": .null, "voided_at": .null],
                "subscription_details": ["metadata": subscriber.map { ["subscriber_id": .string($0)] } ?? [:]],
            ])
    }

    static func subscription(_ id: String, customer: String, subscriber: String, status: String, _ extra: [String: JSONValue] = [:]) -> [String:
        JSONValue]
    {
        var o = object(
            "subscription",
            [
                "id": .string(id), "customer": .string(customer), "status": .string(status), "metadata": ["subscriber_id": .string(subscriber)],
                "cancel_at_period_end": false, "trial_start": .null, "trial_end": .null, "ended_at": .null, "canceled_at": .null,
                "cancellation_details": ["comment": .null, "feedback": .null, "reason": .null],
            ])
        var items = o["items"]!.objectValue!
        var item = items["data"]!.arrayValue![0].objectValue!
        item["price"] = price("pro.monthly")
        items["data"] = [.object(item)]
        o["items"] = .object(items)
        for (k, v) in extra { o[k] = v }
        return o
    }

    static func post(
        _ http: any TestClientProtocol, _ bytes: [UInt8], secret: String = secret, t: Int64 = Int64(Date().timeIntervalSince1970),
        header: String? = nil
    ) async throws -> TestResponse {
        let h = header ?? "t=\(t),v1=\(StripeSignatureVerifier.signature(secret: secret, timestamp: t, body: bytes))"
        return try await http.execute(
            uri: "/v1/stores/stripe/webhooks", method: .post,
            headers: [.contentType: "application/json", HTTPField.Name("Stripe-Signature")!: h], body: ByteBuffer(bytes: bytes))
    }

    static func catalog(_ http: any TestClientProtocol, _ api: APIHarness) async throws {
        let products: [String: JSONValue] = [
            "pro.monthly": [
                "entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M", "price_minor": 1000, "currency": "USD", "commission_rate": "0.03",
            ],
            "max.monthly": [
                "entitlements": ["pro", "max"], "kind": "auto_renewable", "period": "P1M", "price_minor": 2000, "currency": "USD",
                "commission_rate": "0.03",
            ],
            "week.pass": [
                "entitlements": ["pro"], "kind": "non_renewing", "duration": "P7D", "price_minor": 500, "currency": "USD", "commission_rate": "0.03",
            ],
        ]
        for (id, p) in products {
            let r = try await http.execute(uri: "/v1/catalog/products/\(id)", method: .put, headers: api.headers(.admin), body: body(p))
            #expect(r.status == .ok || r.status == .created, "\(id): \(String(buffer: r.body))")
        }
    }

    static func entitlement(_ http: any TestClientProtocol, _ api: APIHarness, _ subscriber: String, _ name: String, at: String) async throws
        -> [String: JSONValue]?
    {
        let r = try await http.execute(uri: "/v1/subscribers/\(subscriber)/entitlements?at=\(at)", method: .get, headers: api.headers(.reader))
        return try r.json.objectValue?["entitlements"]?.arrayValue?.first { $0.objectValue?["entitlement"] == .string(name) }?.objectValue
    }

    static func active(_ http: any TestClientProtocol, _ api: APIHarness, _ subscriber: String, _ name: String = "pro", at: String) async throws
        -> Bool
    {
        try await entitlement(http, api, subscriber, name, at: at)?["active"] == true
    }

    static func status(_ r: TestResponse) -> String? { try? r.json.objectValue?["status"]?.stringValue }
}

@Suite("Stripe webhooks over HTTP on PostgreSQL", .serialized)
struct StripeAPITests {
    typealias S = StripeHelpers

    @Test("checkout → 3 paid cycles (out of order, twice) → upgrade with proration → partial refund → full refund; revenue counts it")
    func lifecycle() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            let c = "cus_A"
            let sub = "sub_A"
            // The first invoice arrives before the checkout names the subscriber: it waits.
            // A real invoice can be far larger than the 16 KiB an event's metadata may hold.
            var first = S.invoice(
                "in_1", "subscription_create", customer: c, sub: sub, pi: "pi_1", paidAt: "2026-03-01T10:00:00Z",
                lines: [S.line("il_1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")])
            first["description"] = .string(String(repeating: "x", count: 40_000))
            let in1 = S.event("evt_in1", "invoice.paid", at: "2026-03-01T10:00:05Z", first)
            #expect(S.status(try await S.post(http, in1)) == "pending")
            let checkout = S.object(
                "checkout.session",
                [
                    "id": "cs_A", "mode": "subscription", "client_reference_id": "web-a", "customer": .string(c), "subscription": .string(sub),
                    "payment_status": "paid", "status": "complete",
                ])
            let r = try await S.post(http, S.event("evt_cs", "checkout.session.completed", at: "2026-03-01T10:00:06Z", checkout))
            #expect(r.status == .ok, "\(String(buffer: r.body))")
            #expect(try await S.active(http, api, "web-a", at: "2026-03-15T00:00:00Z"))
            #expect(
                S.status(
                    try await S.post(
                        http,
                        S.event(
                            "evt_sub", "customer.subscription.created", at: "2026-03-01T10:00:00Z",
                            S.subscription(sub, customer: c, subscriber: "web-a", status: "active")))) == "notice")

            let in3 = S.event(
                "evt_in3", "invoice.paid", at: "2026-05-01T10:00:05Z",
                S.invoice(
                    "in_3", "subscription_cycle", customer: c, sub: sub, pi: "pi_3", paidAt: "2026-05-01T10:00:00Z",
                    lines: [S.line("il_3", 1000, "2026-05-01T10:00:00Z", "2026-06-01T10:00:00Z", "pro.monthly")]))
            let in2 = S.event(
                "evt_in2", "invoice.paid", at: "2026-04-01T10:00:05Z",
                S.invoice(
                    "in_2", "subscription_cycle", customer: c, sub: sub, pi: "pi_2", paidAt: "2026-04-01T10:00:00Z",
                    lines: [S.line("il_2", 1000, "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "pro.monthly")]))
            #expect(S.status(try await S.post(http, in3)) == "applied")
            #expect(S.status(try await S.post(http, in2)) == "applied")
            #expect(S.status(try await S.post(http, in2)) == "duplicate")
            #expect(try await S.active(http, api, "web-a", at: "2026-04-15T00:00:00Z"))

            // Upgrade on 15 May: the unused half of May is credited (cut), max starts.
            let in4 = S.event(
                "evt_in4", "invoice.paid", at: "2026-05-15T10:00:05Z",
                S.invoice(
                    "in_4", "subscription_update", customer: c, sub: sub, pi: "pi_4", paidAt: "2026-05-15T10:00:00Z",
                    lines: [
                        S.line("il_4a", -500, "2026-05-15T10:00:00Z", "2026-06-01T10:00:00Z", "pro.monthly", proration: true, credited: "in_3"),
                        S.line("il_4b", 1000, "2026-05-15T10:00:00Z", "2026-06-01T10:00:00Z", "max.monthly", proration: true),
                    ]))
            let up = try await S.post(http, in4)
            #expect(S.status(up) == "applied", "\(String(buffer: up.body))")
            #expect(try up.events.map { $0["type"] } == ["refund", "purchase"])
            #expect(try up.events.first?["data"]?.objectValue?["transaction_id"] == "pi_3")
            #expect(try await S.active(http, api, "web-a", "max", at: "2026-05-20T00:00:00Z"))

            // A partial refund (by refund.created, naming only the payment intent): money back, access continues.
            let re1 = S.object(
                "refund",
                ["id": "re_1", "amount": 300, "payment_intent": "pi_4", "charge": "ch_4", "created": S.n("2026-05-20T10:00:00Z"), "currency": "usd"])
            let partial = try await S.post(http, S.event("evt_re1", "refund.created", at: "2026-05-20T10:00:01Z", re1))
            #expect(S.status(partial) == "applied", "\(String(buffer: partial.body))")
            #expect(try await S.active(http, api, "web-a", "max", at: "2026-05-22T00:00:00Z"))
            // The full refund: charge.refunded lists re_1 again (stored once) and re_2; the charge is now fully refunded.
            let re2 = S.object(
                "refund",
                ["id": "re_2", "amount": 700, "payment_intent": "pi_4", "charge": "ch_4", "created": S.n("2026-05-25T10:00:00Z"), "currency": "usd"])
            let charge = S.object(
                "charge",
                [
                    "id": "ch_4", "payment_intent": "pi_4", "customer": .string(c), "amount": 1000, "amount_refunded": 1000, "refunded": true,
                    "currency": "usd",
                    "refunds": ["object": "list", "data": [.object(re1), .object(re2)]],
                ])
            let full = try await S.post(http, S.event("evt_ch4", "charge.refunded", at: "2026-05-25T10:00:01Z", charge))
            #expect(S.status(full) == "applied", "\(String(buffer: full.body))")
            #expect(try full.events.count == 3)
            #expect(try await S.active(http, api, "web-a", "max", at: "2026-05-26T00:00:00Z") == false)
            #expect(try await S.active(http, api, "web-a", "pro", at: "2026-05-26T00:00:00Z") == false)

            // Beside a store's purchase (another subscriber, source apple): reports count both.
            let apple = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer),
                body: body(
                    .object(
                        eventJSON(
                            subscriber: "ios-1", key: "apple-1", overrides: ["source": "apple"]))))
            #expect(apple.status == .created)
            let revenue = try await http.execute(
                uri: "/v1/reports/revenue?from=2026-03-01&to=2026-07-01", method: .get, headers: api.headers(.analyst))
            let rows = try #require(try revenue.json.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue))
            func sum(_ k: String) -> Int64 { rows.compactMap { $0[k]?.numberValue?.int64Value }.reduce(0, +) }
            #expect(sum("billings") == 4000 + 999 && sum("refunds") == 1500)
            let churn = try await http.execute(
                uri: "/v1/reports/churn?from=2026-03-01&to=2026-07-01&interval=month", method: .get, headers: api.headers(.analyst))
            let periods = try #require(try churn.json.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue))
            #expect(periods.map { $0["new"] } == [2, 0, 0, 0], "web-a and ios-1 both start in March")
            #expect(periods[1]["churned"] == 1 && periods[2]["churned_refund"] == 1, "ios-1 lapses in April, web-a by its refund in May: \(periods)")
            #expect(rows.last?["deferred_end"] == 0)
        }
    }

    @Test("trial → paid, trial → canceled, payment failed → recovered, payment failed → deleted: trials and churn count them")
    func trialsAndFailures() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            let trial: [String: JSONValue] = ["trial_start": S.n("2026-03-01T10:00:00Z"), "trial_end": S.n("2026-03-08T10:00:00Z")]
            for who in ["t1", "t2"] {
                let r = try await S.post(
                    http,
                    S.event(
                        "evt_\(who)_c", "customer.subscription.created", at: "2026-03-01T10:00:00Z",
                        S.subscription("sub_\(who)", customer: "cus_\(who)", subscriber: "web-\(who)", status: "trialing", trial)))
                #expect(S.status(r) == "applied", "\(String(buffer: r.body))")
            }
            #expect(try await S.entitlement(http, api, "web-t1", "pro", at: "2026-03-03T00:00:00Z")?["in_trial"] == true)
            // t1 converts: the first invoice after the trial is a cycle.
            #expect(
                S.status(
                    try await S.post(
                        http,
                        S.event(
                            "evt_t1_i", "invoice.paid", at: "2026-03-08T10:00:01Z",
                            S.invoice(
                                "in_t1", "subscription_cycle", customer: "cus_t1", sub: "sub_t1", pi: "pi_t1", paidAt: "2026-03-08T10:00:00Z",
                                lines: [S.line("il_t1", 1000, "2026-03-08T10:00:00Z", "2026-04-08T10:00:00Z", "pro.monthly")])))) == "applied")
            // t2 turns auto-renew off, then the subscription ends with the trial.
            var t2 = S.subscription("sub_t2", customer: "cus_t2", subscriber: "web-t2", status: "trialing", trial)
            t2["cancel_at_period_end"] = true
            t2["canceled_at"] = S.n("2026-03-03T10:00:00Z")
            #expect(
                S.status(
                    try await S.post(
                        http,
                        S.event(
                            "evt_t2_u", "customer.subscription.updated", at: "2026-03-03T10:00:00Z", t2,
                            previous: ["cancel_at_period_end": false]))) == "applied")
            t2["status"] = "canceled"
            t2["ended_at"] = S.n("2026-03-08T10:00:00Z")
            t2["cancellation_details"] = ["reason": "cancellation_requested", "comment": .null, "feedback": .null]
            #expect(
                S.status(try await S.post(http, S.event("evt_t2_d", "customer.subscription.deleted", at: "2026-03-08T10:00:00Z", t2))) == "applied")
            #expect(try await S.entitlement(http, api, "web-t2", "pro", at: "2026-03-05T00:00:00Z")?["will_renew"] == false)

            // f1 and f2 pay March, fail in April; f1 recovers, f2 is deleted (involuntary churn).
            for who in ["f1", "f2"] {
                #expect(
                    S.status(
                        try await S.post(
                            http,
                            S.event(
                                "evt_\(who)_1", "invoice.paid", at: "2026-03-01T10:00:01Z",
                                S.invoice(
                                    "in_\(who)_1", "subscription_create", customer: "cus_\(who)", sub: "sub_\(who)", pi: "pi_\(who)_1",
                                    paidAt: "2026-03-01T10:00:00Z",
                                    lines: [S.line("il_\(who)_1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")],
                                    subscriber: "web-\(who)")))) == "applied")
                var failed = S.invoice(
                    "in_\(who)_2", "subscription_cycle", customer: "cus_\(who)", sub: "sub_\(who)", pi: "pi_\(who)_2", paidAt: "2026-04-01T10:00:00Z",
                    lines: [S.line("il_\(who)_2", 1000, "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "pro.monthly")], subscriber: "web-\(who)")
                failed["status_transitions"] = ["paid_at": .null]
                let f = try await S.post(http, S.event("evt_\(who)_f", "invoice.payment_failed", at: "2026-04-01T11:00:00Z", failed))
                #expect(S.status(f) == "applied", "\(String(buffer: f.body))")
                // The subscription's past_due says the same failure: stored once.
                let pastDue = try await S.post(
                    http,
                    S.event(
                        "evt_\(who)_pd", "customer.subscription.updated", at: "2026-04-01T11:00:01Z",
                        S.subscription(
                            "sub_\(who)", customer: "cus_\(who)", subscriber: "web-\(who)", status: "past_due",
                            ["current_period_start": S.n("2026-04-01T10:00:00Z")]),
                        previous: ["status": "active"]))
                #expect(S.status(pastDue) == "applied")
                #expect(try pastDue.events.count == 1)
            }
            #expect(try await S.entitlement(http, api, "web-f1", "pro", at: "2026-04-02T00:00:00Z")?["in_grace"] == true)
            #expect(
                S.status(
                    try await S.post(
                        http,
                        S.event(
                            "evt_f1_3", "invoice.paid", at: "2026-04-03T10:00:01Z",
                            S.invoice(
                                "in_f1_2", "subscription_cycle", customer: "cus_f1", sub: "sub_f1", pi: "pi_f1_2", paidAt: "2026-04-03T10:00:00Z",
                                lines: [S.line("il_f1_2", 1000, "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "pro.monthly")], subscriber: "web-f1")
                        ))) == "applied")
            #expect(try await S.entitlement(http, api, "web-f1", "pro", at: "2026-04-20T00:00:00Z")?["in_grace"] == false)
            var deleted = S.subscription(
                "sub_f2", customer: "cus_f2", subscriber: "web-f2", status: "canceled", ["ended_at": S.n("2026-04-05T10:00:00Z")])
            deleted["cancellation_details"] = ["reason": "payment_failed", "comment": .null, "feedback": .null]
            #expect(
                S.status(try await S.post(http, S.event("evt_f2_d", "customer.subscription.deleted", at: "2026-04-05T10:00:00Z", deleted)))
                    == "applied")
            #expect(try await S.active(http, api, "web-f2", at: "2026-04-06T00:00:00Z") == false)

            let trials = try await http.execute(uri: "/v1/reports/trials?from=2026-03-01&to=2026-04-01", method: .get, headers: api.headers(.analyst))
            let t = try #require(try trials.json.objectValue?["periods"]?.arrayValue?.first?.objectValue)
            #expect(t["started"] == 2 && t["converted"] == 1)
            let churn = try await http.execute(
                uri: "/v1/reports/churn?from=2026-04-01&to=2026-05-01&interval=month", method: .get, headers: api.headers(.analyst))
            let p = try #require(try churn.json.objectValue?["periods"]?.arrayValue?.first?.objectValue)
            #expect(p["churned_involuntary"] == 1, "\(p)")
        }
    }

    @Test("dispute created → won; a one-time pass; unknown types ignored; no API key needed")
    func disputesAndPasses() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            let pi = S.object(
                "payment_intent",
                [
                    "id": "pi_pass", "amount": 500, "amount_received": 500, "currency": "usd", "customer": .null, "status": "succeeded",
                    "created": S.n("2026-03-01T10:00:00Z"), "metadata": ["subscriber_id": "web-p", "lookup_key": "week.pass"],
                ])
            let pass = try await S.post(http, S.event("evt_pass", "payment_intent.succeeded", at: "2026-03-01T10:00:01Z", pi))
            #expect(S.status(pass) == "applied", "\(String(buffer: pass.body))")
            #expect(try await S.entitlement(http, api, "web-p", "pro", at: "2026-03-05T00:00:00Z")?["expires_at"] == "2026-03-08T10:00:00Z")

            #expect(
                S.status(
                    try await S.post(
                        http,
                        S.event(
                            "evt_d1", "invoice.paid", at: "2026-03-01T10:00:01Z",
                            S.invoice(
                                "in_d", "subscription_create", customer: "cus_d", sub: "sub_d", pi: "pi_d", paidAt: "2026-03-01T10:00:00Z",
                                lines: [S.line("il_d", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-d"))))
                    == "applied")
            var dispute = S.object(
                "dispute",
                [
                    "id": "dp_1", "charge": "ch_d", "payment_intent": "pi_d", "amount": 1000, "currency": "usd",
                    "created": S.n("2026-03-10T10:00:00Z"), "status": "needs_response",
                ])
            let created = try await S.post(http, S.event("evt_dp1", "charge.dispute.created", at: "2026-03-10T10:00:01Z", dispute))
            #expect(S.status(created) == "applied", "\(String(buffer: created.body))")
            #expect(try await S.active(http, api, "web-d", at: "2026-03-12T00:00:00Z") == false)
            dispute["status"] = "won"
            #expect(S.status(try await S.post(http, S.event("evt_dp2", "charge.dispute.closed", at: "2026-03-20T10:00:00Z", dispute))) == "applied")
            #expect(try await S.active(http, api, "web-d", at: "2026-03-21T00:00:00Z"))

            let unknown = try await S.post(
                http,
                S.event(
                    "evt_plan", "plan.created", at: "2026-03-01T10:00:00Z",
                    S.fixtures["event"]!.objectValue!["data"]!.objectValue!["object"]!.objectValue!))
            #expect(unknown.status == .ok && S.status(unknown) == "ignored")
            #expect(
                S.status(
                    try await S.post(
                        http,
                        S.event(
                            "evt_plan", "plan.created", at: "2026-03-01T10:00:00Z",
                            S.fixtures["event"]!.objectValue!["data"]!.objectValue!["object"]!.objectValue!))) == "ignored")
        }
    }

    @Test(
        "a body changed by one byte, an old t, a missing header or an unknown secret: 400 invalid_signature, nothing stored; a rotated secret works")
    func signatures() async throws {
        try await APIHarness.run(stripeSecrets: ["whsec_new", StripeHelpers.secret]) { http, api in
            try await S.catalog(http, api)
            let bytes = S.event(
                "evt_s1", "invoice.paid", at: "2026-03-01T10:00:01Z",
                S.invoice(
                    "in_s", "subscription_create", customer: "cus_s", sub: "sub_s", pi: "pi_s", paidAt: "2026-03-01T10:00:00Z",
                    lines: [S.line("il_s", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-s"))
            let now = Int64(Date().timeIntervalSince1970)
            var tampered = bytes
            let i = tampered.firstIndex(of: UInt8(ascii: "1"))!
            tampered[i] = UInt8(ascii: "2")
            let sig = StripeSignatureVerifier.signature(secret: S.secret, timestamp: now, body: bytes)
            for r in [
                try await S.post(http, tampered, header: "t=\(now),v1=\(sig)"),
                try await S.post(http, bytes, t: now - 301),
                try await S.post(http, bytes, secret: "whsec_unknown"),
                try await http.execute(
                    uri: "/v1/stores/stripe/webhooks", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(bytes: bytes)),
            ] {
                #expect(r.status == .badRequest && r.errorCode == "invalid_signature", "\(String(buffer: r.body))")
            }
            let windows = try await http.execute(uri: "/v1/subscribers/web-s/windows", method: .get, headers: api.headers(.reader))
            #expect(try windows.json.objectValue?["windows"]?.arrayValue?.isEmpty ?? true)
            // A signed event that is not what Stripe documents: 422 naming the field, nothing stored.
            let huge = S.event(
                "evt_s2", "invoice.paid", at: "2026-03-01T10:00:01Z",
                S.invoice(
                    "in_h", "subscription_create", customer: "cus_s", sub: "sub_s", pi: "pi_h", paidAt: "2026-03-01T10:00:00Z",
                    lines: [S.line("il_h", 1_000_000_000_000_001, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-s"
                ))
            let refused = try await S.post(http, huge)
            #expect(
                refused.status == .unprocessableContent && refused.errorField == "data.object.lines.data[0].amount", "\(String(buffer: refused.body))"
            )
            let unknownPrice = S.event(
                "evt_s3", "invoice.paid", at: "2026-03-01T10:00:01Z",
                S.invoice(
                    "in_u", "subscription_create", customer: "cus_s", sub: "sub_s", pi: "pi_u", paidAt: "2026-03-01T10:00:00Z",
                    lines: [S.line("il_u", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "no.such.price")], subscriber: "web-s"))
            let missing = try await S.post(http, unknownPrice)
            #expect(missing.status == .unprocessableContent && missing.errorCode == "invalid_event", "\(String(buffer: missing.body))")
            let notJSON = try await S.post(http, Array("not json".utf8))
            #expect(notJSON.status == .badRequest && notJSON.errorCode == "invalid_request")
            let after = try await http.execute(uri: "/v1/subscribers/web-s/windows", method: .get, headers: api.headers(.reader))
            #expect(try after.json.objectValue?["windows"]?.arrayValue?.isEmpty ?? true)
            // The old secret during a rotation, then the new one (a retried delivery: duplicate).
            #expect(S.status(try await S.post(http, bytes, secret: S.secret)) == "applied")
            #expect(S.status(try await S.post(http, bytes, secret: "whsec_new")) == "duplicate")
        }
    }

    @Test("an upgrade that waited for its subscriber still cuts the replaced payment when applied")
    func pendingUpgrade() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            let c = "cus_P"
            let sub = "sub_P"
            #expect(
                S.status(
                    try await S.post(
                        http,
                        S.event(
                            "evt_p1", "invoice.paid", at: "2026-03-01T10:00:05Z",
                            S.invoice(
                                "in_p1", "subscription_create", customer: c, sub: sub, pi: "pi_p1", paidAt: "2026-03-01T10:00:00Z",
                                lines: [S.line("il_p1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")])))) == "pending")
            #expect(
                S.status(
                    try await S.post(
                        http,
                        S.event(
                            "evt_p2", "invoice.paid", at: "2026-03-15T10:00:05Z",
                            S.invoice(
                                "in_p2", "subscription_update", customer: c, sub: sub, pi: "pi_p2", paidAt: "2026-03-15T10:00:00Z",
                                lines: [
                                    S.line(
                                        "il_p2a", -500, "2026-03-15T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly", proration: true,
                                        credited: "in_p1"),
                                    S.line("il_p2b", 1000, "2026-03-15T10:00:00Z", "2026-04-01T10:00:00Z", "max.monthly", proration: true),
                                ])))) == "pending")
            let checkout = S.object(
                "checkout.session", ["id": "cs_P", "mode": "subscription", "client_reference_id": "web-p", "customer": .string(c)])
            #expect(try await S.post(http, S.event("evt_pc", "checkout.session.completed", at: "2026-03-01T10:00:06Z", checkout)).status == .ok)
            let r = try await http.execute(uri: "/v1/subscribers/web-p/windows", method: .get, headers: api.headers(.reader))
            let windows = try #require(try r.json.objectValue?["windows"]?.arrayValue?.compactMap(\.objectValue))
            let old = try #require(windows.first { $0["transaction_id"] == "pi_p1" })
            #expect(old["cut_at"] == "2026-03-15T10:00:00Z", "\(windows)")
            #expect(try await S.active(http, api, "web-p", "max", at: "2026-03-20T00:00:00Z"))
        }
    }

    @Test("without a configured secret the route answers 404 not_configured")
    func notConfigured() async throws {
        try await APIHarness.run(stripeSecrets: []) { http, _ in
            let r = try await S.post(http, Array("{}".utf8))
            #expect(r.status == .notFound && r.errorCode == "not_configured")
        }
    }

    @Test("the same events in another order, some twice, give the same windows")
    func order() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            func events(_ x: String) -> [[UInt8]] {
                let c = "cus_\(x)"
                let sub = "sub_\(x)"
                let who = "web-\(x)"
                var canceled = S.subscription(sub, customer: c, subscriber: who, status: "active", ["canceled_at": S.n("2026-04-10T10:00:00Z")])
                canceled["cancel_at_period_end"] = true
                var ended = canceled
                ended["status"] = "canceled"
                ended["ended_at"] = S.n("2026-05-01T10:00:00Z")
                return [
                    S.event(
                        "evt_\(x)_1", "invoice.paid", at: "2026-03-01T10:00:01Z",
                        S.invoice(
                            "in_\(x)_1", "subscription_create", customer: c, sub: sub, pi: "pi_\(x)_1", paidAt: "2026-03-01T10:00:00Z",
                            lines: [S.line("il_\(x)_1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: who)),
                    S.event(
                        "evt_\(x)_2", "invoice.paid", at: "2026-04-01T10:00:01Z",
                        S.invoice(
                            "in_\(x)_2", "subscription_cycle", customer: c, sub: sub, pi: "pi_\(x)_2", paidAt: "2026-04-01T10:00:00Z",
                            lines: [S.line("il_\(x)_2", 1000, "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "pro.monthly")], subscriber: who)),
                    S.event(
                        "evt_\(x)_3", "refund.created", at: "2026-04-05T10:00:01Z",
                        S.object(
                            "refund",
                            [
                                "id": .string("re_\(x)"), "amount": 200, "payment_intent": .string("pi_\(x)_2"),
                                "created": S.n("2026-04-05T10:00:00Z"), "currency": "usd",
                            ])),
                    S.event(
                        "evt_\(x)_4", "customer.subscription.updated", at: "2026-04-10T10:00:00Z", canceled, previous: ["cancel_at_period_end": false]
                    ),
                    S.event("evt_\(x)_5", "customer.subscription.deleted", at: "2026-05-01T10:00:00Z", ended),
                ]
            }
            for e in events("x1") { #expect(try await S.post(http, e).status == .ok) }
            let shuffled = events("x2")
            for i in [4, 2, 3, 1, 2, 0, 4, 3] { #expect(try await S.post(http, shuffled[i]).status == .ok) }
            func windows(_ who: String) async throws -> [JSONValue] {
                let r = try await http.execute(uri: "/v1/subscribers/\(who)/windows", method: .get, headers: api.headers(.reader))
                return try (r.json.objectValue?["windows"]?.arrayValue ?? []).map { w in
                    let o = w.objectValue ?? [:]
                    return .object(o.filter { ["entitlement", "start", "end", "kind", "product_id", "cut_at"].contains($0.key) })
                }
            }
            let a = try await windows("web-x1")
            let b = try await windows("web-x2")
            #expect(a.count == 2 && a == b, "\(a) vs \(b)")
            for at in ["2026-03-15T00:00:00Z", "2026-04-20T00:00:00Z", "2026-05-02T00:00:00Z"] {
                let ea = try await S.entitlement(http, api, "web-x1", "pro", at: at)
                let eb = try await S.entitlement(http, api, "web-x2", "pro", at: at)
                #expect(ea == eb, "\(at)")
            }
        }
    }
}

/// A local stand-in for Stripe's API: `GET /v1/customers/{id}` (and prices, subscriptions) with the documented
/// objects, and the list APIs (`GET /v1/subscriptions`, …: `StripeAPIStandIn+Lists.swift`), checking the bearer key as Stripe
/// does (401 otherwise).
final class StripeAPIStandIn: Sendable {
    let key: String
    let customers: [String: [String: JSONValue]]
    let prices: [String: [String: JSONValue]]
    let subscriptions: [String: [String: JSONValue]]
    let seen = Mutex<[String]>([])
    /// The list APIs' objects and behaviour (`StripeAPIStandIn+Lists.swift`).
    let lists = Mutex(Lists())

    init(
        key: String, customers: [String: [String: JSONValue]] = [:], prices: [String: [String: JSONValue]] = [:],
        subscriptions: [String: [String: JSONValue]] = [:]
    ) {
        self.key = key
        self.customers = customers
        self.prices = prices
        self.subscriptions = subscriptions
    }

    func serve<T: Sendable>(_ body: @escaping @Sendable (String) async throws -> T) async throws -> T {
        let router = Router()
        // Stripe's answers: 401 for a wrong key, 404 `resource_missing`, else the object.
        for (collection, objects) in [("customers", customers), ("prices", prices), ("subscriptions", subscriptions)] {
            router.get("v1/\(collection)/:id") { request, context -> Response in
                let id = context.parameters.get("id") ?? ""
                self.seen.withLock { $0.append(id) }
                guard request.headers[.authorization] == "Bearer \(self.key)" else { return Self.unauthorized }
                guard let object = objects[id] else {
                    return Response(
                        status: .notFound, headers: [.contentType: "application/json"],
                        body: .init(byteBuffer: ByteBuffer(string: #"{"error":{"type":"invalid_request_error","code":"resource_missing"}}"#)))
                }
                return Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(bytes: JSONValue.object(object).canonicalBytes())))
            }
        }
        registerLists(on: router)
        return try await LocalHTTPServer.serve(router, label: "stripe-stand-in") { port in try await body("http://127.0.0.1:\(port)") }
    }

    static var unauthorized: Response {
        Response(
            status: .unauthorized, headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(string: #"{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}"#)))
    }
}

@Suite("Stripe API look-ups against a local stand-in", .serialized)
struct StripeLookupTests {
    typealias S = StripeHelpers
    static let key = "sk_test_standin"
    static let customers: [String: [String: JSONValue]] = [
        "cus_L": S.object("customer", ["id": "cus_L", "metadata": ["subscriber_id": "web-l"]]),
        "cus_N": S.object("customer", ["id": "cus_N", "metadata": [:]]),
    ]

    static func invoice(_ customer: String) -> [UInt8] {
        S.event(
            "evt_\(customer)", "invoice.paid", at: "2026-03-01T10:00:01Z",
            S.invoice(
                "in_\(customer)", "subscription_create", customer: customer, sub: "sub_\(customer)", pi: "pi_\(customer)",
                paidAt: "2026-03-01T10:00:00Z",
                lines: [S.line("il_\(customer)", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")]))
    }

    @Test("an event whose customer no link names waits, then the customer's metadata.subscriber_id applies it")
    func lookUp() async throws {
        let standIn = StripeAPIStandIn(key: Self.key, customers: Self.customers)
        try await standIn.serve { base in
            try await APIHarness.run(stripeAPIKey: Self.key, stripeAPIBaseURL: base) { http, api in
                try await S.catalog(http, api)
                #expect(S.status(try await S.post(http, Self.invoice("cus_L"))) == "pending")
                #expect(S.status(try await S.post(http, Self.invoice("cus_N"))) == "pending")
                var active = false
                for _ in 0..<100 where !active {
                    try await Task.sleep(for: .milliseconds(100))
                    active = try await S.active(http, api, "web-l", at: "2026-03-15T00:00:00Z")
                }
                #expect(active, "the looked-up customer's event was not applied")
                // Later events of that customer resolve through the link at once.
                #expect(
                    S.status(
                        try await S.post(
                            http,
                            S.event(
                                "evt_cus_L_2", "invoice.paid", at: "2026-04-01T10:00:01Z",
                                S.invoice(
                                    "in_cus_L_2", "subscription_cycle", customer: "cus_L", sub: "sub_cus_L", pi: "pi_cus_L_2",
                                    paidAt: "2026-04-01T10:00:00Z",
                                    lines: [S.line("il_cus_L_2", 1000, "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "pro.monthly")]))))
                        == "applied")
                // The same pass asks about cus_N after applying cus_L's events.
                for _ in 0..<50 where !standIn.seen.withLock({ $0.contains("cus_N") }) { try await Task.sleep(for: .milliseconds(100)) }
            }
        }
        #expect(standIn.seen.withLock { $0.contains("cus_L") && $0.contains("cus_N") })
    }

    @Test("a key Stripe refuses (401) applies nothing: the events stay pending")
    func wrongKey() async throws {
        let standIn = StripeAPIStandIn(key: Self.key, customers: Self.customers)
        try await standIn.serve { base in
            try await APIHarness.run(stripeAPIKey: "sk_test_wrong", stripeAPIBaseURL: base) { http, api in
                try await S.catalog(http, api)
                #expect(S.status(try await S.post(http, Self.invoice("cus_L"))) == "pending")
                try await Task.sleep(for: .milliseconds(800))
                #expect(try await S.active(http, api, "web-l", at: "2026-03-15T00:00:00Z") == false)
                // Still pending: a retried delivery is pending again, not a duplicate.
                #expect(S.status(try await S.post(http, Self.invoice("cus_L"))) == "pending")
            }
        }
        #expect(!standIn.seen.withLock { $0.isEmpty })
    }
}

extension StripeLookupTests {
    @Test(
        "API 2025-03-31.basil: an invoice naming only a price id no event has taught is applied under the price's lookup key, asked of Stripe's API"
    )
    func priceLookUp() async throws {
        let price = S.object("price", ["id": "price_1Basil", "lookup_key": "pro.monthly"])
        let standIn = StripeAPIStandIn(key: Self.key, prices: ["price_1Basil": price, "price_1NoKey": S.object("price", ["id": "price_1NoKey"])])
        @Sendable func invoice(_ x: String, price: String) -> [UInt8] {
            S.versioned(
                "evt_\(x)", "invoice.paid", at: "2026-03-01T10:00:01Z",
                S.basilInvoice(
                    "in_\(x)", "subscription_create", customer: "cus_\(x)", sub: "sub_\(x)", paidAt: "2026-03-01T10:00:00Z",
                    lines: [S.basilLine("il_\(x)", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", price: price, sub: "sub_\(x)")],
                    subscriber: "web-\(x)"))
        }
        // Without an API key the id is all the ledger has: refused (Stripe retries), nothing stored.
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            let refused = try await S.post(http, invoice("p0", price: "price_1Basil"))
            #expect(refused.status == .unprocessableContent, "\(String(buffer: refused.body))")
            #expect(try await S.active(http, api, "web-p0", at: "2026-03-15T00:00:00Z") == false)
        }
        try await standIn.serve { base in
            try await APIHarness.run(stripeAPIKey: Self.key, stripeAPIBaseURL: base) { http, api in
                try await S.catalog(http, api)
                let paid = try await S.post(http, invoice("p1", price: "price_1Basil"))
                #expect(S.status(paid) == "applied", "\(String(buffer: paid.body))")
                #expect(try paid.events.first?["data"]?.objectValue?["product_id"] == "pro.monthly")
                #expect(try await S.active(http, api, "web-p1", at: "2026-03-15T00:00:00Z"))
                // Learned once: the next invoice of that price asks nothing.
                let asked = standIn.seen.withLock { $0.count }
                #expect(S.status(try await S.post(http, invoice("p2", price: "price_1Basil"))) == "applied")
                #expect(standIn.seen.withLock { $0.count } == asked)
                // A price without a lookup key, and one Stripe does not know: still refused, naming the product.
                for (x, id) in [("p3", "price_1NoKey"), ("p4", "price_1Gone")] {
                    let refused = try await S.post(http, invoice(x, price: id))
                    #expect(refused.status == .unprocessableContent, "\(id): \(String(buffer: refused.body))")
                }
            }
        }
        #expect(standIn.seen.withLock { $0.contains("price_1Basil") && $0.contains("price_1Gone") })
    }
}

@Suite("Stripe webhooks: hostile signed events")
struct StripeHostileTests {
    typealias S = StripeHelpers

    static let odd: [JSONValue] = [
        .null, true, "", .string(String(repeating: "x", count: 5000)), -1, 0, .number(JSONNumber(Int64.max)), .number(JSONNumber(Int64.min)),
        .number(JSONNumber(jsonText: "1e400")!), .number(JSONNumber(jsonText: "-0.5")!), [], [:], ["id": "x"], [[[[[]]]]], "\u{0}", "cus_\u{202E}",
        "1780000000", .number(JSONNumber(253_402_300_800)),
    ]

    @Test("each mapped type with fields replaced by odd values: answered 200, 400, 409 or 422, never 500; the server keeps answering")
    func mutations() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            let bases: [(String, [String: JSONValue])] = [
                (
                    "invoice.paid",
                    S.invoice(
                        "in_h", "subscription_cycle", customer: "cus_h", sub: "sub_h", pi: "pi_h", paidAt: "2026-03-01T10:00:00Z",
                        lines: [S.line("il_h", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-h")
                ),
                (
                    "invoice.payment_failed",
                    S.invoice(
                        "in_h2", "subscription_cycle", customer: "cus_h", sub: "sub_h", pi: "pi_h2", paidAt: "2026-04-01T10:00:00Z",
                        lines: [S.line("il_h2", 1000, "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "pro.monthly")], subscriber: "web-h")
                ),
                (
                    "customer.subscription.updated",
                    S.subscription(
                        "sub_h", customer: "cus_h", subscriber: "web-h", status: "past_due",
                        [
                            "current_period_start": S.n("2026-04-01T10:00:00Z"), "trial_start": S.n("2026-03-01T10:00:00Z"),
                            "trial_end": S.n("2026-03-08T10:00:00Z"),
                        ])
                ),
                (
                    "customer.subscription.deleted",
                    S.subscription("sub_h", customer: "cus_h", subscriber: "web-h", status: "canceled", ["ended_at": S.n("2026-05-01T10:00:00Z")])
                ),
                (
                    "charge.refunded",
                    S.object(
                        "charge",
                        [
                            "id": "ch_h", "payment_intent": "pi_h", "customer": "cus_h", "refunded": true,
                            "refunds": ["object": "list", "data": [.object(S.object("refund", ["id": "re_h", "payment_intent": "pi_h"]))]],
                        ])
                ),
                ("refund.created", S.object("refund", ["id": "re_h2", "payment_intent": "pi_h"])),
                ("charge.dispute.created", S.object("dispute", ["id": "dp_h", "payment_intent": "pi_h"])),
                ("charge.dispute.closed", S.object("dispute", ["id": "dp_h", "payment_intent": "pi_h", "status": "won"])),
                (
                    "payment_intent.succeeded",
                    S.object("payment_intent", ["id": "pi_p", "metadata": ["subscriber_id": "web-h", "lookup_key": "week.pass"]])
                ),
                ("checkout.session.completed", S.object("checkout.session", ["client_reference_id": "web-h", "customer": "cus_h"])),
            ]
            var random = SplitMix64(seed: 16)
            var n = 0
            for (type, base) in bases {
                for _ in 0..<12 {
                    n += 1
                    var object = base
                    for _ in 0..<3 {
                        let key = random.pick(
                            Array(object.keys).sorted() + ["lines", "items", "metadata", "created", "amount", "currency", "period"])
                        object[key] = random.pick(Self.odd)
                    }
                    let r = try await S.post(http, S.event("evt_h\(n)", type, at: "2026-03-01T10:00:00Z", object))
                    #expect([200, 400, 409, 422].contains(r.status.code), "case \(n) (\(type)): \(r.status) \(String(buffer: r.body))")
                }
            }
            // Odd envelopes.
            for envelope: JSONValue in [
                [:], ["id": "evt_x"], ["id": "evt_x", "type": "invoice.paid", "created": 1, "data": []],
                ["id": .string(String(repeating: "e", count: 300)), "type": "invoice.paid", "created": 1, "data": ["object": [:]]],
                ["id": "evt_x", "type": "invoice.paid", "created": -5, "data": ["object": [:]]], [1, 2, 3], "text",
            ] {
                let r = try await S.post(http, envelope.canonicalBytes())
                #expect([200, 400, 422].contains(r.status.code), "\(envelope): \(r.status)")
            }
            var deep = String(repeating: "[", count: 5000)
            deep += String(repeating: "]", count: 5000)
            #expect(try await S.post(http, Array("{\"id\":\"evt_d\",\"data\":\(deep)}".utf8)).status == .badRequest)
            #expect(try await http.execute(uri: "/health", method: .get).status == .ok)
        }
    }
}

extension StripeHelpers {
    /// An event as an endpoint of API `version` receives it, from a Connect `account` when given.
    static func versioned(
        _ id: String, _ type: String, at: String, _ object: [String: JSONValue], version: String = "2025-03-31.basil", account: String? = nil,
        previous: [String: JSONValue]? = nil
    ) -> [UInt8] {
        var e = fixtures["event"]!.objectValue!
        e["id"] = .string(id)
        e["type"] = .string(type)
        e["created"] = n(at)
        e["livemode"] = true
        e["api_version"] = .string(version)
        if let account { e["account"] = .string(account) }
        var data: [String: JSONValue] = ["object": .object(object)]
        if let previous { data["previous_attributes"] = .object(previous) }
        e["data"] = .object(data)
        return JSONValue.object(e).canonicalBytes()
    }

    /// An invoice line as API 2025-03-31.basil and later send it: the price only as an id under
    /// `pricing.price_details`, the proration under `parent.subscription_item_details`.
    static func basilLine(
        _ id: String, _ amount: Int64, _ from: String, _ to: String, price: String, sub: String, proration: Bool = false, credited: String? = nil
    ) -> JSONValue {
        var l = fixtures["invoice"]!.objectValue!["lines"]!.objectValue!["data"]!.arrayValue![0].objectValue!
        for k in ["price", "plan", "proration", "proration_details", "subscription", "type", "invoice_item", "subscription_item"] { l[k] = nil }
        l["id"] = .string(id)
        l["amount"] = .number(JSONNumber(amount))
        l["period"] = ["start": n(from), "end": n(to)]
        l["pricing"] = [
            "type": "price_details", "price_details": ["price": .string(price), "product": "prod_1"], "unit_amount_decimal": .string("\(amount)"),
        ]
        l["parent"] = [
            "type": "subscription_item_details", "invoice_item_details": .null,
            "subscription_item_details": [
                "invoice_item": .null, "proration": .bool(proration),
                "proration_details": ["credited_items": credited.map { ["invoice": .string($0), "invoice_line_items": ["il_x"]] } ?? .null],
                "subscription": .string(sub), "subscription_item": "si_1",
            ],
        ]
        return .object(l)
    }

    /// An invoice as API 2025-03-31.basil and later send it: no `subscription`, `payment_intent` or `charge`.
    static func basilInvoice(
        _ id: String, _ reason: String, customer: String, sub: String, paidAt: String, lines: [JSONValue], subscriber: String? = nil
    ) -> [String: JSONValue] {
        var o = object(
            "invoice",
            [
                "id": .string(id), "billing_reason": .string(reason), "customer": .string(customer), "currency": "usd", "status": "paid",
                "lines": ["object": "list", "data": .array(lines)],
                "status_transitions": ["paid_at": n(paidAt), "finalized_at": .null, "marked_uncollectible_at": .null, "voided_at": .null],
                "parent": [
                    "type": "subscription_details", "quote_details": .null,
                    "subscription_details": [
                        "subscription": .string(sub), "metadata": subscriber.map { ["subscriber_id": .string($0)] } ?? [:],
                        "subscription_proration_date": .null,
                    ],
                ],
            ])
        for k in ["subscription", "payment_intent", "charge", "subscription_details", "paid"] { o[k] = nil }
        return o
    }

    /// `invoice_payment.paid`'s object: the invoice and the payment intent that paid it.
    static func invoicePayment(_ id: String, invoice: String, pi: String, at: String) -> [String: JSONValue] {
        object(
            "invoice_payment",
            [
                "id": .string(id), "invoice": .string(invoice), "payment": ["type": "payment_intent", "payment_intent": .string(pi)],
                "status": "paid", "amount_paid": 1000, "currency": "usd", "created": n(at),
                "status_transitions": ["canceled_at": .null, "paid_at": n(at)],
            ])
    }

    static func windows(_ http: any TestClientProtocol, _ api: APIHarness, _ who: String) async throws -> [[String: JSONValue]] {
        let r = try await http.execute(uri: "/v1/subscribers/\(who)/windows", method: .get, headers: api.headers(.reader))
        return try (r.json.objectValue?["windows"]?.arrayValue ?? []).compactMap(\.objectValue)
    }

    static func refunds(_ http: any TestClientProtocol, _ api: APIHarness) async throws -> Int64 {
        let r = try await http.execute(uri: "/v1/reports/revenue?from=2026-01-01&to=2027-01-01", method: .get, headers: api.headers(.analyst))
        let rows = try r.json.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue) ?? []
        return rows.compactMap { $0["refunds"]?.numberValue?.int64Value }.reduce(0, +)
    }
}

/// The stores as they really behave: Stripe's current API version, events in any order, Connect accounts.
@Suite("Stripe webhooks as Stripe really sends them", .serialized)
struct StripeRealWorldTests {
    typealias S = StripeHelpers

    @Test(
        "API 2025-03-31.basil and later: the price by its lookup key, payments by invoice_payment.paid; refunds, full refunds and disputes reach the payment"
    )
    func currentAPIVersion() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            for (x, version) in [("b", "2025-03-31.basil"), ("c", "2026-07-29.dahlia")] {
                let c = "cus_\(x)"
                let sub = "sub_\(x)"
                let who = "web-\(x)"
                // The subscription names its price with the lookup key; the invoice names only the price's id.
                let created = try await S.post(
                    http,
                    S.versioned(
                        "evt_\(x)_s", "customer.subscription.created", at: "2026-03-01T10:00:00Z",
                        S.subscription(sub, customer: c, subscriber: who, status: "active"), version: version))
                #expect(created.status == .ok, "\(String(buffer: created.body))")
                let invoice = S.basilInvoice(
                    "in_\(x)1", "subscription_create", customer: c, sub: sub, paidAt: "2026-03-01T10:00:00Z",
                    lines: [S.basilLine("il_\(x)1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", price: "price_pro.monthly", sub: sub)],
                    subscriber: who)
                let paid = try await S.post(http, S.versioned("evt_\(x)_i", "invoice.paid", at: "2026-03-01T10:00:01Z", invoice, version: version))
                #expect(S.status(paid) == "applied", "\(version): \(String(buffer: paid.body))")
                #expect(try await S.active(http, api, who, at: "2026-03-15T00:00:00Z"))
                let pay = try await S.post(
                    http,
                    S.versioned(
                        "evt_\(x)_p", "invoice_payment.paid", at: "2026-03-01T10:00:02Z",
                        S.invoicePayment("inpay_\(x)", invoice: "in_\(x)1", pi: "pi_\(x)1", at: "2026-03-01T10:00:00Z"), version: version))
                #expect(pay.status == .ok, "\(String(buffer: pay.body))")
                // A partial refund: money back on the invoice's transaction, access continues.
                let re1 = S.object(
                    "refund",
                    [
                        "id": .string("re_\(x)1"), "amount": 300, "payment_intent": .string("pi_\(x)1"), "charge": .string("ch_\(x)1"),
                        "created": S.n("2026-03-10T10:00:00Z"), "currency": "usd",
                    ])
                let partial = try await S.post(http, S.versioned("evt_\(x)_r1", "refund.created", at: "2026-03-10T10:00:01Z", re1, version: version))
                #expect(S.status(partial) == "applied", "\(version): \(String(buffer: partial.body))")
                let paidWindow = try await S.windows(http, api, who).first
                #expect(
                    try partial.events.first?["data"]?.objectValue?["transaction_id"] == paidWindow?["transaction_id"],
                    "the refund names the paid invoice's transaction")
                #expect(try await S.active(http, api, who, at: "2026-03-12T00:00:00Z"))
                // The rest refunded: refund.created brings the money, charge.refunded (no refunds list, no invoice) ends access.
                var re2 = re1
                re2["id"] = .string("re_\(x)2")
                re2["amount"] = 700
                re2["created"] = S.n("2026-03-20T10:00:00Z")
                #expect(
                    S.status(try await S.post(http, S.versioned("evt_\(x)_r2", "refund.created", at: "2026-03-20T10:00:01Z", re2, version: version)))
                        == "applied")
                var charge = S.object(
                    "charge",
                    [
                        "id": .string("ch_\(x)1"), "payment_intent": .string("pi_\(x)1"), "customer": .string(c), "amount": 1000,
                        "amount_refunded": 1000,
                        "refunded": true, "currency": "usd",
                    ])
                charge["refunds"] = nil
                let full = try await S.post(http, S.versioned("evt_\(x)_ch", "charge.refunded", at: "2026-03-20T10:00:02Z", charge, version: version))
                #expect(S.status(full) == "applied", "\(version): \(String(buffer: full.body))")
                #expect(try await S.active(http, api, who, at: "2026-03-21T00:00:00Z") == false, "\(version): a full refund ends access")
            }
            // A dispute names only the charge and payment intent: invoice_payment.paid tells whose they are.
            let invoice = S.basilInvoice(
                "in_d1", "subscription_create", customer: "cus_d", sub: "sub_d", paidAt: "2026-03-01T10:00:00Z",
                lines: [S.basilLine("il_d1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", price: "price_pro.monthly", sub: "sub_d")],
                subscriber: "web-d")
            #expect(
                S.status(
                    try await S.post(
                        http,
                        S.versioned(
                            "evt_d_s", "customer.subscription.created", at: "2026-03-01T10:00:00Z",
                            S.subscription("sub_d", customer: "cus_d", subscriber: "web-d", status: "active")))) != nil)
            #expect(S.status(try await S.post(http, S.versioned("evt_d_i", "invoice.paid", at: "2026-03-01T10:00:01Z", invoice))) == "applied")
            let dispute = S.object(
                "dispute",
                [
                    "id": "dp_d", "charge": "ch_d1", "payment_intent": "pi_d1", "amount": 1000, "currency": "usd",
                    "created": S.n("2026-03-10T10:00:00Z"),
                    "status": "needs_response",
                ])
            // The dispute first, then the payment that names its invoice.
            _ = try await S.post(http, S.versioned("evt_d_dp", "charge.dispute.created", at: "2026-03-10T10:00:01Z", dispute))
            let pay = try await S.post(
                http,
                S.versioned(
                    "evt_d_p", "invoice_payment.paid", at: "2026-03-01T10:00:02Z",
                    S.invoicePayment("inpay_d", invoice: "in_d1", pi: "pi_d1", at: "2026-03-01T10:00:00Z")))
            #expect(pay.status == .ok)
            #expect(try await S.active(http, api, "web-d", at: "2026-03-12T00:00:00Z") == false, "the dispute cut access")
            #expect(try await S.refunds(http, api) == 1000 + 1000 + 1000, "each refund's and the chargeback's money")

            // A version the ledger does not know is still read, and said: /ready names it.
            let odd = try await S.post(
                http,
                S.versioned(
                    "evt_odd", "plan.created", at: "2026-03-01T10:00:00Z",
                    S.fixtures["event"]!.objectValue!["data"]!.objectValue!["object"]!.objectValue!,
                    version: "2031-01-01.zebra"))
            #expect(odd.status == .ok)
            let ready = try await http.execute(uri: "/ready", method: .get)
            #expect(
                try ready.json.objectValue?["stripe"]?.objectValue?["unknown_api_versions"]?.arrayValue?.contains("2031-01-01.zebra") == true,
                "\(String(buffer: ready.body))")
        }
    }

    @Test("payments applied from the inbox link their payment intent and charge: a later refund or dispute finds them")
    func pendingPaymentsLinked() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            // An invoice before the checkout that names its subscriber.
            let invoice = S.invoice(
                "in_q1", "subscription_create", customer: "cus_Q", sub: "sub_Q", pi: "pi_q1", paidAt: "2026-03-01T10:00:00Z",
                lines: [S.line("il_q1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")])
            #expect(S.status(try await S.post(http, S.event("evt_q1", "invoice.paid", at: "2026-03-01T10:00:01Z", invoice))) == "pending")
            let checkout = S.object("checkout.session", ["id": "cs_Q", "mode": "subscription", "client_reference_id": "web-q", "customer": "cus_Q"])
            #expect(try await S.post(http, S.event("evt_q2", "checkout.session.completed", at: "2026-03-01T10:00:02Z", checkout)).status == .ok)
            #expect(try await S.active(http, api, "web-q", at: "2026-03-05T00:00:00Z"))
            let refund = S.object(
                "refund", ["id": "re_q", "amount": 300, "payment_intent": "pi_q1", "created": S.n("2026-03-05T10:00:00Z"), "currency": "usd"])
            let r = try await S.post(http, S.event("evt_q3", "refund.created", at: "2026-03-05T10:00:01Z", refund))
            #expect(S.status(r) == "applied", "\(String(buffer: r.body))")
            let dispute = S.object(
                "dispute",
                [
                    "id": "dp_q", "charge": "ch_q1", "payment_intent": "pi_q1", "amount": 1000, "currency": "usd",
                    "created": S.n("2026-03-10T10:00:00Z"),
                ])
            let d = try await S.post(http, S.event("evt_q4", "charge.dispute.created", at: "2026-03-10T10:00:01Z", dispute))
            #expect(S.status(d) == "applied", "\(String(buffer: d.body))")
            var lost = dispute
            lost["status"] = "lost"
            #expect(try await S.post(http, S.event("evt_q5", "charge.dispute.closed", at: "2026-03-20T10:00:00Z", lost)).status == .ok)
            #expect(try await S.active(http, api, "web-q", at: "2026-03-21T00:00:00Z") == false, "a lost dispute keeps access cut")

            // A pass paid before the customer names its subscriber.
            let pi = S.object(
                "payment_intent",
                [
                    "id": "pi_r", "amount": 500, "amount_received": 500, "currency": "usd", "customer": "cus_R", "status": "succeeded",
                    "latest_charge": "ch_r", "created": S.n("2026-03-01T10:00:00Z"), "metadata": ["lookup_key": "week.pass"],
                ])
            #expect(S.status(try await S.post(http, S.event("evt_r1", "payment_intent.succeeded", at: "2026-03-01T10:00:01Z", pi))) == "pending")
            let customer = S.object("customer", ["id": "cus_R", "metadata": ["subscriber_id": "web-r"]])
            #expect(try await S.post(http, S.event("evt_r2", "customer.updated", at: "2026-03-01T10:00:02Z", customer)).status == .ok)
            #expect(try await S.active(http, api, "web-r", at: "2026-03-02T00:00:00Z"))
            let passDispute = S.object(
                "dispute",
                ["id": "dp_r", "charge": "ch_r", "payment_intent": "pi_r", "amount": 500, "currency": "usd", "created": S.n("2026-03-03T10:00:00Z")])
            let pd = try await S.post(http, S.event("evt_r3", "charge.dispute.created", at: "2026-03-03T10:00:01Z", passDispute))
            #expect(S.status(pd) == "applied", "\(String(buffer: pd.body))")
            #expect(try await S.active(http, api, "web-r", at: "2026-03-04T00:00:00Z") == false)
        }
    }

    @Test("a full refund of an invoice with several paid lines cuts every line's window")
    func fullRefundOfSeveralLines() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            let invoice = S.invoice(
                "in_m1", "subscription_cycle", customer: "cus_M", sub: "sub_M", pi: "pi_m1", paidAt: "2026-03-01T10:00:00Z",
                lines: [
                    S.line("il_m1a", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly"),
                    S.line("il_m1b", 500, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "max.monthly", proration: true),
                ], subscriber: "web-m")
            #expect(S.status(try await S.post(http, S.event("evt_m1", "invoice.paid", at: "2026-03-01T10:00:01Z", invoice))) == "applied")
            #expect(try await S.active(http, api, "web-m", "max", at: "2026-03-05T00:00:00Z"))
            var charge = S.object(
                "charge",
                [
                    "id": "ch_m1", "payment_intent": "pi_m1", "customer": "cus_M", "amount": 1500, "amount_refunded": 1500, "refunded": true,
                    "currency": "usd",
                ])
            charge["refunds"] = nil
            let r = try await S.post(http, S.event("evt_m2", "charge.refunded", at: "2026-03-10T10:00:00Z", charge))
            #expect(S.status(r) == "applied", "\(String(buffer: r.body))")
            #expect(try await S.active(http, api, "web-m", "pro", at: "2026-03-11T00:00:00Z") == false)
            #expect(try await S.active(http, api, "web-m", "max", at: "2026-03-11T00:00:00Z") == false)
        }
    }

    @Test("an upgrade's credit delivered before the replaced invoice gives the ledger of the delivery in order")
    func creditBeforeReplacedInvoice() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            func events(_ x: String) -> [[UInt8]] {
                [
                    S.event(
                        "evt_\(x)_1", "invoice.paid", at: "2026-03-01T10:00:01Z",
                        S.invoice(
                            "in_\(x)_1", "subscription_create", customer: "cus_\(x)", sub: "sub_\(x)", pi: "pi_\(x)_1",
                            paidAt: "2026-03-01T10:00:00Z",
                            lines: [S.line("il_\(x)_1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-\(x)")
                    ),
                    S.event(
                        "evt_\(x)_2", "invoice.paid", at: "2026-03-15T10:00:01Z",
                        S.invoice(
                            "in_\(x)_2", "subscription_update", customer: "cus_\(x)", sub: "sub_\(x)", pi: "pi_\(x)_2",
                            paidAt: "2026-03-15T10:00:00Z",
                            lines: [
                                S.line(
                                    "il_\(x)_2a", -500, "2026-03-15T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly", proration: true,
                                    credited: "in_\(x)_1"),
                                S.line("il_\(x)_2b", 1000, "2026-03-15T10:00:00Z", "2026-04-01T10:00:00Z", "max.monthly", proration: true),
                            ], subscriber: "web-\(x)")),
                ]
            }
            for e in events("u1") { #expect(try await S.post(http, e).status == .ok) }
            for e in events("u2").reversed() { #expect(try await S.post(http, e).status == .ok) }
            func shape(_ w: [[String: JSONValue]]) -> [JSONValue] {
                w.map { .object($0.filter { ["entitlement", "start", "end", "kind", "product_id", "cut_at"].contains($0.key) }) }
            }
            let a = try await S.windows(http, api, "web-u1")
            let b = try await S.windows(http, api, "web-u2")
            #expect(shape(a) == shape(b), "\(a) vs \(b)")
            #expect(b.first { $0["product_id"] == "pro.monthly" }?["cut_at"] == "2026-03-15T10:00:00Z", "\(b)")
            #expect(try await S.refunds(http, api) == 1000, "both credits are refunds of a known payment")
        }
    }

    @Test("an extended trial ends at its new date, whichever of the subscription's events is stored first")
    func trialExtended() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            for (x, inOrder) in [("ta", true), ("tb", false)] {
                let first = S.subscription(
                    "sub_\(x)", customer: "cus_\(x)", subscriber: "web-\(x)", status: "trialing",
                    ["trial_start": S.n("2026-03-01T10:00:00Z"), "trial_end": S.n("2026-03-08T10:00:00Z")])
                var extended = first
                extended["trial_end"] = S.n("2026-03-15T10:00:00Z")
                let created = S.event("evt_\(x)_c", "customer.subscription.created", at: "2026-03-01T10:00:00Z", first)
                let updated = S.event(
                    "evt_\(x)_u", "customer.subscription.updated", at: "2026-03-05T10:00:00Z", extended,
                    previous: ["trial_end": S.n("2026-03-08T10:00:00Z")])
                for e in inOrder ? [created, updated] : [updated, created] { #expect(S.status(try await S.post(http, e)) == "applied") }
                let e = try await S.entitlement(http, api, "web-\(x)", "pro", at: "2026-03-10T00:00:00Z")
                #expect(e?["active"] == true && e?["expires_at"] == "2026-03-15T10:00:00Z", "\(x): \(String(describing: e))")
            }
        }
    }

    @Test("a subscription canceled at once ends access then, not at its period's end")
    func immediateCancel() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            let invoice = S.invoice(
                "in_k1", "subscription_create", customer: "cus_K", sub: "sub_K", pi: "pi_k1", paidAt: "2026-03-01T10:00:00Z",
                lines: [S.line("il_k1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-k")
            #expect(S.status(try await S.post(http, S.event("evt_k1", "invoice.paid", at: "2026-03-01T10:00:01Z", invoice))) == "applied")
            var ended = S.subscription(
                "sub_K", customer: "cus_K", subscriber: "web-k", status: "canceled",
                [
                    "ended_at": S.n("2026-03-10T10:00:00Z"), "canceled_at": S.n("2026-03-10T10:00:00Z"),
                    "current_period_start": S.n("2026-03-01T10:00:00Z"), "current_period_end": S.n("2026-04-01T10:00:00Z"),
                ])
            ended["cancellation_details"] = ["reason": "cancellation_requested", "comment": .null, "feedback": .null]
            let r = try await S.post(http, S.event("evt_k2", "customer.subscription.deleted", at: "2026-03-10T10:00:00Z", ended))
            #expect(S.status(r) == "applied", "\(String(buffer: r.body))")
            #expect(try await S.active(http, api, "web-k", at: "2026-03-09T00:00:00Z"))
            #expect(try await S.active(http, api, "web-k", at: "2026-03-11T00:00:00Z") == false)
        }
    }

    @Test("past-due access lasts while Stripe retries (next_payment_attempt), at most 30 days by default")
    func graceFollowsRetries() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            for who in ["g1", "g2"] {
                let paid = S.invoice(
                    "in_\(who)_1", "subscription_create", customer: "cus_\(who)", sub: "sub_\(who)", pi: "pi_\(who)_1",
                    paidAt: "2026-03-01T10:00:00Z",
                    lines: [S.line("il_\(who)_1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-\(who)")
                #expect(S.status(try await S.post(http, S.event("evt_\(who)_1", "invoice.paid", at: "2026-03-01T10:00:01Z", paid))) == "applied")
            }
            // g1: retries on days 3, 7 and 10; the payment is recovered on day 10.
            for (i, (at, next)) in [
                ("2026-04-01T10:00:00Z", "2026-04-04T10:00:00Z"), ("2026-04-04T10:00:00Z", "2026-04-08T10:00:00Z"),
                ("2026-04-08T10:00:00Z", "2026-04-11T10:00:00Z"),
            ].enumerated() {
                var failed = S.invoice(
                    "in_g1_2", "subscription_cycle", customer: "cus_g1", sub: "sub_g1", pi: "pi_g1_2", paidAt: at,
                    lines: [S.line("il_g1_2", 1000, "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "pro.monthly")], subscriber: "web-g1")
                failed["status_transitions"] = ["paid_at": .null]
                failed["attempt_count"] = .number(JSONNumber(Int64(i + 1)))
                failed["next_payment_attempt"] = S.n(next)
                failed["created"] = S.n("2026-04-01T09:00:00Z")
                #expect(S.status(try await S.post(http, S.event("evt_g1_f\(i)", "invoice.payment_failed", at: at, failed))) == "applied")
            }
            #expect(try await S.entitlement(http, api, "web-g1", "pro", at: "2026-04-09T00:00:00Z")?["in_grace"] == true)
            let recovered = S.invoice(
                "in_g1_2", "subscription_cycle", customer: "cus_g1", sub: "sub_g1", pi: "pi_g1_2", paidAt: "2026-04-11T10:00:00Z",
                lines: [S.line("il_g1_2", 1000, "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "pro.monthly")], subscriber: "web-g1")
            #expect(S.status(try await S.post(http, S.event("evt_g1_p", "invoice.paid", at: "2026-04-11T10:00:01Z", recovered))) == "applied")
            #expect(try await S.active(http, api, "web-g1", at: "2026-04-10T00:00:00Z"))
            #expect(try await S.active(http, api, "web-g1", at: "2026-04-25T00:00:00Z"))
            // g2: the next attempt is far away: grace stops at the cap.
            var failed = S.invoice(
                "in_g2_2", "subscription_cycle", customer: "cus_g2", sub: "sub_g2", pi: "pi_g2_2", paidAt: "2026-04-01T10:00:00Z",
                lines: [S.line("il_g2_2", 1000, "2026-04-01T10:00:00Z", "2026-05-01T10:00:00Z", "pro.monthly")], subscriber: "web-g2")
            failed["status_transitions"] = ["paid_at": .null]
            failed["attempt_count"] = 1
            failed["next_payment_attempt"] = S.n("2026-05-20T10:00:00Z")
            #expect(S.status(try await S.post(http, S.event("evt_g2_f", "invoice.payment_failed", at: "2026-04-01T10:00:00Z", failed))) == "applied")
            #expect(try await S.active(http, api, "web-g2", at: "2026-04-25T00:00:00Z"))
            #expect(try await S.active(http, api, "web-g2", at: "2026-05-02T00:00:00Z") == false)
        }
    }

    @Test("an event of another Stripe account (Connect) is answered ignored and grants nothing")
    func otherAccount() async throws {
        try await APIHarness.run { http, api in
            try await S.catalog(http, api)
            let invoice = S.invoice(
                "in_o1", "subscription_create", customer: "cus_O", sub: "sub_O", pi: "pi_o1", paidAt: "2026-03-01T10:00:00Z",
                lines: [S.line("il_o1", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-o")
            let r = try await S.post(
                http, S.versioned("evt_o1", "invoice.paid", at: "2026-03-01T10:00:01Z", invoice, version: "2024-06-20", account: "acct_other"))
            #expect(r.status == .ok && S.status(r) == "ignored", "\(String(buffer: r.body))")
            #expect(try await S.windows(http, api, "web-o").isEmpty)
        }
        // Configured: that account's events apply, others' are ignored.
        try await APIHarness.run(stripe: StripeSettings(accounts: ["acct_mine"])) { http, api in
            try await S.catalog(http, api)
            let invoice = S.invoice(
                "in_o2", "subscription_create", customer: "cus_O", sub: "sub_O", pi: "pi_o2", paidAt: "2026-03-01T10:00:00Z",
                lines: [S.line("il_o2", 1000, "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "pro.monthly")], subscriber: "web-o")
            let other = try await S.post(
                http, S.versioned("evt_o2", "invoice.paid", at: "2026-03-01T10:00:01Z", invoice, version: "2024-06-20", account: "acct_other"))
            #expect(S.status(other) == "ignored")
            let mine = try await S.post(
                http, S.versioned("evt_o3", "invoice.paid", at: "2026-03-01T10:00:01Z", invoice, version: "2024-06-20", account: "acct_mine"))
            #expect(S.status(mine) == "applied", "\(String(buffer: mine.body))")
        }
    }
}
