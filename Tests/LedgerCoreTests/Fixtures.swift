import LedgerCore
import Testing

/// Valid events of every type, as JSON members, for the decoder tests to break one field at a time.
enum Fixtures {
    static let occurredAt = "2026-03-01T10:00:00Z"
    static let creditEventID = "0b5e6c1a-4f2d-4c7e-9a3b-1c2d3e4f5a6b"

    static func data(_ type: EventType) -> [String: JSONValue] {
        switch type {
        case .purchase:
            let d: [String: JSONValue] = [
                "product_id": "pro.monthly",
                "entitlements": ["pro"],
                "transaction_id": "t-1",
                "original_transaction_id": "t-1",
                "kind": "auto_renewable",
                "offer": "none",
                "period_start": "2026-03-01T10:00:00Z",
                "period_end": "2026-04-01T10:00:00Z",
                "period": "P1M",
                "price_minor": 999,
                "currency": "USD",
                "commission_rate": "0.30",
            ]
            return d
        case .renewal:
            let d: [String: JSONValue] = [
                "product_id": "pro.monthly",
                "entitlements": ["pro"],
                "transaction_id": "t-2",
                "original_transaction_id": "t-1",
                "kind": "auto_renewable",
                "period_start": "2026-04-01T10:00:00Z",
                "period_end": "2026-05-01T10:00:00Z",
                "period": "P1M",
                "price_minor": 999,
                "currency": "USD",
            ]
            return d
        case .refund:
            let d: [String: JSONValue] = [
                "transaction_id": "t-1", "amount_minor": 999, "currency": "USD", "reason": "customer request",
            ]
            return d
        case .refundReversal:
            return ["transaction_id": "t-1"]
        case .cancellation:
            let d: [String: JSONValue] = ["entitlements": ["pro"], "reason": "chargeback"]
            return d
        case .credit:
            let d: [String: JSONValue] = [
                "entitlement": "pro", "duration": "P7D", "reason": "outage", "granted_by": "support@example.com",
            ]
            return d
        case .creditReversal:
            return ["credit_event_id": .string(creditEventID)]
        case .autoRenewChanged:
            let d: [String: JSONValue] = ["enabled": false, "product_id": "pro.monthly", "entitlements": ["pro"]]
            return d
        case .billingIssue:
            let d: [String: JSONValue] = [
                "product_id": "pro.monthly", "entitlements": ["pro"], "grace_until": "2026-03-17T10:00:00Z",
            ]
            return d
        case .expiration:
            let d: [String: JSONValue] = ["product_id": "pro.monthly", "entitlements": ["pro"], "reason": "billing"]
            return d
        case .storeNotice:
            let d: [String: JSONValue] = [
                "store": "apple", "kind": "consumption_request", "transaction_id": "t-1", "detail": ["reason": "UNINTENDED_PURCHASE"],
            ]
            return d
        case .transferOut:
            return ["store": "apple", "purchase_id": "t-1", "to_subscriber": "user-2", "reason": "restore"]
        case .transferIn:
            return [
                "store": "apple", "purchase_id": "t-1", "from_subscriber": "user-0", "reason": "restore",
                "windows": [
                    [
                        "entitlement": "pro", "kind": "paid", "product_id": "pro.monthly", "transaction_id": "t-1",
                        "start": "2026-03-01T10:00:00Z", "end": "2026-04-01T10:00:00Z",
                    ]
                ],
            ]
        case .merged:
            return ["into": "user-2"]
        }
    }

    /// A complete, valid event object of `type`.
    static func event(
        _ type: EventType = .purchase, data: [String: JSONValue]? = nil, key: String = "k-1", source: String = "web",
        subscriber: String = "user-42"
    ) -> [String: JSONValue] {
        [
            "subscriber_id": .string(subscriber),
            "type": .string(type.rawValue),
            "occurred_at": .string(occurredAt),
            "source": .string(source),
            "environment": "production",
            "idempotency_key": .string(key),
            "data": .object(data ?? Self.data(type)),
            "metadata": ["request_id": "req-1"],
        ]
    }

    /// `event(type)` with members of `data` set and removed.
    static func event(
        _ type: EventType, settingData set: [String: JSONValue], removingData remove: [String] = []
    ) -> [String: JSONValue] {
        var d = data(type)
        for (k, v) in set { d[k] = v }
        for k in remove { d[k] = nil }
        return event(type, data: d)
    }

    /// The validation error `EventDecoder` gives for `members`, nil if it accepts them.
    static func decodeError(_ members: [String: JSONValue], path: String = "") -> EventValidationError? {
        do {
            _ = try EventDecoder.decode(members, path: path)
            return nil
        } catch {
            return error
        }
    }

    /// The validation error `AppendRequest.decode` gives for `value`, nil if it accepts it.
    static func requestError(_ value: JSONValue) -> EventValidationError? {
        do {
            _ = try AppendRequest.decode(value)
            return nil
        } catch {
            return error
        }
    }

    static func json(_ text: String) -> JSONValue {
        do {
            return try JSONParser.parse(text)
        } catch {
            Issue.record("fixture is not JSON: \(error)")
            return .null
        }
    }

    static func number(_ text: String) -> JSONValue {
        guard let n = JSONNumber(jsonText: Substring(text)) else {
            Issue.record("fixture is not a JSON number: \(text)")
            return .null
        }
        return .number(n)
    }

    static func timestamp(_ text: String) -> Timestamp {
        do {
            return try Timestamp(rfc3339: text)
        } catch {
            Issue.record("fixture is not a timestamp: \(text): \(error)")
            return Timestamp(microseconds: 0)
        }
    }
}
