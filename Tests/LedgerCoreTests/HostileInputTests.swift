import Foundation
import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

/// Random and mutated bodies: the decoder must answer with a value or an error, never trap.
@Suite("Hostile input to the event decoder")
struct HostileInputTests {
    static let valid = Array(
        #"{"subscriber_id":"u1","type":"purchase","occurred_at":"2026-03-01T10:00:00Z","source":"web","environment":"production","idempotency_key":"k","data":{"product_id":"p","entitlements":["pro"],"transaction_id":"t","kind":"non_renewing","duration":"P3M","price_minor":999,"currency":"USD"}}"#
            .utf8)

    @Test("random byte mutations of a valid event never crash the decoder")
    func mutations() async {
        await propertyCheck(count: 2000, input: Gen.int(in: 0...Int.max)) { seed in
            var rng = SplitMix64(seed: UInt64(seed))
            var bytes = Self.valid
            for _ in 0..<rng.int(1...8) {
                let i = rng.int(0...bytes.count - 1)
                switch rng.int(0...3) {
                case 0: bytes[i] = UInt8(truncatingIfNeeded: rng.next())
                case 1: bytes.remove(at: i)
                case 2: bytes.insert(rng.pick(Array("{}[]\",:0123456789eE.-+\\u".utf8)), at: i)
                default: bytes.insert(contentsOf: bytes[i..<min(bytes.count, i + rng.int(1...20))], at: i)
                }
            }
            switch Result(catching: { try AppendRequest.decode(bytes) }) {
            case .success(let request): #expect(request.events.count == 1)
            case .failure: break
            }
        }
    }

    @Test("random JSON values never crash the decoder")
    func randomValues() async {
        await propertyCheck(count: 2000, input: Gen.int(in: 0...Int.max)) { seed in
            var rng = SplitMix64(seed: UInt64(seed))
            func value(_ depth: Int) -> JSONValue {
                switch rng.int(0...(depth > 3 ? 3 : 6)) {
                case 0: return .null
                case 1: return .bool(rng.int(0...1) == 0)
                case 2:
                    return .number(
                        JSONNumber(
                            jsonText: Substring(rng.pick(["0", "-1", "1e300", "9223372036854775808", "1.5", "-0", "1e-300", "99999999999999999999"])))!
                    )
                case 3:
                    return .string(
                        rng.pick([
                            "", "NaN", "Infinity", "P99999Y", "P1M", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2026-02-30T00:00:00Z", "USD",
                            "pro", String(repeating: "x", count: 300),
                        ]))
                case 4: return .array((0..<rng.int(0...4)).map { _ in value(depth + 1) })
                default:
                    let keys = [
                        "subscriber_id", "type", "occurred_at", "source", "environment", "idempotency_key", "data", "metadata", "expected_version",
                        "product_id", "entitlements", "transaction_id", "kind", "period", "duration", "period_start", "period_end", "price_minor",
                        "currency", "amount_minor", "entitlement", "window_start", "window_end", "grace_until", "enabled", "reason", "granted_by",
                        "events",
                    ]
                    var o: [String: JSONValue] = [:]
                    for _ in 0..<rng.int(0...10) { o[rng.pick(keys)] = value(depth + 1) }
                    return .object(o)
                }
            }
            _ = try? AppendRequest.decode(value(0))
            // Huge durations from hostile input must saturate, not trap.
            _ = ISODuration("P999999Y")?.added(to: .maximum)
        }
    }

    @Test("deeply nested, huge and odd documents are refused with a reason")
    func oddDocuments() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: AppendRequest.DecodeError.self) { try AppendRequest.decode(Array(deep.utf8)) }
        let hugeNumber = String(decoding: Self.valid, as: UTF8.self).replacingOccurrences(of: "999", with: "1" + String(repeating: "0", count: 5000))
        #expect(throws: AppendRequest.DecodeError.self) { try AppendRequest.decode(Array(hugeNumber.utf8)) }
        let farFuture = String(decoding: Self.valid, as: UTF8.self).replacingOccurrences(of: "2026-03-01", with: "10000-03-01")
        #expect(throws: AppendRequest.DecodeError.self) { try AppendRequest.decode(Array(farFuture.utf8)) }
        let nanPrice = String(decoding: Self.valid, as: UTF8.self).replacingOccurrences(of: "999", with: "\"NaN\"")
        #expect(throws: AppendRequest.DecodeError.self) { try AppendRequest.decode(Array(nanPrice.utf8)) }
        #expect(throws: AppendRequest.DecodeError.self) { try AppendRequest.decode(Array("NaN".utf8)) }
    }
}
