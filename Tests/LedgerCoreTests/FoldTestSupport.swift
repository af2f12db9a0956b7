import Foundation
import LedgerCore

/// Builds one subscriber's recorded events for fold tests: positions in call order, ids derived from them.
struct StreamBuilder {
    var events: [RecordedEvent] = []
    var subscriber = "sub"

    static func t(_ s: String) -> Timestamp { try! Timestamp(rfc3339: s.contains("T") ? s : s + "T00:00:00Z") }

    static func id(_ n: Int) -> UUID { UUID(uuidString: String(format: "00000000-0000-0000-0000-%012d", n))! }

    @discardableResult
    mutating func add(
        _ type: EventType, _ occurred: String, _ data: [String: JSONValue], environment: LedgerEnvironment = .production
    ) -> UUID {
        let position = Int64(events.count + 1)
        let id = Self.id(Int(position))
        events.append(
            RecordedEvent(
                eventID: id, subscriberID: subscriber, version: position, position: position, type: type,
                occurredAt: Self.t(occurred), recordedAt: Timestamp(microseconds: position), source: "test",
                environment: environment, idempotencyKey: "k\(position)", data: data, metadata: [:],
                prevHash: RecordedEvent.genesisHash))
        return id
    }

    @discardableResult
    mutating func subscription(
        type: EventType = .purchase, _ txn: String, from: String, to: String, offer: String = "none",
        product: String = "pro.monthly", entitlements: [String] = ["pro"], occurred: String? = nil
    ) -> UUID {
        add(
            type, occurred ?? from,
            [
                "product_id": .string(product), "entitlements": .array(entitlements.map(JSONValue.string)),
                "transaction_id": .string(txn), "kind": "auto_renewable", "offer": .string(offer),
                "period_start": .string(Self.t(from).rfc3339), "period_end": .string(Self.t(to).rfc3339), "period": "P1M",
                "price_minor": 999, "currency": "USD",
            ])
    }

    @discardableResult
    mutating func pack(_ txn: String, at: String, duration: String, entitlements: [String] = ["pro"]) -> UUID {
        add(
            .purchase, at,
            [
                "product_id": "pro.pack", "entitlements": .array(entitlements.map(JSONValue.string)),
                "transaction_id": .string(txn), "kind": "non_renewing", "duration": .string(duration),
                "price_minor": 2999, "currency": "USD",
            ])
    }

    /// A `lifetime` or `free` purchase: a window from `at` that never ends.
    @discardableResult
    mutating func unbounded(_ kind: String, _ txn: String, at: String) -> UUID {
        add(
            .purchase, at,
            [
                "product_id": "pro.forever", "entitlements": ["pro"], "transaction_id": .string(txn), "kind": .string(kind),
                "price_minor": kind == "free" ? 0 : 9999, "currency": "USD",
            ])
    }

    @discardableResult
    mutating func refund(_ txn: String, at: String, amount: Int64 = 999, cut: Bool = true) -> UUID {
        var data: [String: JSONValue] = [
            "transaction_id": .string(txn), "amount_minor": .number(JSONNumber(amount)), "currency": "USD", "reason": "customer",
        ]
        if !cut { data["cut"] = false }
        return add(.refund, at, data)
    }

    var ledger: SubscriberLedger { Fold.fold(events) }

    func state(_ entitlement: String = "pro", at: String) -> EntitlementState? {
        ledger.entitlements(at: Self.t(at)).first { $0.entitlement == entitlement }
    }
}
