import Foundation
import LedgerCore

/// A seeded random population of subscriber histories as valid `NewEvent`s (through the API's decoder),
/// appended in a shuffled recorded order so that many events arrive late.
public enum GeneratedLedger {

    public static func events(seed: UInt64, subscribers: Int, eventsPerSubscriber: ClosedRange<Int>) -> [NewEvent] {
        var r = SplitMix64(seed: seed)
        // Stores, countries and taxes come from their own generator, so the histories are the same as without them.
        var d = SplitMix64(seed: seed &+ 0x5EED)
        let base = try! Timestamp(rfc3339: "2026-01-01T00:00:00Z").microseconds
        var all: [NewEvent] = []
        for s in 0..<subscribers {
            let subscriber = "gen-\(seed)-\(s)"
            let n = r.int(eventsPerSubscriber)
            var credits: [String] = []
            for i in 0..<n {
                let at = Timestamp(microseconds: base + Int64(r.int(0...(300 * 86_400))) * 1_000_000)
                let end = Timestamp(microseconds: at.microseconds + Int64(r.int(1...60)) * 86_400_000_000)
                let txn = JSONValue.string("\(subscriber)-t\(r.int(1...4))")
                let ents: JSONValue = r.int(0...3) == 0 ? ["pro", "basic"] : ["pro"]
                var (type, data): (String, [String: JSONValue])
                switch r.int(0...10) {
                case 0, 1, 2:
                    (type, data) = (
                        r.int(0...1) == 0 ? "purchase" : "renewal",
                        [
                            "product_id": "pro.monthly", "entitlements": ents, "transaction_id": txn, "kind": "auto_renewable",
                            "offer": .string(r.pick(["none", "none", "trial", "intro"])), "period_start": .string(at.rfc3339),
                            "period_end": .string(end.rfc3339), "period": "P1M", "price_minor": 999, "currency": "USD",
                            "commission_rate": "0.30",
                        ]
                    )
                case 3:
                    (type, data) = (
                        "purchase",
                        [
                            "product_id": "pro.pack", "entitlements": ents, "transaction_id": txn, "kind": "non_renewing",
                            "duration": .string(r.pick(["P1M", "P3M", "P7D"])), "price_minor": 2999, "currency": "EUR",
                        ]
                    )
                case 4: (type, data) = ("refund", ["transaction_id": txn, "amount_minor": 500, "currency": "USD", "reason": "r"])
                case 5: (type, data) = ("refund_reversal", ["transaction_id": txn])
                case 6: (type, data) = ("cancellation", ["entitlements": ents, "reason": "other"])
                case 7:
                    credits.append("\(subscriber)-\(i)")
                    (type, data) = ("credit", ["entitlement": "pro", "duration": "P7D", "reason": "r", "granted_by": "g"])
                case 8:
                    (type, data) = ("auto_renew_changed", ["enabled": .bool(r.int(0...1) == 0), "product_id": "pro.monthly", "entitlements": ents])
                case 9: (type, data) = ("billing_issue", ["product_id": "pro.monthly", "entitlements": ents, "grace_until": .string(end.rfc3339)])
                default: (type, data) = ("expiration", ["product_id": "pro.monthly", "entitlements": ents, "reason": "billing"])
                }
                if type == "purchase" || type == "renewal", let price = data["price_minor"]?.numberValue?.int64Value {
                    if let country = d.pick(["DE", "US", "JP", nil] as [String?]) { data["country"] = .string(country) }
                    if d.int(0...1) == 0 { data["tax_minor"] = .number(JSONNumber(Int64(d.int(0...Int(price / 5))))) }
                }
                let members: [String: JSONValue] = [
                    "subscriber_id": .string(subscriber), "type": .string(type), "occurred_at": .string(at.rfc3339),
                    "source": .string(d.pick(["gen", "apple", "google"])), "environment": r.int(0...9) == 0 ? "sandbox" : "production",
                    "idempotency_key": .string("\(subscriber)-\(i)"), "data": .object(data),
                ]
                all.append(try! EventDecoder.decode(members, path: ""))
            }
        }
        for i in stride(from: all.count - 1, to: 0, by: -1) { all.swapAt(i, r.int(0...i)) }
        return all
    }
}
