import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import Testing

/// Identity (docs/identity.md): support transfers, merges, ownership as of a time, and what is refused.
@Suite("Identity: transfers, merges and who held a purchase when", .serialized)
struct IdentityAPITests {
    typealias Client = any TestClientProtocol

    static func post(_ http: Client, _ api: APIHarness, _ path: String, _ value: JSONValue, role: APIRole = .writer) async throws -> TestResponse {
        try await http.execute(uri: path, method: .post, headers: api.headers(role), body: body(value))
    }

    static func get(_ http: Client, _ api: APIHarness, _ path: String, role: APIRole = .admin) async throws -> JSONValue {
        let r = try await http.execute(uri: path, method: .get, headers: api.headers(role))
        #expect(r.status == .ok, "\(path): \(String(buffer: r.body))")
        return try r.json
    }

    /// A monthly purchase of `pro` under `purchase` (its `original_transaction_id`), renewed by `renewal`.
    static func purchase(
        _ subscriber: String, key: String, purchase: String, type: String = "purchase", from: String, to: String, offer: String = "none",
        price: Int64 = 999
    ) -> JSONValue {
        .object([
            "subscriber_id": .string(subscriber), "type": .string(type), "occurred_at": .string(from), "source": "apple",
            "environment": "production", "idempotency_key": .string(key),
            "data": [
                "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": .string(key),
                "original_transaction_id": .string(purchase), "kind": "auto_renewable", "offer": .string(offer),
                "period_start": .string(from), "period_end": .string(to), "period": "P1M", "price_minor": .number(JSONNumber(price)),
                "currency": "USD", "commission_rate": "0.30",
            ],
        ])
    }

    /// Whether `pro` is active.
    static func active(_ http: Client, _ api: APIHarness, _ s: String, at: String, asOf: Int64? = nil) async throws -> Bool {
        let query = "at=\(at)" + (asOf.map { "&as_of=\($0)" } ?? "")
        let e = try await get(http, api, "/v1/subscribers/\(s)/entitlements?\(query)")
        return e.objectValue?["entitlements"]?.arrayValue?.contains {
            $0.objectValue?["entitlement"] == "pro" && $0.objectValue?["active"] == .bool(true)
        }
            ?? false
    }

    static func purchases(_ http: Client, _ api: APIHarness, _ s: String, asOf: Int64? = nil) async throws -> [String] {
        let p = try await get(http, api, "/v1/subscribers/\(s)/purchases?at=2026-03-15T00:00:00Z" + (asOf.map { "&as_of=\($0)" } ?? ""))
        return p.objectValue?["purchases"]?.arrayValue?.compactMap { $0.objectValue?["purchase_id"]?.stringValue } ?? []
    }

    @Test("a support transfer: A's window is cut at the transfer, B holds the rest; as of before it A held it; later renewal and refund land on B")
    func transfer() async throws {
        try await APIHarness.run { http, api in
            let bought = try await Self.post(
                http, api, "/v1/events", Self.purchase("anon-a", key: "t1", purchase: "p1", from: "2026-03-01T00:00:00Z", to: "2026-04-01T00:00:00Z"))
            #expect(bought.status == .created, "\(String(buffer: bought.body))")
            let before = bought.headers[HTTPField.Name("Ledger-Position")!].flatMap { Int64($0) } ?? 0
            let moved = try await Self.post(
                http, api, "/v1/subscribers/anon-a/transfers",
                ["purchase_id": "p1", "to": "user-b", "occurred_at": "2026-03-10T00:00:00Z", "idempotency_key": "move-1"])
            #expect(moved.status == .created, "\(String(buffer: moved.body))")
            #expect(try moved.events.map { $0["type"] } == ["transfer_out", "transfer_in"])
            // The same request again: what was stored.
            let again = try await Self.post(
                http, api, "/v1/subscribers/anon-a/transfers",
                ["purchase_id": "p1", "to": "user-b", "occurred_at": "2026-03-10T00:00:00Z", "idempotency_key": "move-1"])
            #expect(again.status == .ok)
            #expect(try again.events.map { $0["event_id"] } == moved.events.map { $0["event_id"] })

            #expect(try await Self.active(http, api, "anon-a", at: "2026-03-05T00:00:00Z"))
            #expect(try await Self.active(http, api, "anon-a", at: "2026-03-15T00:00:00Z") == false)
            #expect(try await Self.active(http, api, "user-b", at: "2026-03-15T00:00:00Z"))
            #expect(try await Self.active(http, api, "user-b", at: "2026-03-05T00:00:00Z") == false)
            // As of before the transfer, A held it and B nothing.
            #expect(try await Self.active(http, api, "anon-a", at: "2026-03-15T00:00:00Z", asOf: before))
            #expect(try await Self.purchases(http, api, "anon-a", asOf: before) == ["p1"])
            #expect(try await Self.purchases(http, api, "anon-a").isEmpty)
            #expect(try await Self.purchases(http, api, "user-b") == ["p1"])
            let windowsA = try await Self.get(http, api, "/v1/subscribers/anon-a/windows")
            let cut = windowsA.objectValue?["windows"]?.arrayValue?.first?.objectValue
            #expect(cut?["end"] == "2026-03-10T00:00:00Z")
            #expect(cut?["cut_cause"] == "transfer")

            // The renewal goes to B and renews there; a refund of the first transaction cuts B's window of it.
            let renewed = try await Self.post(
                http, api, "/v1/events",
                Self.purchase("user-b", key: "t2", purchase: "p1", type: "renewal", from: "2026-04-01T00:00:00Z", to: "2026-05-01T00:00:00Z"))
            #expect(renewed.status == .created, "\(String(buffer: renewed.body))")
            let state = try await Self.get(http, api, "/v1/subscribers/user-b/entitlements?at=2026-03-20T00:00:00Z")
            #expect(state.objectValue?["entitlements"]?.arrayValue?.first?.objectValue?["expires_at"] == "2026-05-01T00:00:00Z")
            let refund: JSONValue = [
                "subscriber_id": "user-b", "type": "refund", "occurred_at": "2026-03-20T00:00:00Z", "source": "apple",
                "environment": "production", "idempotency_key": "r1",
                "data": ["transaction_id": "t1", "amount_minor": 999, "currency": "USD", "reason": "refund"],
            ]
            #expect(try await Self.post(http, api, "/v1/events", refund).status == .created)
            #expect(try await Self.active(http, api, "user-b", at: "2026-03-25T00:00:00Z") == false)
            #expect(try await Self.active(http, api, "user-b", at: "2026-04-15T00:00:00Z"))
        }
    }

    @Test("a merge moves every purchase and running credit; the merged subscriber refuses appends and says where it went")
    func merge() async throws {
        try await APIHarness.run { http, api in
            for e in [
                Self.purchase(
                    "anon-m", key: "m-trial", purchase: "pt", from: "2026-03-01T00:00:00Z", to: "2026-03-08T00:00:00Z", offer: "trial", price: 0),
                Self.purchase("anon-m", key: "m-paid", purchase: "pp", from: "2026-03-08T00:00:00Z", to: "2026-04-08T00:00:00Z"),
            ] {
                let r = try await Self.post(http, api, "/v1/events", e)
                #expect(r.status == .created, "\(String(buffer: r.body))")
            }
            let credit: JSONValue = [
                "subscriber_id": "anon-m", "type": "credit", "occurred_at": "2026-03-09T00:00:00Z", "source": "support",
                "environment": "production", "idempotency_key": "c1",
                "data": [
                    "entitlement": "bonus", "window_start": "2026-03-09T00:00:00Z", "window_end": "2026-06-01T00:00:00Z", "reason": "goodwill",
                    "granted_by": "agent-7",
                ],
            ]
            #expect(try await Self.post(http, api, "/v1/events", credit).status == .created)
            let merged = try await Self.post(
                http, api, "/v1/subscribers/anon-m/merge", ["into": "known-m", "idempotency_key": "merge-1", "occurred_at": "2026-03-10T00:00:00Z"])
            #expect(merged.status == .created, "\(String(buffer: merged.body))")
            #expect(try merged.events.filter { $0["type"] == "transfer_in" }.count == 3, "two purchases and the credit")
            #expect(try merged.events.last?["type"] == "merged")
            #expect(try await Self.active(http, api, "known-m", at: "2026-03-20T00:00:00Z"))
            let known = try await Self.get(http, api, "/v1/subscribers/known-m/entitlements?at=2026-05-01T00:00:00Z")
            #expect(
                known.objectValue?["entitlements"]?.arrayValue?.contains {
                    $0.objectValue?["entitlement"] == "bonus" && $0.objectValue?["active"] == true
                } == true)
            #expect(try await Self.active(http, api, "anon-m", at: "2026-03-20T00:00:00Z") == false)
            let anon = try await Self.get(http, api, "/v1/subscribers/anon-m/entitlements")
            #expect(anon.objectValue?["merged_into"] == "known-m")

            // Appends naming the merged subscriber: 409 naming where it went; nothing stored.
            let late = try await Self.post(
                http, api, "/v1/events",
                Self.purchase("anon-m", key: "m-late", purchase: "px", from: "2026-03-11T00:00:00Z", to: "2026-04-11T00:00:00Z"))
            #expect(late.status == .conflict)
            #expect(late.errorCode == "subscriber_merged")
            #expect(try late.json.objectValue?["error"]?.objectValue?["merged_into"] == "known-m")
            // A renewal of the moved purchase lands on B; a refund of it cuts B and not twice.
            #expect(
                try await Self.post(
                    http, api, "/v1/events",
                    Self.purchase(
                        "known-m", key: "m-renew", purchase: "pp", type: "renewal", from: "2026-04-08T00:00:00Z", to: "2026-05-08T00:00:00Z")
                ).status == .created)
            #expect(try await Self.active(http, api, "known-m", at: "2026-04-20T00:00:00Z"))
            // A full refund of the moved paid transaction: it cuts B's window of it and takes the money back once.
            let refund: JSONValue = [
                "subscriber_id": "known-m", "type": "refund", "occurred_at": "2026-03-20T00:00:00Z", "source": "apple",
                "environment": "production", "idempotency_key": "m-refund",
                "data": ["transaction_id": "m-paid", "amount_minor": 999, "currency": "USD", "reason": "refund"],
            ]
            #expect(try await Self.post(http, api, "/v1/events", refund).status == .created)
            #expect(try await Self.active(http, api, "known-m", at: "2026-03-25T00:00:00Z") == false)
            let revenue = try await Self.get(http, api, "/v1/reports/revenue?from=2026-03-01&to=2026-06-01&interval=month")
            let rows = revenue.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue) ?? []
            #expect(rows.compactMap { $0["refunds"]?.numberValue?.int64Value }.reduce(0, +) == 999, "refunded once")
            #expect(rows.compactMap { $0["billings"]?.numberValue?.int64Value }.reduce(0, +) == 1998, "the paid purchase and its renewal")
            #expect(rows.last?["deferred_end"] == 0)
            // The same merge again answers what was stored.
            let again = try await Self.post(
                http, api, "/v1/subscribers/anon-m/merge", ["into": "known-m", "idempotency_key": "merge-1", "occurred_at": "2026-03-10T00:00:00Z"])
            #expect(again.status == .ok, "\(String(buffer: again.body))")
        }
    }

    @Test("bad input: not held (404), to itself (422), to a merged subscriber (409), merge into itself or a cycle (422); nothing half-stored")
    func refusals() async throws {
        try await APIHarness.run { http, api in
            #expect(
                try await Self.post(
                    http, api, "/v1/events", Self.purchase("a", key: "x1", purchase: "px", from: "2026-03-01T00:00:00Z", to: "2026-04-01T00:00:00Z")
                ).status == .created)
            let notHeld = try await Self.post(http, api, "/v1/subscribers/b/transfers", ["purchase_id": "px", "to": "c"])
            #expect(notHeld.status == .notFound)
            let toSelf = try await Self.post(http, api, "/v1/subscribers/a/transfers", ["purchase_id": "px", "to": "a"])
            #expect(toSelf.status == .unprocessableContent)
            #expect(try await Self.post(http, api, "/v1/subscribers/m/merge", ["into": "n", "idempotency_key": "mm"]).status == .created)
            let toMerged = try await Self.post(http, api, "/v1/subscribers/a/transfers", ["purchase_id": "px", "to": "m"])
            #expect(toMerged.status == .conflict)
            #expect(toMerged.errorCode == "subscriber_merged")
            let selfMerge = try await Self.post(http, api, "/v1/subscribers/a/merge", ["into": "a", "idempotency_key": "s"])
            #expect(selfMerge.status == .unprocessableContent)
            let cycle = try await Self.post(http, api, "/v1/subscribers/n/merge", ["into": "m", "idempotency_key": "cy"])
            #expect(cycle.status == .unprocessableContent, "\(String(buffer: cycle.body))")
            let badReason = try await Self.post(http, api, "/v1/subscribers/a/transfers", ["purchase_id": "px", "to": "z", "reason": "merge"])
            #expect(badReason.status == .unprocessableContent)
            #expect(badReason.errorField == "reason")
            #expect(try await Self.purchases(http, api, "a") == ["px"], "nothing moved")
            #expect(try await Self.active(http, api, "a", at: "2026-03-15T00:00:00Z"))
            // Policies: admin only; an unknown one is refused naming the field.
            let put = try await http.execute(
                uri: "/v1/subscribers/a/transfer-policy", method: .put, headers: api.headers(.admin), body: body(["policy": "keep"]))
            #expect(put.status == .ok)
            #expect(try await Self.get(http, api, "/v1/subscribers/a/transfer-policy").objectValue?["policy"] == "keep")
            let wrong = try await http.execute(
                uri: "/v1/subscribers/a/transfer-policy", method: .put, headers: api.headers(.admin), body: body(["policy": "never"]))
            #expect(wrong.status == .unprocessableContent)
            #expect(wrong.errorField == "policy")
            let writer = try await http.execute(
                uri: "/v1/subscribers/a/transfer-policy", method: .put, headers: api.headers(.writer), body: body(["policy": "keep"]))
            #expect(writer.status == .forbidden)
        }
    }

    @Test("two transfers of one purchase to different subscribers at once: one owner, one consistent history")
    func concurrentTransfers() async throws {
        try await APIHarness.run { http, api in
            #expect(
                try await Self.post(
                    http, api, "/v1/events", Self.purchase("src", key: "c1", purchase: "pc", from: "2026-03-01T00:00:00Z", to: "2026-04-01T00:00:00Z")
                ).status == .created)
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for target in ["dst-1", "dst-2"] {
                    group.addTask {
                        try await Self.post(
                            http, api, "/v1/subscribers/src/transfers",
                            ["purchase_id": "pc", "to": .string(target), "occurred_at": "2026-03-10T00:00:00Z"]
                        ).status
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == .created }.count == 1, "\(statuses)")
            #expect(statuses.filter { $0 == .notFound }.count == 1, "\(statuses)")
            let owners = try await [Self.purchases(http, api, "dst-1"), Self.purchases(http, api, "dst-2"), Self.purchases(http, api, "src")]
            #expect(owners.map(\.count).reduce(0, +) == 1)
            let held = try await [
                Self.active(http, api, "dst-1", at: "2026-03-15T00:00:00Z"), Self.active(http, api, "dst-2", at: "2026-03-15T00:00:00Z"),
                Self.active(http, api, "src", at: "2026-03-15T00:00:00Z"),
            ]
            #expect(held.filter { $0 }.count == 1)
        }
    }

    @Test("a restore is counted apart: transferred out and in, never churn plus a new subscriber; revenue and MRR count the purchase once")
    func reportsCountTransfersApart() async throws {
        try await APIHarness.run { http, api in
            for e in [
                Self.purchase("old-r", key: "r-1", purchase: "pr", from: "2026-02-15T00:00:00Z", to: "2026-03-15T00:00:00Z", price: 3000),
                Self.purchase("plain", key: "r-2", purchase: "pq", from: "2026-02-15T00:00:00Z", to: "2026-03-15T00:00:00Z", price: 3000),
            ] {
                #expect(try await Self.post(http, api, "/v1/events", e).status == .created)
            }
            let moved = try await Self.post(
                http, api, "/v1/subscribers/old-r/transfers",
                ["purchase_id": "pr", "to": "new-r", "occurred_at": "2026-03-10T00:00:00Z", "reason": "restore"])
            #expect(moved.status == .created, "\(String(buffer: moved.body))")
            // The renewal and then a full refund of it land on the new owner.
            #expect(
                try await Self.post(
                    http, api, "/v1/events",
                    Self.purchase(
                        "new-r", key: "r-3", purchase: "pr", type: "renewal", from: "2026-03-15T00:00:00Z", to: "2026-04-15T00:00:00Z", price: 3000)
                ).status == .created)
            #expect(
                try await Self.post(
                    http, api, "/v1/events",
                    Self.purchase(
                        "plain", key: "r-4", purchase: "pq", type: "renewal", from: "2026-03-15T00:00:00Z", to: "2026-04-15T00:00:00Z", price: 3000)
                ).status == .created)
            let churn = try await Self.get(http, api, "/v1/reports/churn?from=2026-02-01&to=2026-05-01&interval=month")
            let periods = churn.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue) ?? []
            try #require(periods.count == 3)
            #expect(periods.map { $0["new"] } == [2, 0, 0])
            #expect(periods.map { $0["churned"] } == [0, 0, 2])
            #expect(periods.map { $0["transferred_out"] } == [0, 1, 0])
            #expect(periods.map { $0["transferred_in"] } == [0, 1, 0])
            #expect(periods.map { $0["active_end"] } == [2, 2, 0])
            // Revenue: the two purchases are alike, one moved: every figure is twice one purchase's, exactly.
            let revenue = try await Self.get(http, api, "/v1/reports/revenue?from=2026-02-01&to=2026-05-01&interval=month")
            let rows = revenue.objectValue?["periods"]?.arrayValue?.compactMap(\.objectValue) ?? []
            #expect(rows.map { $0["billings"] } == [6000, 6000, 0])
            #expect(rows.map { $0["deferred_end"] }.last == 0)
            let recognized = rows.compactMap { $0["recognized"]?.numberValue?.int64Value }
            #expect(recognized.reduce(0, +) == 12000)
            #expect(recognized.allSatisfy { $0 % 2 == 0 }, "\(recognized): each period is twice one purchase's")
            // MRR counts the moved purchase once, under its new owner.
            let mrr = try await Self.get(http, api, "/v1/reports/mrr?at=2026-03-12T00:00:00Z")
            let usd = mrr.objectValue?["currencies"]?.arrayValue?.first?.objectValue
            #expect(usd?["mrr_minor"] == 6000)
            #expect(usd?["active_paid"] == 2)
        }
    }
}
