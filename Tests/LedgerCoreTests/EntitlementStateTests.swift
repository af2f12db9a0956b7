import Foundation
import LedgerTestSupport
import PropertyBased
import Testing

@testable import LedgerCore

/// `entitlements(at:)` runs on every entitlement read, so it is written as one pass without copies; these
/// tests hold it to the straightforward reading of docs/semantics.md section 3 (group, filter, pick).
@Suite struct EntitlementStateTests {
    @Test("entitlements(at:) equals the straightforward definition on random histories")
    func matchesReference() async {
        await propertyCheck(count: 300, input: Gen.int(in: 0...Int.max)) { seed in
            let ledger = Fold.fold(RandomHistory.make(seed: UInt64(seed)))
            for t in stride(from: StreamBuilder.t("2026-01-01").microseconds, to: StreamBuilder.t("2027-03-01").microseconds, by: 86_400_000_000 / 3)
            {
                let at = Timestamp(microseconds: t)
                #expect(ledger.entitlements(at: at) == Self.reference(ledger, at: at))
            }
            // Window edges, where covering and ended change.
            for w in ledger.windows {
                for at in [w.start, w.end].compactMap({ $0 }) {
                    #expect(ledger.entitlements(at: at) == Self.reference(ledger, at: at))
                }
            }
        }
    }

    @Test("the written JSON is the dictionary's canonical JSON")
    func writtenJSON() async {
        await propertyCheck(count: 100, input: Gen.int(in: 0...Int.max)) { seed in
            let ledger = Fold.fold(RandomHistory.make(seed: UInt64(seed)))
            let states = ledger.entitlements(at: StreamBuilder.t("2026-06-01"))
            var object = CanonicalObject()
            object.member("at", string: "x\"y")
            object.member("entitlements", objects: states) { $0.write(to: &$1) }
            object.member("subscriber_id", string: "s")
            let expected = JSONValue.object([
                "at": .string("x\"y"), "entitlements": .array(states.map(\.json)), "subscriber_id": .string("s"),
            ])
            #expect(object.finish() == expected.canonicalBytes())
        }
    }

    /// The definition as first written: windows grouped by entitlement, void ones left out.
    static func reference(_ ledger: SubscriberLedger, at t: Timestamp) -> [EntitlementState] {
        let byEntitlement = Dictionary(grouping: ledger.windows.filter { !$0.isVoid }, by: \.entitlement)
        return Set(ledger.windows.map(\.entitlement)).sorted().map { e in
            let ws = byEntitlement[e] ?? []
            let covering = ws.filter { $0.covers(t) }
            let active = !covering.isEmpty
            let expiresAt: Timestamp?
            let product: String?
            if active {
                expiresAt = Coverage.runEnd(ws.map { ($0.start, $0.end) }, containing: t) ?? nil
                product = covering.max(by: { rank($0) < rank($1) })?.productID
            } else {
                let ended = ws.filter { $0.end.map { $0 <= t } ?? false }
                expiresAt = ended.compactMap(\.end).max()
                product = ended.filter { $0.productID != nil }.max(by: { endedRank($0) < endedRank($1) })?.productID
            }
            return EntitlementState(
                entitlement: e, active: active, expiresAt: expiresAt, inGrace: active && covering.allSatisfy { $0.kind == .grace },
                inTrial: covering.contains { $0.kind == .trial } && !covering.contains { $0.kind == .paid },
                willRenew: active && ledger.willRenew(e, at: t), productID: product)
        }
    }

    static func tier(_ w: Window) -> Int {
        switch w.kind {
        case .credit: 0
        case .grace: 1
        default: 2
        }
    }

    static func rank(_ w: Window) -> (Int, Timestamp, String) { (tier(w), w.start, w.productID ?? "") }

    static func endedRank(_ w: Window) -> (Timestamp, Int, Timestamp, String) {
        (w.end ?? w.start, tier(w), w.start, w.productID ?? "")
    }
}
