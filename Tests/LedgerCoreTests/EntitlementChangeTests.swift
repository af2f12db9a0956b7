import Foundation
import LedgerCore
import Testing

private typealias S = StreamBuilder

/// The `changes` of a webhook payload: the fold before an event against the fold with it, at its occurred_at.
@Suite("Webhook payload: what an event changed")
struct EntitlementChangeTests {
    /// The changes of the last event added to `s`.
    fileprivate static func changes(_ s: S) -> [String: [String]] {
        let last = s.events.last!
        let before = Fold.fold(Array(s.events.dropLast()))
        let after = Fold.fold(s.events)
        let list = EntitlementChange.between(before, after, at: last.occurredAt)
        return Dictionary(uniqueKeysWithValues: list.map { ($0.entitlement, $0.kinds.map(\.rawValue)) })
    }

    @Test("a first purchase grants, with renewal on; a trial says so")
    func purchase() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        #expect(Self.changes(s) == ["pro": ["granted", "renewal_enabled"]])
        var t = S()
        t.subscription("t1", from: "2026-01-01", to: "2026-01-08", offer: "trial")
        #expect(Self.changes(t) == ["pro": ["granted", "renewal_enabled", "trial_started"]])
    }

    @Test("a renewal at the period boundary extends, it does not grant anew; after a trial it converts")
    func renewal() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-01-08", offer: "trial")
        s.subscription(type: .renewal, "t2", from: "2026-01-08", to: "2026-02-08")
        #expect(Self.changes(s) == ["pro": ["extended"]])
        var early = S()
        early.subscription("t1", from: "2026-01-01", to: "2026-02-01", offer: "trial")
        early.subscription(type: .renewal, "t2", from: "2026-02-01", to: "2026-03-01", occurred: "2026-01-20")
        #expect(Self.changes(early) == ["pro": ["extended"]])
        // Auto-renew turned back on at the boundary, after being off: that is a change.
        var back = S()
        back.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        back.add(.autoRenewChanged, "2026-01-10", ["enabled": false, "product_id": "pro.monthly", "entitlements": ["pro"]])
        back.subscription("t2", from: "2026-02-01", to: "2026-03-01")
        #expect(Self.changes(back) == ["pro": ["extended", "renewal_enabled"]])
    }

    @Test("a refund revokes; turning renewal off disables renewal only")
    func refundAndAutoRenew() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        s.add(.autoRenewChanged, "2026-01-10", ["enabled": false, "product_id": "pro.monthly", "entitlements": ["pro"]])
        #expect(Self.changes(s) == ["pro": ["renewal_disabled"]])
        s.refund("t1", at: "2026-01-15")
        #expect(Self.changes(s) == ["pro": ["revoked"]])
    }

    @Test("a credit while active extends; a purchase that starts later changes only the windows")
    func creditAndFuture() {
        var s = S()
        s.pack("p1", at: "2026-01-01", duration: "P1M")
        s.add(.credit, "2026-01-10", ["entitlement": "pro", "duration": "P7D", "reason": "r", "granted_by": "g"])
        #expect(Self.changes(s) == ["pro": ["extended"]])
        var f = S()
        f.subscription("t1", from: "2026-05-01", to: "2026-06-01", occurred: "2026-01-01")
        // Not active yet at its occurred_at: it will renew only once its period starts.
        #expect(Self.changes(f) == ["pro": ["windows_changed"]])
        var g = S()
        g.pack("p1", at: "2026-01-01", duration: "P1M")
        g.refund("p1", at: "2026-03-01")
        #expect(Self.changes(g) == ["pro": ["windows_changed"]])
    }

    @Test("a billing issue starts grace; a cancellation revokes every entitlement it names")
    func graceAndCancellation() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-02-01", entitlements: ["pro", "basic"])
        s.add(.billingIssue, "2026-02-01", ["product_id": "pro.monthly", "entitlements": ["pro"], "grace_until": "2026-02-15T00:00:00Z"])
        #expect(Self.changes(s) == ["pro": ["extended", "grace_started"]])
        s.add(.cancellation, "2026-02-05", ["reason": "other"])
        #expect(Self.changes(s)["pro"] == ["revoked", "renewal_disabled"])
    }

    @Test("filters: by type without folding, by entitlement named or changed")
    func filters() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-02-01", entitlements: ["pro"])
        s.refund("t1", at: "2026-01-15")
        let refund = s.events.last!
        let changes = EntitlementChange.between(Fold.fold(Array(s.events.dropLast())), Fold.fold(s.events), at: refund.occurredAt)
        #expect(WebhookFilter().matches(refund, changes: changes))
        #expect(WebhookFilter(eventTypes: [.refund]).matches(refund, changes: changes))
        #expect(!WebhookFilter(eventTypes: [.purchase]).wantsType(refund))
        #expect(WebhookFilter(entitlements: ["pro"]).matches(refund, changes: changes))
        #expect(!WebhookFilter(entitlements: ["basic"]).matches(refund, changes: changes))
        #expect(WebhookFilter(entitlements: ["pro"]).matches(s.events[0], changes: []))
    }

    @Test("the payload: Standard Webhooks shape, entitlements at occurred_at, same bytes every time")
    func payload() throws {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        let endpoint = UUID()
        let event = s.events[0]
        let a = WebhookMessage(endpointID: endpoint, event: event, before: .empty, after: Fold.fold(s.events))
        let b = WebhookMessage(endpointID: endpoint, event: event, before: .empty, after: Fold.fold(s.events))
        #expect(a.body == b.body && a.id == b.id)
        let json = try JSONParser.parse(a.body).objectValue!
        #expect(json["type"] == "ledger.purchase")
        #expect(json["timestamp"]?.stringValue == event.recordedAt.rfc3339)
        let data = json["data"]!.objectValue!
        #expect(data["event"] == event.json)
        #expect(data["entitlements_at"] == "2026-01-01T00:00:00Z")
        let ents = data["entitlements"]!.arrayValue!
        #expect(ents.count == 1 && ents[0].objectValue!["active"] == true)
        let change = data["changes"]!.arrayValue![0].objectValue!
        #expect(change["entitlement"] == "pro" && change["before"] == .null)
        #expect(change["changes"] == ["granted", "renewal_enabled"])
    }
}
