import Foundation
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import StripeStore
import Testing

@testable import subledger

/// `subledger stripe backfill` through its command's code, against the Stripe stand-in's list APIs (objects
/// built from Stripe's fixtures3.json) and the real application on PostgreSQL for the webhooks and reads.
@Suite("subledger stripe backfill", .serialized)
struct StripeBackfillTests {
    typealias S = StripeHelpers
    static let key = "sk_test_backfill"

    static func sub(_ id: String, _ subscriber: String, status: String, created: String, _ extra: [String: JSONValue] = [:]) -> [String: JSONValue] {
        var o = S.subscription("sub_\(id)", customer: "cus_\(id)", subscriber: subscriber, status: status, ["cancel_at": .null])
        o["created"] = S.n(created)
        o["livemode"] = true
        for (k, v) in extra { o[k] = v }
        return o
    }

    static func invoice(_ x: String, _ reason: String, paid: String, to: String, subscriber: String?) -> [String: JSONValue] {
        var o = S.invoice(
            "in_\(x)", reason, customer: "cus_\(x.prefix(2))", sub: "sub_\(x.prefix(2))", pi: "pi_\(x)", paidAt: paid,
            lines: [S.line("il_\(x)", 1000, paid, to, "pro.monthly")], subscriber: subscriber)
        o["status"] = "paid"
        o["charge"] = .string("ch_\(x)")
        o["created"] = S.n(paid)
        o["livemode"] = true
        return o
    }

    /// Four subscribers' history: a renewal with auto-renew turned off and a partial refund (B1), a
    /// subscription canceled at once (B2), a payment disputed (B3), a trial (B4); and a voided invoice.
    static func history(_ standIn: StripeAPIStandIn) {
        standIn.setList(
            "subscriptions",
            [
                sub(
                    "B1", "web-b1", status: "active", created: "2026-03-01T10:00:00Z",
                    [
                        "current_period_start": S.n("2026-04-01T10:00:00Z"), "current_period_end": S.n("2026-05-01T10:00:00Z"),
                        "cancel_at_period_end": true, "canceled_at": S.n("2026-04-10T12:00:00Z"),
                    ]),
                sub(
                    "B2", "web-b2", status: "canceled", created: "2026-03-05T10:00:00Z",
                    [
                        "current_period_start": S.n("2026-03-05T10:00:00Z"), "current_period_end": S.n("2026-04-05T10:00:00Z"),
                        "canceled_at": S.n("2026-03-20T10:00:00Z"), "ended_at": S.n("2026-03-20T10:00:00Z"),
                        "cancellation_details": ["comment": .null, "feedback": .null, "reason": "cancellation_requested"],
                    ]),
                sub("B3", "web-b3", status: "active", created: "2026-03-10T10:00:00Z"),
                sub("B5", "web-b5", status: "active", created: "2026-03-12T10:00:00Z"),
                // Named only by its customer's metadata.
                sub("B6", "web-b6", status: "active", created: "2026-02-20T10:00:00Z", ["metadata": [:]]),
                sub(
                    "B4", "web-b4", status: "trialing", created: "2026-03-01T09:00:00Z",
                    ["trial_start": S.n("2026-03-01T09:00:00Z"), "trial_end": S.n("2026-03-15T09:00:00Z")]),
            ])
        var void = invoice("V1", "subscription_cycle", paid: "2026-03-02T10:00:00Z", to: "2026-04-02T10:00:00Z", subscriber: "web-b1")
        void["status"] = "void"
        standIn.setList(
            "invoices",
            [
                invoice("B1a", "subscription_create", paid: "2026-03-01T10:00:00Z", to: "2026-04-01T10:00:00Z", subscriber: "web-b1"),
                invoice("B1b", "subscription_cycle", paid: "2026-04-01T10:00:00Z", to: "2026-05-01T10:00:00Z", subscriber: "web-b1"),
                invoice("B2a", "subscription_create", paid: "2026-03-05T10:00:00Z", to: "2026-04-05T10:00:00Z", subscriber: "web-b2"),
                invoice("B3a", "subscription_create", paid: "2026-03-10T10:00:00Z", to: "2026-04-10T10:00:00Z", subscriber: "web-b3"),
                invoice("B5a", "subscription_create", paid: "2026-03-12T10:00:00Z", to: "2026-04-12T10:00:00Z", subscriber: "web-b5"),
                invoice("B6a", "subscription_create", paid: "2026-02-20T10:00:00Z", to: "2026-03-20T10:00:00Z", subscriber: nil),
                void,
            ])
        standIn.setList(
            "customers",
            [
                S.object(
                    "customer", ["id": "cus_B6", "metadata": ["subscriber_id": "web-b6"], "created": S.n("2026-02-20T09:00:00Z"), "livemode": true])
            ])
        standIn.setList(
            "charges",
            [("B1b", "2026-04-01T10:00:00Z", false), ("B3a", "2026-03-10T10:00:00Z", false), ("B5a", "2026-03-12T10:00:00Z", true)].map {
                x, at, refunded in
                S.object(
                    "charge",
                    [
                        "id": .string("ch_\(x)"), "payment_intent": .string("pi_\(x)"), "created": S.n(at), "refunded": .bool(refunded),
                        "livemode": true,
                    ])
            })
        var full = refund
        for (k, v): (String, JSONValue) in [
            ("id", "re_B5"), ("amount", 1000), ("charge", "ch_B5a"), ("payment_intent", "pi_B5a"), ("created", S.n("2026-03-18T10:00:00Z")),
        ] {
            full[k] = v
        }
        standIn.setList("refunds", [refund, full])
        standIn.setList(
            "disputes",
            [
                S.object(
                    "dispute",
                    [
                        "id": "dp_B3", "amount": 1000, "currency": "usd", "charge": "ch_B3a", "payment_intent": "pi_B3a",
                        "created": S.n("2026-03-15T10:00:00Z"), "status": "needs_response", "livemode": true,
                    ])
            ])
    }

    static let refund = S.object(
        "refund",
        [
            "id": "re_B1", "amount": 300, "currency": "usd", "charge": "ch_B1b", "payment_intent": "pi_B1b", "created": S.n("2026-04-05T10:00:00Z"),
            "status": "succeeded",
        ])

    /// What each subscriber is entitled to at times around its history.
    static let expected: [(String, String, Bool)] = [
        ("web-b1", "2026-03-15T00:00:00Z", true), ("web-b1", "2026-04-15T00:00:00Z", true), ("web-b1", "2026-05-02T00:00:00Z", false),
        ("web-b2", "2026-03-10T00:00:00Z", true), ("web-b2", "2026-03-25T00:00:00Z", false),
        ("web-b3", "2026-03-12T00:00:00Z", true), ("web-b3", "2026-03-20T00:00:00Z", false),
        ("web-b4", "2026-03-10T00:00:00Z", true), ("web-b4", "2026-03-20T00:00:00Z", false),
        ("web-b5", "2026-03-17T00:00:00Z", true), ("web-b5", "2026-03-19T00:00:00Z", false),
        ("web-b6", "2026-03-01T00:00:00Z", true), ("web-b6", "2026-03-25T00:00:00Z", false),
    ]

    /// The command as a user types it, against the stand-in and the test database.
    static func backfill(_ api: APIHarness, _ base: String, _ extra: [String] = [], key: String = key) async throws -> StripeBackfill.Summary {
        let u = api.url!
        let url = "postgres://\(u.username):\(u.password ?? "")@\(u.host):\(u.port)/\(u.database)"
        let command = try StripeBackfillCommand.parse(
            ["--database-url", url, "--stripe-api-key", key, "--stripe-api-base-url", base, "--log-level", "error"] + extra)
        return try await command.execute()
    }

    static func events(_ api: APIHarness, _ subscriber: String? = nil) async throws -> [String] {
        try await TestDatabase.run(api.url!.clientConfiguration(maximumConnections: 1)) { c in
            try await c.query(
                "SELECT type || ' ' || idempotency_key FROM events WHERE subscriber_id = coalesce(\(subscriber), subscriber_id) ORDER BY position",
                logger: TestDatabase.logger
            ).collect().map { try $0.decode(String.self) }
        }
    }

    static func entitlements(_ http: any TestClientProtocol, _ api: APIHarness, of who: String) async throws -> [String] {
        var out: [String] = []
        for (subscriber, at, _) in expected where subscriber == who {
            let answer = try await S.entitlement(http, api, subscriber, "pro", at: at).map { JSONValue.object($0) } ?? .null
            out.append("\(subscriber) \(at) " + String(decoding: answer.canonicalBytes(), as: UTF8.self))
        }
        return out
    }

    /// The stand-in with the history, the application on a fresh database with the catalog; the stand-in is returned.
    @discardableResult
    static func world(
        pageSize: Int = 100, throttled: [String: Int] = [:],
        _ body: @escaping @Sendable (StripeAPIStandIn, String, any TestClientProtocol, APIHarness) async throws -> Void
    ) async throws -> StripeAPIStandIn {
        let standIn = StripeAPIStandIn(key: Self.key)
        Self.history(standIn)
        standIn.lists.withLock {
            $0.pageSize = pageSize
            $0.throttled = throttled
        }
        try await standIn.serve { base in
            try await APIHarness.run { http, api in
                try await S.catalog(http, api)
                try await body(standIn, base, http, api)
            }
        }
        return standIn
    }

    @Test("pages through every list (limit=100, starting_after, status=all), retries a 429, applies each history once; a second run adds nothing")
    func backfillTwice() async throws {
        let standIn = try await Self.world(pageSize: 2, throttled: ["invoices": 1]) { _, base, http, api in
            let first = try await Self.backfill(api, base)
            #expect(first.read == 20 && first.refused == 0 && first.unmapped == 0 && first.pending == 0, "\(first)")
            // Applied: B1's auto-renew off, B2's end, B4's trial, six paid invoices, two refunds, B5's full refund, the
            // dispute; ignored: a customer's and five subscriptions' links and six invoice payments (no events of their own).
            #expect(first.applied == 13 && first.ignored == 12, "\(first)")
            for (subscriber, at, active) in Self.expected {
                #expect(try await S.active(http, api, subscriber, at: at) == active, "\(subscriber) at \(at)")
            }
            // Auto-renew off (B1), the partial refund's money (B1), the dispute's cut (B3), the cancellation (B2).
            let all = try await Self.events(api)
            for key in [
                "auto_renew_changed stripe:auto_renew_off:sub_B1:", "refund stripe:refund:re_B1", "refund stripe:dispute:dp_B3",
                "cancellation stripe:subscription_canceled:sub_B2", "expiration stripe:subscription_deleted:sub_B2",
                "purchase stripe:trial:sub_B4",
                "renewal stripe:invoice:in_B1b:il_B1b", "refund stripe:charge_refunded:ch_B5a",
            ] {
                #expect(all.contains { $0.hasPrefix(key) }, "\(key) in \(all)")
            }
            #expect(Set(all).count == all.count)
            let again = try await Self.backfill(api, base)
            #expect(again.read == 20 && again.applied == 0 && again.pending == 0 && again.duplicate == first.applied + first.ignored, "\(again)")
            #expect(try await Self.events(api) == all)
        }
        let requests = standIn.lists.withLock { $0.requests }
        #expect(requests.allSatisfy { $0.query["limit"] == "100" })
        let subscriptions = requests.filter { $0.collection == "subscriptions" }
        #expect(subscriptions.allSatisfy { $0.query["status"] == "all" })
        // 6 invoices, 2 a page: 3 pages, and the throttled request before them; each page after the last id of the one before.
        let invoices = requests.filter { $0.collection == "invoices" }.prefix(4).map { $0.query["starting_after"] ?? "-" }
        #expect(invoices == ["-", "-", "in_B5a", "in_B2a"], "\(invoices)")
    }

    @Test("webhooks then a backfill of the same history: no event twice, the same entitlements; a webhook after the backfill adds nothing")
    func webhooksThenBackfill() async throws {
        try await Self.world { standIn, base, http, api in
            let objects = standIn.lists.withLock { $0.objects }
            func invoice(_ id: String) -> [String: JSONValue] { objects["invoices"]!.first { $0["id"] == .string(id) }! }
            let b1 = objects["subscriptions"]!.first { $0["id"] == "sub_B1" }!
            let hooks: [(String, String, String, [String: JSONValue], [String: JSONValue]?)] = [
                ("evt_1", "invoice.paid", "2026-03-01T10:00:01Z", invoice("in_B1a"), nil),
                ("evt_2", "invoice.paid", "2026-04-01T10:00:01Z", invoice("in_B1b"), nil),
                ("evt_3", "customer.subscription.updated", "2026-04-10T12:00:01Z", b1, ["cancel_at_period_end": false]),
                ("evt_4", "refund.created", "2026-04-05T10:00:01Z", Self.refund, nil),
            ]
            for (id, type, at, object, previous) in hooks {
                let r = try await S.post(http, S.event(id, type, at: at, object, previous: previous))
                #expect(S.status(r) == "applied", "\(id): \(String(buffer: r.body))")
            }
            let webhooks = try await Self.events(api, "web-b1")
            let seen = try await Self.entitlements(http, api, of: "web-b1")
            let summary = try await Self.backfill(api, base)
            #expect(summary.refused == 0 && summary.pending == 0, "\(summary)")
            #expect(try await Self.events(api, "web-b1") == webhooks)
            // B1's answers are the webhooks' alone; the others' come from the backfill.
            let after = try await Self.entitlements(http, api, of: "web-b1")
            #expect(after == seen)
            for (subscriber, at, active) in Self.expected {
                #expect(try await S.active(http, api, subscriber, at: at) == active, "\(subscriber) at \(at)")
            }
            let b3 = try await Self.events(api, "web-b3")
            let late = try await S.post(http, S.event("evt_5", "invoice.paid", at: "2026-03-10T10:00:01Z", invoice("in_B3a")))
            #expect(S.status(late) == "applied", "\(String(buffer: late.body))")
            #expect(try await Self.events(api, "web-b3") == b3)
        }
    }

    @Test("--since reads only objects created from then (created[gte]); a key Stripe refuses stops the backfill")
    func since() async throws {
        let standIn = try await Self.world { _, base, http, api in
            await #expect(throws: (any Error).self) { try await Self.backfill(api, base, key: "sk_test_wrong") }
            #expect(try await Self.events(api).isEmpty)
            let summary = try await Self.backfill(api, base, ["--since", "2026-03-08"])
            // B3's and B5's subscriptions; the invoices B1b, B3a and B5a; their three charges; two refunds; the dispute.
            #expect(summary.read == 11 && summary.refused == 0, "\(summary)")
            #expect(try await S.active(http, api, "web-b1", at: "2026-04-15T00:00:00Z"))
            #expect(try await S.active(http, api, "web-b1", at: "2026-03-15T00:00:00Z") == false)
            #expect(try await S.active(http, api, "web-b3", at: "2026-03-20T00:00:00Z") == false)
            #expect(try await S.active(http, api, "web-b2", at: "2026-03-10T00:00:00Z") == false)
        }
        let since = String(S.s("2026-03-08T00:00:00Z"))
        let requests = standIn.lists.withLock { $0.requests }.filter { $0.query["limit"] != nil }
        let bounds: [String?] = requests.map { $0.query["created[gte]"] }
        #expect(bounds.allSatisfy { $0 == since || $0 == nil })
        #expect(requests.filter { $0.query["created[gte]"] == since }.count == 6)
    }

    @Test("an object the mapper cannot read is listed as unmapped and left out; one the catalog refuses waits, and applies once the product exists")
    func unmappedAndRefused() async throws {
        try await Self.world { standIn, base, http, api in
            var broken = Self.refund
            broken["id"] = "re_broken"
            broken["currency"] = .null
            standIn.setList("refunds", standIn.lists.withLock { $0.objects["refunds"]! } + [broken])
            var gold = Self.invoice("G1a", "subscription_create", paid: "2026-03-03T10:00:00Z", to: "2026-04-03T10:00:00Z", subscriber: "web-g1")
            gold["lines"] = ["object": "list", "data": [S.line("il_G1a", 3000, "2026-03-03T10:00:00Z", "2026-04-03T10:00:00Z", "gold.monthly")]]
            standIn.setList("invoices", standIn.lists.withLock { $0.objects["invoices"]! } + [gold])
            let first = try await Self.backfill(api, base)
            #expect(first.unmapped == 1 && first.refused == 1, "\(first)")
            #expect(first.problems.contains { $0.hasPrefix("re_broken: data.object.currency") }, "\(first.problems)")
            #expect(first.problems.contains { $0.hasPrefix("in_G1a:") && $0.contains("gold.monthly") }, "\(first.problems)")
            // What could be stored was: the other subscribers' history.
            for (subscriber, at, active) in Self.expected {
                #expect(try await S.active(http, api, subscriber, at: at) == active, "\(subscriber) at \(at)")
            }
            let gold1: JSONValue = [
                "entitlements": ["pro", "gold"], "kind": "auto_renewable", "period": "P1M", "price_minor": 3000, "currency": "USD",
            ]
            let put = try await http.execute(
                uri: "/v1/catalog/products/gold.monthly", method: .put, headers: api.headers(.admin), body: LedgerServerTests.body(gold1))
            #expect(put.status == .created || put.status == .ok)
            let again = try await Self.backfill(api, base)
            #expect(again.refused == 0 && again.unmapped == 1 && again.applied == 1, "\(again)")
            #expect(try await S.active(http, api, "web-g1", "gold", at: "2026-03-15T00:00:00Z"))
        }
    }
}
