import Foundation
import LedgerTestSupport
import PropertyBased
import Testing

@testable import LedgerCore

private typealias S = StreamBuilder

/// `will_renew` at T (docs/semantics.md section 3, "Entitlement state at a time T"): the fold builds a
/// timeline per entitlement once; these tests hold every read of it to the definition, read straight from
/// the events at each instant.
@Suite("will_renew at T")
struct WillRenewTests {
    /// The definition, from the raw events (quadratic, on purpose): active at `t` through an auto-renewable
    /// transaction's window or a grace window (the fold's windows, after cuts: a refund ends the
    /// subscription by cutting its window); auto-renew on at `t` (the last `auto_renew_changed` at or before
    /// `t` since the latest auto-renewable `purchase` at or before `t`, on when there is none); and no
    /// `expiration` or `cancellation` at or before `t` after the latest auto-renewable `purchase` or `renewal`.
    ///
    /// `typed`: the events in fold order, `(occurred_at, position)`; `windows`: their fold's windows.
    static func reference(_ typed: [FoldEvent], _ windows: [Window], _ e: String, at t: Timestamp) -> Bool {
        func autoRenewable(_ event: FoldEvent) -> Bool {
            if case .transaction(let d) = event.payload { d.kind == .autoRenewable } else { false }
        }
        let renewableSources = Set(typed.filter(autoRenewable).map(\.eventID))
        let through = windows.contains { w in
            w.entitlement == e && !w.isVoid && w.covers(t) && (w.kind == .grace || renewableSources.contains(w.sourceEventID))
        }
        guard through else { return false }
        let known = typed.filter { $0.occurredAt <= t }
        let names = { (event: FoldEvent) in event.payload.entitlements.contains(e) }
        let latestPurchase = known.lastIndex { $0.type == .purchase && autoRenewable($0) && names($0) }
        var on = true
        for event in known[(latestPurchase.map { $0 + 1 } ?? 0)...] {
            if case .autoRenewChanged(let a) = event.payload, let enabled = a.enabled, a.entitlements.contains(e) { on = enabled }
        }
        let latestTransaction = known.lastIndex { autoRenewable($0) && names($0) }
        let latestEnd = known.lastIndex { event in
            switch event.payload {
            case .expiration(let x): x.entitlements.contains(e)
            case .cancellation(let c): c.entitlements.isEmpty || c.entitlements.contains(e)
            default: false
            }
        }
        let ended = latestEnd.map { end in latestTransaction.map { $0 < end } ?? true } ?? false
        return on && !ended
    }

    /// Instants worth asking about: a grid, every event's time and every window edge, each also a
    /// microsecond before.
    static func instants(_ events: [RecordedEvent], _ ledger: SubscriberLedger) -> [Timestamp] {
        var out: [Timestamp] = []
        for t in stride(from: S.t("2025-12-01").microseconds, to: S.t("2027-03-01").microseconds, by: 5 * 86_400_000_000) {
            out.append(Timestamp(microseconds: t))
        }
        let edges = events.map(\.occurredAt) + ledger.windows.flatMap { [$0.start, $0.end].compactMap { $0 } }
        for t in edges { out += [t, Timestamp(microseconds: t.microseconds - 1)] }
        return out
    }

    /// Compares every entitlement's `will_renew` with the reference at every instant; returns how many
    /// answers were true (so that a test can check it saw both).
    @discardableResult
    static func check(_ events: [RecordedEvent]) -> Int {
        let ledger = Fold.fold(events)
        let typed = events.map(FoldEvent.init).sorted { ($0.occurredAt, $0.position) < ($1.occurredAt, $1.position) }
        var trues = 0
        for t in instants(events, ledger) {
            for state in ledger.entitlements(at: t) {
                let expected = reference(typed, ledger.windows, state.entitlement, at: t)
                #expect(state.willRenew == expected, "\(state.entitlement) at \(t.rfc3339)")
                #expect(ledger.willRenew(state.entitlement, at: t) == expected)
                if expected { trues += 1 }
            }
        }
        return trues
    }

    @Test("on random histories, will_renew at any T equals the definition")
    func randomHistories() async {
        let seen = Seen()
        await propertyCheck(count: 200, input: Gen.int(in: 0...Int.max)) { seed in
            seen.add(Self.check(RandomHistory.make(seed: UInt64(seed))))
        }
        #expect(seen.total > 0)
    }

    @Test("on random histories with ties, lifetime, free and non-renewing grants, will_renew equals the definition")
    func denseHistories() async {
        let seen = Seen()
        await propertyCheck(count: 300, input: Gen.int(in: 0...Int.max)) { seed in
            seen.add(Self.check(Self.dense(seed: UInt64(seed))))
        }
        #expect(seen.total > 0)
    }

    @Test("the incremental fold equals the whole fold, timeline included")
    func incremental() async {
        await propertyCheck(count: 200, input: Gen.int(in: 0...Int.max)) { seed in
            let events = Fold.inFoldOrder(Self.dense(seed: UInt64(seed)).map(FoldEvent.init))
            let split = events.isEmpty ? 0 : Int(UInt64(seed) % UInt64(events.count))
            var fold = IncrementalFold(Array(events[..<split]))
            for event in events[split...] {
                let applied = fold.apply(event)
                #expect(applied)
            }
            #expect(fold.ledger == Fold.fold(events))
        }
    }

    /// A history on a coarse grid of days (events often share an instant, then position decides), over
    /// two entitlements, with every event type and every product kind.
    static func dense(seed: UInt64) -> [RecordedEvent] {
        var r = SplitMix64(seed: seed)
        let n = r.int(1...30)
        var events: [RecordedEvent] = []
        var credits: [UUID] = []
        for i in 0..<n {
            let at = Timestamp(microseconds: S.t("2026-01-01").microseconds + Int64(r.int(0...40)) * 86_400_000_000)
            let end = Timestamp(microseconds: at.microseconds + Int64(r.int(1...20)) * 86_400_000_000)
            let ents: JSONValue = r.pick([["pro"], ["pro"], ["basic"], ["pro", "basic"]])
            let txn = JSONValue.string("t\(r.int(1...4))")
            let (type, data): (EventType, [String: JSONValue])
            switch r.int(0...13) {
            case 0, 1, 2:
                (type, data) = (
                    r.int(0...1) == 0 ? .purchase : .renewal,
                    [
                        "product_id": "pro.monthly", "entitlements": ents, "transaction_id": txn, "kind": "auto_renewable",
                        "offer": .string(r.pick(["none", "trial", "intro"])), "period_start": .string(at.rfc3339),
                        "period_end": .string(end.rfc3339), "period": "P1M", "price_minor": 999, "currency": "USD",
                    ]
                )
            case 3:
                (type, data) = (
                    .purchase,
                    [
                        "product_id": "pro.pack", "entitlements": ents, "transaction_id": txn, "kind": "non_renewing",
                        "duration": .string(r.pick(["P7D", "P1M"])), "price_minor": 2999, "currency": "USD",
                    ]
                )
            case 4:
                let kind = r.pick(["lifetime", "free"])
                (type, data) = (
                    .purchase,
                    [
                        "product_id": "pro.forever", "entitlements": ents, "transaction_id": txn, "kind": .string(kind),
                        "price_minor": kind == "free" ? 0 : 9999, "currency": "USD",
                    ]
                )
            case 5: (type, data) = (.refund, ["transaction_id": txn, "amount_minor": 500, "currency": "USD", "cut": .bool(r.int(0...3) > 0)])
            case 6: (type, data) = (.refundReversal, ["transaction_id": txn])
            case 7: (type, data) = (.cancellation, ["entitlements": r.int(0...1) == 0 ? [] : ents, "reason": "other"])
            case 8:
                credits.append(S.id(1000 + i))
                (type, data) = (.credit, ["entitlement": .string(r.pick(["pro", "basic"])), "duration": "P7D", "reason": "r", "granted_by": "g"])
            case 9:
                if let c = credits.last {
                    (type, data) = (.creditReversal, ["credit_event_id": .string(c.uuidString)])
                } else {
                    (type, data) = (.autoRenewChanged, ["enabled": true, "product_id": "pro.monthly", "entitlements": ents])
                }
            case 10, 11:
                (type, data) = (.autoRenewChanged, ["enabled": .bool(r.int(0...1) == 0), "product_id": "pro.monthly", "entitlements": ents])
            case 12: (type, data) = (.billingIssue, ["product_id": "pro.monthly", "entitlements": ents, "grace_until": .string(end.rfc3339)])
            default: (type, data) = (.expiration, ["product_id": "pro.monthly", "entitlements": ents, "reason": "billing"])
            }
            events.append(
                RecordedEvent(
                    eventID: S.id(1000 + i), subscriberID: "sub", version: Int64(i + 1), position: Int64(i + 1), type: type,
                    occurredAt: at, recordedAt: Timestamp(microseconds: Int64(i)), source: "test", environment: .production,
                    idempotencyKey: "k\(i)", data: data, metadata: [:], prevHash: RecordedEvent.genesisHash))
        }
        return events
    }

    /// How many true answers the property tests met, across their (concurrent) cases.
    private final class Seen: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        func add(_ n: Int) { lock.withLock { count += n } }
        var total: Int { lock.withLock { count } }
    }

    // Hand examples, each the definition's own case.

    @Test("an inactive entitlement will not renew (the subscription ran out, auto-renew never turned off)")
    func inactive() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        #expect(s.state(at: "2026-01-15")!.willRenew)
        let after = s.state(at: "2026-02-15")!
        #expect(!after.active && !after.willRenew)
        #expect(!s.state(at: "2026-02-01")!.willRenew)  // windows are half-open
    }

    @Test("an entitlement held only by a credit will not renew")
    func creditOnly() {
        var s = S()
        s.add(.credit, "2026-01-01", ["entitlement": "pro", "duration": "P7D", "reason": "r", "granted_by": "g"])
        let st = s.state(at: "2026-01-03")!
        #expect(st.active && !st.willRenew)
        // A credit that stacks after a subscription: renewing during the subscription, not during the credit.
        var t = S()
        t.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        t.add(.credit, "2026-01-10", ["entitlement": "pro", "duration": "P7D", "reason": "r", "granted_by": "g"])
        #expect(t.state(at: "2026-01-20")!.willRenew)
        let credit = t.state(at: "2026-02-03")!
        #expect(credit.active && !credit.willRenew)
    }

    @Test("lifetime, free and non-renewing grants never renew", arguments: ["lifetime", "free", "non_renewing"])
    func neverRenewing(kind: String) {
        var s = S()
        if kind == "non_renewing" { s.pack("p1", at: "2026-01-01", duration: "P1M") } else { s.unbounded(kind, "l1", at: "2026-01-01") }
        let st = s.state(at: "2026-01-15")!
        #expect(st.active && !st.willRenew)
    }

    @Test("auto-renew off at T1 keeps access: true before T1, false from T1 on; on again from when it is turned on")
    func autoRenewOffThenOn() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-03-01")
        s.add(.autoRenewChanged, "2026-01-10", ["enabled": false, "product_id": "pro.monthly", "entitlements": ["pro"]])
        #expect(s.state(at: "2026-01-05")!.willRenew)
        #expect(!s.state(at: "2026-01-10")!.willRenew)
        let off = s.state(at: "2026-01-20")!
        #expect(off.active && !off.willRenew)
        s.add(.autoRenewChanged, "2026-02-01", ["enabled": true, "product_id": "pro.monthly", "entitlements": ["pro"]])
        #expect(!s.state(at: "2026-01-20")!.willRenew)
        #expect(s.state(at: "2026-02-05")!.willRenew)
        // Timeline: on at the purchase, off at T1, on again.
        #expect(s.ledger.renewing["pro"] == [S.t("2026-01-01"), S.t("2026-01-10"), S.t("2026-02-01"), S.t("2026-03-01")])
    }

    @Test("a new purchase turns auto-renew on again; a renewal leaves it off")
    func repurchase() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        s.add(.autoRenewChanged, "2026-01-10", ["enabled": false, "product_id": "pro.monthly", "entitlements": ["pro"]])
        var renewed = s
        renewed.subscription(type: .renewal, "t2", from: "2026-02-01", to: "2026-03-01")
        #expect(!renewed.state(at: "2026-02-05")!.willRenew)
        s.subscription("t2", from: "2026-02-01", to: "2026-03-01")
        #expect(!s.state(at: "2026-01-20")!.willRenew)
        #expect(s.state(at: "2026-02-05")!.willRenew)
    }

    @Test("an expiration, a refund or a cancellation ends it at its instant; a renewal starts it again")
    func endings() {
        var x = S()
        x.subscription("t1", from: "2026-01-01", to: "2026-03-01")
        x.add(.expiration, "2026-02-01", ["product_id": "pro.monthly", "entitlements": ["pro"], "reason": "voluntary"])
        #expect(x.state(at: "2026-01-15")!.willRenew)
        let expired = x.state(at: "2026-02-05")!
        #expect(expired.active && !expired.willRenew)  // the period runs on; the subscription does not
        x.subscription(type: .renewal, "t2", from: "2026-02-10", to: "2026-03-10")
        #expect(x.state(at: "2026-02-12")!.willRenew)

        var r = S()
        r.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        r.refund("t1", at: "2026-01-20")
        #expect(r.state(at: "2026-01-15")!.willRenew)
        #expect(!r.state(at: "2026-01-20")!.willRenew)
        // Money back without a cut leaves the subscription running; a reversal undoes the refund.
        var kept = S()
        kept.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        kept.refund("t1", at: "2026-01-20", cut: false)
        #expect(kept.state(at: "2026-01-25")!.willRenew)
        r.add(.refundReversal, "2026-01-25", ["transaction_id": "t1"])
        #expect(r.state(at: "2026-01-22")!.willRenew)

        var c = S()
        c.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        c.add(.cancellation, "2026-01-20", ["entitlements": ["pro"], "reason": "developer"])
        #expect(c.state(at: "2026-01-15")!.willRenew)
        #expect(!c.state(at: "2026-01-25")!.willRenew)
    }

    @Test("grace counts: a subscription in its grace period will renew until the expiration")
    func grace() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-02-01")
        s.add(.billingIssue, "2026-02-01", ["product_id": "pro.monthly", "entitlements": ["pro"], "grace_until": "2026-02-15T00:00:00Z"])
        let inGrace = s.state(at: "2026-02-05")!
        #expect(inGrace.inGrace && inGrace.willRenew)
        s.add(.expiration, "2026-02-10", ["product_id": "pro.monthly", "entitlements": ["pro"], "reason": "billing"])
        #expect(s.state(at: "2026-02-05")!.willRenew)
        #expect(!s.state(at: "2026-02-12")!.willRenew)
    }

    @Test("an auto_renew_changed for one entitlement leaves another alone")
    func perEntitlement() {
        var s = S()
        s.subscription("t1", from: "2026-01-01", to: "2026-02-01", entitlements: ["pro", "basic"])
        s.add(.autoRenewChanged, "2026-01-10", ["enabled": false, "product_id": "pro.monthly", "entitlements": ["basic"]])
        #expect(s.state("pro", at: "2026-01-15")!.willRenew)
        #expect(!s.state("basic", at: "2026-01-15")!.willRenew)
    }
}
