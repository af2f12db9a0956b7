import LedgerCore

/// Valid events for tests, built through the same decoder the API uses.
public enum SampleEvents {
    public static func purchase(
        subscriber: String, key: String, source: String = "web", price: Int64 = 999,
        occurredAt: String = "2026-03-01T10:00:00Z", expectedVersion: Int64? = nil
    ) -> NewEvent {
        var members: [String: JSONValue] = [
            "subscriber_id": .string(subscriber),
            "type": "purchase",
            "occurred_at": .string(occurredAt),
            "source": .string(source),
            "environment": "production",
            "idempotency_key": .string(key),
            "data": [
                "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": .string("t-\(key)"),
                "kind": "auto_renewable", "period_start": .string(occurredAt), "period_end": "2026-12-01T10:00:00Z",
                "period": "P1M", "price_minor": .number(JSONNumber(price)), "currency": "USD", "commission_rate": "0.30",
            ],
            "metadata": ["request_id": .string("req-\(key)")],
        ]
        if let expectedVersion { members["expected_version"] = .number(JSONNumber(expectedVersion)) }
        return try! EventDecoder.decode(members, path: "")
    }

    public static func autoRenewOff(subscriber: String, key: String, expectedVersion: Int64? = nil) -> NewEvent {
        var members: [String: JSONValue] = [
            "subscriber_id": .string(subscriber),
            "type": "auto_renew_changed",
            "occurred_at": "2026-03-05T10:00:00Z",
            "source": "web",
            "environment": "production",
            "idempotency_key": .string(key),
            "data": ["enabled": false, "product_id": "pro.monthly", "entitlements": ["pro"]],
        ]
        if let expectedVersion { members["expected_version"] = .number(JSONNumber(expectedVersion)) }
        return try! EventDecoder.decode(members, path: "")
    }

    /// Any event, from its type and data (production, source `web`).
    public static func event(
        subscriber: String, type: String, key: String, occurredAt: String, data: [String: JSONValue]
    ) -> NewEvent {
        let members: [String: JSONValue] = [
            "subscriber_id": .string(subscriber), "type": .string(type), "occurred_at": .string(occurredAt),
            "source": "web", "environment": "production", "idempotency_key": .string(key), "data": .object(data),
        ]
        return try! EventDecoder.decode(members, path: "")
    }
}
