import Foundation
import LedgerCore
import Testing

private typealias S = StreamBuilder

@Suite("The window fold: one scenario per rule")
struct FoldScenarioTests {
    @Test("a monthly auto-renewing chain that starts with a trial")
    func trialThenMonthly() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-01-08", offer: "trial")
        s.subscription(type: .renewal, "t2", from: "2026-01-08", to: "2026-02-08")
        s.subscription(type: .renewal, "t3", from: "2026-02-08", to: "2026-03-08")
        #expect(s.ledger.windows.map(\.kind) == [.trial, .paid, .paid])
        let inTrial = s.state(at: "2026-01-03")!
        #expect(inTrial.active && inTrial.inTrial && inTrial.willRenew)
        #expect(inTrial.expiresAt == S.t("2026-03-08"))  // touching windows form one run
        let paid = s.state(at: "2026-02-10")!
        #expect(paid.active && !paid.inTrial && !paid.inGrace)
        #expect(paid.productID == "pro.monthly")
        let after = s.state(at: "2026-03-09")!
        #expect(!after.active)
        #expect(after.expiresAt == S.t("2026-03-08"))
    }

    @Test("a 3-month pack bought while 20 days remain on an earlier pack starts where the first ends")
    func packsStack() {
        var s = S()
        s.pack("p1", at: "2026-01-01", duration: "P3M")
        s.pack("p2", at: "2026-03-12", duration: "P3M")
        let w = s.ledger.windows
        #expect(w.map(\.start) == [S.t("2026-01-01"), S.t("2026-04-01")])
        #expect(w.map(\.end) == [S.t("2026-04-01"), S.t("2026-07-01")])
        #expect(s.state(at: "2026-03-20")!.expiresAt == S.t("2026-07-01"))
        #expect(s.state(at: "2026-03-20")!.willRenew == false)
    }

    @Test("P1M from 31 January ends on the last day of February")
    func calendarMonth() {
        var s = S()
        s.pack("p1", at: "2026-01-31T12:00:00Z", duration: "P1M")
        #expect(s.ledger.windows[0].end == S.t("2026-02-28T12:00:00Z"))
        var leap = S()
        leap.pack("p1", at: "2028-01-31T12:00:00Z", duration: "P1M")
        #expect(leap.ledger.windows[0].end == S.t("2028-02-29T12:00:00Z"))
    }

    @Test("refund of the third of six renewals cuts only that window; later windows never move")
    func refundMidChain() {
        var s = S()
        let months = ["2026-01-01", "2026-02-01", "2026-03-01", "2026-04-01", "2026-05-01", "2026-06-01", "2026-07-01"]
        for i in 0..<6 { s.subscription(type: i == 0 ? .purchase : .renewal, "t\(i + 1)", from: months[i], to: months[i + 1]) }
        let refund = s.refund("t3", at: "2026-03-15")
        let w = s.ledger.windows
        #expect(w.count == 6)
        #expect(w[2].end == S.t("2026-03-15"))
        #expect(w[2].effectiveCut?.eventID == refund)
        #expect(w[2].effectiveCut?.cause == .refund)
        #expect(w[3].start == S.t("2026-04-01") && w[3].end == S.t("2026-05-01"))
        #expect(!s.state(at: "2026-03-20")!.active)
        #expect(s.state(at: "2026-03-10")!.expiresAt == S.t("2026-03-15"))
        #expect(s.state(at: "2026-04-05")!.active)
    }

    @Test("a refund reversal restores exactly its refund's cut, other cuts stay")
    func refundReversal() {
        var s = S()
        s.subscription("t1", from: "2026-03-01", to: "2026-04-01")
        s.refund("t1", at: "2026-03-10")
        #expect(!s.state(at: "2026-03-20")!.active)
        s.add(.refundReversal, "2026-03-12", ["transaction_id": "t1"])
        #expect(s.ledger.windows[0].end == S.t("2026-04-01"))
        #expect(s.ledger.windows[0].effectiveCut == nil)
        #expect(s.state(at: "2026-03-20")!.active)

        s.add(.cancellation, "2026-03-25", ["entitlements": ["pro"], "reason": "chargeback"])
        s.refund("t1", at: "2026-03-20")
        s.add(.refundReversal, "2026-03-28", ["transaction_id": "t1"])
        #expect(s.ledger.windows[0].end == S.t("2026-03-25"))  // the cancellation's cut stays
    }

    @Test("a support credit of 7 days on an active subscription stacks after it")
    func supportCredit() {
        var s = S()
        s.subscription("t1", from: "2026-03-01", to: "2026-04-01")
        s.add(.credit, "2026-03-10", ["entitlement": "pro", "duration": "P7D", "reason": "outage", "granted_by": "agent-7"])
        let credit = s.ledger.windows.first { $0.kind == .credit }!
        #expect(credit.start == S.t("2026-04-01") && credit.end == S.t("2026-04-08"))
        #expect(s.state(at: "2026-03-15")!.expiresAt == S.t("2026-04-08"))
        #expect(s.state(at: "2026-04-05")!.active)
        // A credit runs beside store windows and never moves them.
        s.subscription(type: .renewal, "t2", from: "2026-04-01", to: "2026-05-01")
        #expect(s.ledger.windows.first { $0.transactionID == "t2" }!.start == S.t("2026-04-01"))
        // A credit reversal voids it.
        let creditID = credit.sourceEventID
        s.add(.creditReversal, "2026-03-20", ["credit_event_id": .string(creditID.uuidString)])
        #expect(s.ledger.windows.first { $0.kind == .credit }!.isVoid)
    }

    @Test("family revoke cuts every window that exists; a later purchase is not cut")
    func familyRevoke() {
        var s = S()
        s.subscription("t1", from: "2026-03-01", to: "2026-04-01")
        s.add(.cancellation, "2026-03-15", ["entitlements": [], "reason": "family_revoked"])
        #expect(!s.state(at: "2026-03-20")!.active)
        #expect(!s.state(at: "2026-03-20")!.willRenew)
        s.subscription("t2", from: "2026-03-18", to: "2026-04-18")
        #expect(s.state(at: "2026-03-20")!.active)
        #expect(s.state(at: "2026-03-20")!.willRenew)
    }

    @Test("billing issue with grace then recovery")
    func graceThenRecovery() {
        var s = S()
        s.subscription("t1", from: "2026-03-01", to: "2026-04-01")
        s.add(.billingIssue, "2026-04-01", ["product_id": "pro.monthly", "entitlements": ["pro"], "grace_until": "2026-04-17T00:00:00Z"])
        let grace = s.state(at: "2026-04-05")!
        #expect(grace.active && grace.inGrace)
        s.subscription(type: .renewal, "t2", from: "2026-04-06", to: "2026-05-06")
        let recovered = s.state(at: "2026-04-10")!
        #expect(recovered.active && !recovered.inGrace)
        #expect(recovered.expiresAt == S.t("2026-05-06"))
    }

    @Test("billing issue with grace then expiration")
    func graceThenExpiration() {
        var s = S()
        s.subscription("t1", from: "2026-03-01", to: "2026-04-01")
        s.add(.billingIssue, "2026-04-01", ["product_id": "pro.monthly", "entitlements": ["pro"], "grace_until": "2026-04-17T00:00:00Z"])
        s.add(.expiration, "2026-04-10", ["product_id": "pro.monthly", "entitlements": ["pro"], "reason": "billing"])
        #expect(s.state(at: "2026-04-05")!.inGrace)
        let lapsed = s.state(at: "2026-04-12")!
        #expect(!lapsed.active && !lapsed.willRenew)
        #expect(lapsed.expiresAt == S.t("2026-04-10"))
        #expect(s.ledger.windows.first { $0.kind == .grace }!.effectiveCut?.cause == .expiration)
    }

    @Test("an upgrade is a prorated refund of the old transaction plus a purchase of the new product")
    func upgrade() {
        var s = S()
        s.subscription("basic-1", from: "2026-03-01", to: "2026-04-01", product: "basic.monthly", entitlements: ["basic"])
        s.refund("basic-1", at: "2026-03-15", amount: 450)
        s.subscription("premium-1", from: "2026-03-15", to: "2026-04-15", product: "premium.monthly", entitlements: ["basic", "pro"])
        #expect(s.state("basic", at: "2026-03-20")!.productID == "premium.monthly")
        #expect(s.state("pro", at: "2026-03-20")!.active)
        #expect(s.ledger.windows.first { $0.transactionID == "basic-1" }!.end == S.t("2026-03-15"))
        #expect(s.state("basic", at: "2026-03-10")!.expiresAt == S.t("2026-04-15"))  // cut at 15th touches the new window
    }

    @Test("lifetime and free windows never end", arguments: ["lifetime", "free"])
    func unbounded(kind: String) {
        var s = S()
        s.unbounded(kind, "l1", at: "2026-03-01")
        let w = s.ledger.windows[0]
        #expect(w.end == nil && w.kind.rawValue == kind)
        let st = s.state(at: "2090-01-01")!
        #expect(st.active && st.expiresAt == nil && !st.willRenew)
        #expect(!s.state(at: "2026-02-01")!.active)
    }

    @Test("a refund recorded before its purchase cuts the window when it arrives")
    func refundBeforePurchase() {
        // Recorded first, effective after the purchase: folded in effective order.
        var late = S()
        late.refund("t1", at: "2026-03-10")
        late.subscription("t1", from: "2026-03-01", to: "2026-04-01")
        #expect(late.ledger.windows[0].end == S.t("2026-03-10"))
        #expect(late.ledger.unmatchedRefunds.isEmpty)

        // Effective before the purchase: kept, flagged, then applied when the transaction appears (void).
        var early = S()
        let refund = early.refund("t1", at: "2026-02-20")
        #expect(early.ledger.unmatchedRefunds == [refund])
        early.subscription("t1", from: "2026-03-01", to: "2026-04-01")
        #expect(early.ledger.windows[0].isVoid)
        #expect(early.ledger.windows[0].end == S.t("2026-03-01"))
        #expect(early.ledger.unmatchedRefunds.isEmpty)
        #expect(!early.state(at: "2026-03-05")!.active)
    }

    @Test("a cut at or before a window's start voids it but keeps it for the audit trail")
    func voidWindow() {
        var s = S()
        s.subscription("t1", from: "2026-03-01", to: "2026-04-01")
        s.add(.cancellation, "2026-02-01", ["reason": "developer"])
        s.add(.cancellation, "2026-02-01", ["reason": "developer"])  // idempotent in effect
        // cancellation precedes the window in effective order, so it cuts nothing (rule 8).
        #expect(!s.ledger.windows[0].isVoid)
        s.add(.creditReversal, "2026-03-02", ["credit_event_id": .string(UUID().uuidString)])
        var v = S()
        v.subscription("t1", from: "2026-03-01", to: "2026-04-01", occurred: "2026-03-01")
        v.refund("t1", at: "2026-03-01")
        #expect(v.ledger.windows.count == 1)
        #expect(v.ledger.windows[0].isVoid)
        #expect(v.state(at: "2026-03-01T00:00:01Z")?.active == false)
    }
}
