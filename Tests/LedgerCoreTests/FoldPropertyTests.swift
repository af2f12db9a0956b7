import Foundation
import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

/// A deterministic random subscriber history: every event type, shared transaction ids, distinct
/// effective times (whole seconds), so that the fold's order is fixed by effective time alone.
enum RandomHistory {

    /// Events with positions 1…n in a random recorded order (`recordedOrder` permutes which event gets which position).
    static func make(seed: UInt64, count: Int? = nil) -> [RecordedEvent] {
        var r = SplitMix64(seed: seed)
        let n = count ?? r.int(1...40)
        let base = StreamBuilder.t("2026-01-01").microseconds
        var times = Set<Int64>()
        while times.count < n { times.insert(base + Int64(r.int(0...(300 * 86_400))) * 1_000_000) }
        let sortedTimes = times.sorted()
        var datas: [(EventType, [String: JSONValue])] = []
        var credits: [Int] = []
        for i in 0..<n {
            let txn = JSONValue.string("t\(r.int(1...5))")
            let ents: JSONValue = r.int(0...3) == 0 ? ["pro", "basic"] : ["pro"]
            let at = Timestamp(microseconds: sortedTimes[i])
            let end = Timestamp(microseconds: at.microseconds + Int64(r.int(1...60)) * 86_400_000_000)
            switch r.int(0...11) {
            case 0, 1, 2:
                datas.append(
                    (
                        r.int(0...1) == 0 ? .purchase : .renewal,
                        [
                            "product_id": "pro.monthly", "entitlements": ents, "transaction_id": txn, "kind": "auto_renewable",
                            "offer": .string(r.pick(["none", "none", "trial", "intro", "promo"])),
                            "period_start": .string(at.rfc3339), "period_end": .string(end.rfc3339), "period": "P1M",
                            "price_minor": 999, "currency": "USD",
                        ]
                    ))
            case 3:
                datas.append(
                    (
                        .purchase,
                        [
                            "product_id": "pro.pack", "entitlements": ents, "transaction_id": txn, "kind": "non_renewing",
                            "duration": .string(r.pick(["P1M", "P3M", "P6M", "P7D"])), "price_minor": 2999, "currency": "USD",
                        ]
                    ))
            case 4: datas.append((.refund, ["transaction_id": txn, "amount_minor": 500, "currency": "USD"]))
            case 5: datas.append((.refundReversal, ["transaction_id": txn]))
            case 6: datas.append((.cancellation, ["entitlements": r.int(0...1) == 0 ? [] : ents, "reason": "other"]))
            case 7:
                credits.append(i)
                datas.append((.credit, ["entitlement": "pro", "duration": "P7D", "reason": "r", "granted_by": "g"]))
            case 8:
                if let c = credits.last {
                    datas.append((.creditReversal, ["credit_event_id": .string(StreamBuilder.id(1000 + c).uuidString)]))
                } else {
                    datas.append((.autoRenewChanged, ["enabled": false, "product_id": "pro.monthly", "entitlements": ents]))
                }
            case 9: datas.append((.autoRenewChanged, ["enabled": .bool(r.int(0...1) == 0), "product_id": "pro.monthly", "entitlements": ents]))
            case 10:
                datas.append((.billingIssue, ["product_id": "pro.monthly", "entitlements": ents, "grace_until": .string(end.rfc3339)]))
            default:
                datas.append((.expiration, ["product_id": "pro.monthly", "entitlements": ents, "reason": "billing"]))
            }
        }
        // Recorded order: a random permutation of the effective order.
        var order = Array(0..<n)
        for i in stride(from: n - 1, to: 0, by: -1) { order.swapAt(i, r.int(0...i)) }
        var events: [RecordedEvent] = []
        for (position, i) in order.enumerated() {
            let (type, data) = datas[i]
            events.append(
                RecordedEvent(
                    eventID: StreamBuilder.id(1000 + i), subscriberID: "sub", version: Int64(position + 1),
                    position: Int64(position + 1), type: type, occurredAt: Timestamp(microseconds: sortedTimes[i]),
                    recordedAt: Timestamp(microseconds: Int64(position)), source: "test", environment: .production,
                    idempotencyKey: "k\(i)", data: data, metadata: [:], prevHash: RecordedEvent.genesisHash))
        }
        return events
    }

    /// The same events, recorded in another order (new positions, same effective times and ids).
    static func rerecorded(_ events: [RecordedEvent], seed: UInt64) -> [RecordedEvent] {
        var r = SplitMix64(seed: seed ^ 0xDEAD_BEEF)
        var shuffled = events
        for i in stride(from: shuffled.count - 1, to: 0, by: -1) { shuffled.swapAt(i, r.int(0...i)) }
        return shuffled.enumerated().map { p, e in
            var e = e
            e.position = Int64(p + 1)
            e.version = Int64(p + 1)
            return e
        }
    }
}

/// Windows compared without the creating event's position (which changes when the recorded order does).
private func comparable(_ ledger: SubscriberLedger) -> [String] {
    ledger.windows.map {
        "\($0.entitlement) \($0.start) \($0.end.map(\.description) ?? "∞") \($0.kind) \($0.transactionID ?? "-") \($0.sourceEventID) \($0.effectiveCut?.eventID.uuidString ?? "-")"
    }.sorted()
}

@Suite("The window fold: properties")
struct FoldPropertyTests {
    @Test("the fold is deterministic and ignores the order events are handed to it")
    func deterministic() async {
        await propertyCheck(count: 300, input: Gen.int(in: 0...Int.max)) { seed in
            let events = RandomHistory.make(seed: UInt64(seed))
            let once = Fold.fold(events)
            #expect(Fold.fold(events) == once)
            #expect(Fold.fold(events.reversed()) == once)
            #expect(
                Fold.fold(RandomHistory.rerecorded(events, seed: UInt64(seed)).sorted { $0.position < $1.position }).windows.count
                    == once.windows.count)
        }
    }

    @Test("the fold order of events already in it is kept as given; any other order is sorted")
    func foldOrder() async {
        await propertyCheck(count: 100, input: Gen.int(in: 0...Int.max)) { seed in
            let events = RandomHistory.make(seed: UInt64(seed)).map(FoldEvent.init)
            let sorted = events.sorted { ($0.occurredAt, $0.position) < ($1.occurredAt, $1.position) }
            #expect(Fold.inFoldOrder(events).map(\.eventID) == sorted.map(\.eventID))
            #expect(Fold.inFoldOrder(sorted).map(\.eventID) == sorted.map(\.eventID))
            #expect(Fold.inFoldOrder(sorted.reversed()).map(\.eventID) == sorted.map(\.eventID))
        }
    }

    @Test("for given effective times the result does not depend on the recorded order")
    func recordedOrderIndependent() async {
        await propertyCheck(count: 300, input: Gen.int(in: 0...Int.max)) { seed in
            let events = RandomHistory.make(seed: UInt64(seed))
            let other = RandomHistory.rerecorded(events, seed: UInt64(seed))
            let a = Fold.fold(events)
            let b = Fold.fold(other)
            #expect(comparable(a) == comparable(b))
            #expect(a.renewing == b.renewing)
            for t in stride(from: StreamBuilder.t("2026-01-01").microseconds, to: StreamBuilder.t("2027-01-01").microseconds, by: 7 * 86_400_000_000)
            {
                #expect(a.entitlements(at: Timestamp(microseconds: t)) == b.entitlements(at: Timestamp(microseconds: t)))
            }
        }
    }

    @Test("folding a prefix then the rest equals folding everything (late events re-fold)")
    func incrementalEqualsWhole() async {
        await propertyCheck(count: 200, input: Gen.int(in: 0...Int.max)) { seed in
            let events = RandomHistory.make(seed: UInt64(seed)).sorted { $0.position < $1.position }
            var seen: [RecordedEvent] = []
            var incremental = SubscriberLedger.empty
            for e in events {
                seen.append(e)
                incremental = Fold.fold(seen)
            }
            #expect(incremental == Fold.fold(events))
            for w in incremental.windows {
                if let end = w.end { #expect(end >= w.start) }
            }
        }
    }
}
