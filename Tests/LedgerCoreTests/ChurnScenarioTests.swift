import Foundation
import LedgerCore
import Testing

@Suite struct ChurnScenarioTests {
    typealias B = StreamBuilder

    func runs(_ b: StreamBuilder, _ entitlement: String = "") -> [PaidRun] {
        SubscriberFacts.derive(events: b.events, ledger: b.ledger).runs.filter { $0.entitlement == entitlement }
    }

    func churn(_ b: StreamBuilder, _ bounds: [String]) -> [ChurnPeriod] {
        var acc = ChurnAccumulator(boundaries: bounds.map(B.t))
        let r = runs(b)
        if let first = r.first { acc.add(runs: r, firstStart: first.start) }
        return acc.periods
    }

    @Test func autoRenewOffThenLapseIsVoluntary() {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        b.add(.autoRenewChanged, "2026-01-20", ["enabled": false, "product_id": "pro.monthly", "entitlements": ["pro"]])
        let p = churn(b, ["2026-01-01", "2026-02-01", "2026-03-01"])
        #expect(p[0].new == 1 && p[0].activeEnd == 1)
        #expect(p[1].activeStart == 1 && p[1].churned == [.voluntary: 1] && p[1].activeEnd == 0)
        #expect(p[1].churnRate == 1)
    }

    @Test func graceCountsAsPaidAndABillingLapseIsInvoluntary() throws {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        b.add(.billingIssue, "2026-02-01", ["product_id": "pro.monthly", "entitlements": ["pro"], "grace_until": "2026-02-17T00:00:00Z"])
        b.add(.expiration, "2026-02-10", ["product_id": "pro.monthly", "entitlements": ["pro"], "reason": "billing"])
        let run = try #require(runs(b).first)
        #expect(run.end == B.t("2026-02-10") && run.lapse == .involuntary)
        let p = churn(b, ["2026-01-01", "2026-02-01", "2026-03-01"])
        #expect(p[1].churned == [.involuntary: 1])
    }

    @Test func aRefundedPeriodIsARefundLapse() {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        b.subscription(type: .renewal, "t2", from: "2026-02-01", to: "2026-03-01")
        b.refund("t2", at: "2026-02-05")
        #expect(runs(b).map(\.lapse) == [.refund])
        #expect(runs(b).first?.end == B.t("2026-02-05"))
    }

    @Test func aLapseWithNothingSaidIsOther() {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        #expect(runs(b).map(\.lapse) == [.other])
    }

    @Test func aReturningSubscriberIsReactivatedNotNew() {
        var b = B()
        b.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        b.subscription("t2", from: "2026-04-10", to: "2026-05-10")
        let p = churn(b, ["2026-01-01", "2026-02-01", "2026-03-01", "2026-04-01", "2026-05-01"])
        #expect(p.map(\.new) == [1, 0, 0, 0])
        #expect(p.map(\.reactivated) == [0, 0, 0, 1])
        #expect(p.map(\.churnedTotal) == [0, 1, 0, 0])
    }

    @Test func startingAndLapsingInsideOnePeriodCountsNowhere() {
        var b = B()
        b.subscription("t1", from: "2026-01-03", to: "2026-01-10")
        let p = churn(b, ["2026-01-01", "2026-02-01"])
        #expect(p[0].new == 0 && p[0].churnedTotal == 0 && p[0].activeStart == 0 && p[0].activeEnd == 0)
    }

    @Test func trialsAndCreditsAreNotPaidButConvertTrials() {
        var b = B()
        b.subscription("tr", from: "2026-01-01", to: "2026-01-08", offer: "trial")
        b.add(.credit, "2026-01-01", ["entitlement": "pro", "duration": "P30D", "reason": "r", "granted_by": "g"])
        b.subscription("t1", from: "2026-01-08T12:00:00Z", to: "2026-02-08T12:00:00Z")
        let facts = SubscriberFacts.derive(events: b.events, ledger: b.ledger)
        #expect(facts.runs.filter { $0.entitlement == "" }.map(\.start) == [B.t("2026-01-08T12:00:00Z")])
        #expect(facts.trials.map(\.converted) == [true])

        var late = B()
        late.subscription("tr", from: "2026-01-01", to: "2026-01-08", offer: "trial")
        late.subscription("t1", from: "2026-01-09T00:00:01Z", to: "2026-02-09")
        #expect(SubscriberFacts.derive(events: late.events, ledger: late.ledger).trials.map(\.converted) == [false])

        var refunded = B()
        refunded.subscription("tr", from: "2026-01-01", to: "2026-01-08", offer: "trial")
        refunded.subscription("t1", from: "2026-01-08", to: "2026-02-08")
        refunded.refund("t1", at: "2026-01-09")
        #expect(SubscriberFacts.derive(events: refunded.events, ledger: refunded.ledger).trials.map(\.converted) == [false])
    }

    @Test func retentionCountsCohortsByFirstPaidMonth() {
        var a = B()
        a.subscription("t1", from: "2026-01-10", to: "2026-02-10")
        a.subscription(type: .renewal, "t2", from: "2026-02-10", to: "2026-03-10")
        var b = B()
        b.subscription("t1", from: "2026-01-20", to: "2026-02-20")
        var acc = RetentionAccumulator(from: B.t("2026-01-01"), to: B.t("2026-02-01"), until: B.t("2026-04-01"))
        for s in [a, b] { acc.add(runs: runs(s)) }
        #expect(acc.cohorts.count == 1)
        #expect(acc.cohorts[0].size == 2)
        #expect(acc.cohorts[0].retained == [2, 2, 1, 0])  // 1 Feb both, 1 Mar only a, 1 Apr nobody
    }
}
