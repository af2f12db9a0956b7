import Foundation
import LedgerCore

/// The hand-computed example of docs/reports.md, "Reports II: worked example": six subscribers in USD from
/// January to May 2025. The pure tests fold it; the HTTP tests append it and read the four reports.
public enum ReportsIIExample {
    public struct Event: Sendable {
        public var subscriber: String
        public var type: String
        public var occurredAt: String
        public var data: [String: JSONValue]
    }

    static func subscription(
        _ subscriber: String, _ type: String, _ txn: String, from: String, to: String, price: Int64, period: String = "P1M",
        product: String = "pro.monthly", commission: String = "0.30", offer: String = "none"
    ) -> Event {
        Event(
            subscriber: subscriber, type: type, occurredAt: from,
            data: [
                "product_id": .string(product), "entitlements": ["pro"], "transaction_id": .string(txn), "kind": "auto_renewable",
                "offer": .string(offer), "period_start": .string(from), "period_end": .string(to), "period": .string(period),
                "price_minor": .number(JSONNumber(price)), "currency": "USD", "commission_rate": .string(commission),
            ])
    }

    static func refund(_ subscriber: String, _ txn: String, at: String, amount: Int64, cut: Bool = true) -> Event {
        var data: [String: JSONValue] = [
            "transaction_id": .string(txn), "amount_minor": .number(JSONNumber(amount)), "currency": "USD", "reason": "customer",
        ]
        if !cut { data["cut"] = false }
        return Event(subscriber: subscriber, type: "refund", occurredAt: at, data: data)
    }

    /// In append order.
    public static let events: [Event] = [
        // D: a month in January, back on 20 April (a reactivation).
        subscription("rx-d", "purchase", "d1", from: "2025-01-01T00:00:00Z", to: "2025-02-01T00:00:00Z", price: 999),
        subscription("rx-d", "purchase", "d2", from: "2025-04-20T00:00:00Z", to: "2025-05-20T00:00:00Z", price: 999),
        // A: monthly from 10 February; the March renewal refunded and the refund reversed; April at 19.99 (expansion).
        subscription("rx-a", "purchase", "a1", from: "2025-02-10T00:00:00Z", to: "2025-03-10T00:00:00Z", price: 999),
        subscription("rx-a", "renewal", "a2", from: "2025-03-10T00:00:00Z", to: "2025-04-10T00:00:00Z", price: 999),
        refund("rx-a", "a2", at: "2025-03-20T00:00:00Z", amount: 999),
        Event(subscriber: "rx-a", type: "refund_reversal", occurredAt: "2025-03-22T00:00:00Z", data: ["transaction_id": "a2"]),
        subscription(
            "rx-a", "renewal", "a3", from: "2025-04-10T00:00:00Z", to: "2025-05-10T00:00:00Z", price: 1999, product: "pro.monthly.plus"),
        // B: yearly 119.99 from 20 February, refunded in full on 15 April (churned).
        subscription(
            "rx-b", "purchase", "b1", from: "2025-02-20T00:00:00Z", to: "2026-02-20T00:00:00Z", price: 11999, period: "P1Y",
            product: "pro.yearly"),
        refund("rx-b", "b1", at: "2025-04-15T00:00:00Z", amount: 11999),
        // C: 4.99 a month from 5 March (new), commission 15 %; 2.00 back on the April renewal, access kept.
        subscription("rx-c", "purchase", "c1", from: "2025-03-05T00:00:00Z", to: "2025-04-05T00:00:00Z", price: 499, commission: "0.15"),
        subscription("rx-c", "renewal", "c2", from: "2025-04-05T00:00:00Z", to: "2025-05-05T00:00:00Z", price: 499, commission: "0.15"),
        refund("rx-c", "c2", at: "2025-04-25T00:00:00Z", amount: 200, cut: false),
        // E: a free trial from 1 March, a lifetime purchase 19 days later (no MRR, no paid run).
        subscription("rx-e", "purchase", "e1", from: "2025-03-01T00:00:00Z", to: "2025-03-08T00:00:00Z", price: 0, offer: "trial"),
        Event(
            subscriber: "rx-e", type: "purchase", occurredAt: "2025-03-20T00:00:00Z",
            data: [
                "product_id": "pro.lifetime", "entitlements": ["pro"], "transaction_id": "e2", "kind": "lifetime", "price_minor": 4999,
                "currency": "USD", "commission_rate": "0.30",
            ]),
        // F: a trial from 15 March that never converts.
        subscription("rx-f", "purchase", "f1", from: "2025-03-15T00:00:00Z", to: "2025-03-22T00:00:00Z", price: 0, offer: "trial"),
    ]

    /// Event `i` as an append request body (production, source `web`, idempotency key `rx<i>`).
    public static func json(_ i: Int) -> JSONValue {
        let e = events[i]
        return .object([
            "subscriber_id": .string(e.subscriber), "type": .string(e.type), "occurred_at": .string(e.occurredAt), "source": "web",
            "environment": "production", "idempotency_key": .string("rx\(i)"), "data": .object(e.data),
        ])
    }

    /// The recorded streams, per subscriber (positions in append order).
    public static var streams: [String: [RecordedEvent]] {
        var result: [String: [RecordedEvent]] = [:]
        for (i, e) in events.enumerated() {
            let position = Int64(i + 1)
            let version = Int64((result[e.subscriber]?.count ?? 0) + 1)
            result[e.subscriber, default: []].append(
                RecordedEvent(
                    eventID: UUID(uuidString: String(format: "00000000-0000-0000-0000-%012d", i + 1))!, subscriberID: e.subscriber,
                    version: version, position: position, type: EventType(rawValue: e.type)!,
                    occurredAt: try! Timestamp(rfc3339: e.occurredAt), recordedAt: Timestamp(microseconds: position), source: "web",
                    environment: .production, idempotencyKey: "rx\(i)", data: e.data, metadata: [:], prevHash: RecordedEvent.genesisHash))
        }
        return result
    }

    /// Each subscriber's report facts, by subscriber id.
    public static var facts: [(subscriber: String, facts: SubscriberFacts)] {
        streams.keys.sorted().map { s in (s, SubscriberFacts.derive(events: streams[s]!, ledger: Fold.fold(streams[s]!))) }
    }
}
