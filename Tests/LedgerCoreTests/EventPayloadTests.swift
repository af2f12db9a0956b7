import Foundation
import LedgerCore
import Testing

/// The validator's typed result: each event type's `data` as the fold and the report facts read it.
@Suite("Typed event payloads")
struct EventPayloadTests {
    static let t0 = try! Timestamp(rfc3339: "2026-03-01T10:00:00Z")

    static func payload(_ type: EventType, _ data: [String: JSONValue]) throws -> EventPayload {
        try EventDataValidator.payload(type: type, data: data, occurredAt: t0, path: "data")
    }

    @Test("a purchase is a transaction with its kind, offer, period and price")
    func transaction() throws {
        let p = try Self.payload(
            .purchase,
            [
                "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": "t1", "kind": "auto_renewable",
                "offer": "trial", "period_start": "2026-03-01T10:00:00Z", "period_end": "2026-03-08T10:00:00Z", "period": "P1M",
                "price_minor": 0, "currency": "USD",
            ])
        guard case .transaction(let t) = p else {
            Issue.record("not a transaction: \(p)")
            return
        }
        #expect(t.offer == .trial && t.kind == .autoRenewable && t.windowKind == .trial && !t.isPaid)
        #expect(t.periodEnd == (try Timestamp(rfc3339: "2026-03-08T10:00:00Z")))
        #expect(p.entitlements == ["pro"])
    }

    @Test("a refund that keeps access, a credit by duration, an expiration's reason, a credit reversal's id")
    func others() throws {
        let refund = try Self.payload(.refund, ["transaction_id": "t1", "amount_minor": 300, "currency": "EUR", "cut": false])
        guard case .refund(let r) = refund else {
            Issue.record("not a refund: \(refund)")
            return
        }
        #expect(r.transactionID == "t1" && r.amountMinor == 300 && r.currency == "EUR" && r.reason == nil && !r.cut)
        let credit = try Self.payload(.credit, ["entitlement": "pro", "duration": "P7D", "reason": "goodwill", "granted_by": "ops"])
        guard case .credit(let c) = credit else {
            Issue.record("not a credit: \(credit)")
            return
        }
        #expect(c.entitlement == "pro" && c.duration == ISODuration("P7D") && c.windowStart == nil)
        #expect(credit.entitlements == ["pro"])
        let expiration = try Self.payload(
            .expiration, ["product_id": "pro.monthly", "entitlements": ["pro"], "reason": "billing", "catalog_revision": 1])
        guard case .expiration(let x) = expiration else {
            Issue.record("not an expiration: \(expiration)")
            return
        }
        #expect(x.entitlements == ["pro"] && x.reason == "billing")
        let id = UUID()
        let reversal = try Self.payload(.creditReversal, ["credit_event_id": .string(id.uuidString.lowercased())])
        guard case .creditReversal(let v) = reversal else {
            Issue.record("not a credit reversal: \(reversal)")
            return
        }
        #expect(v.creditEventID == id)
    }

    @Test("data the validator refuses yields no payload: the error names the field")
    func refused() {
        #expect(throws: EventValidationError.self) { try Self.payload(.refund, ["transaction_id": "t1"]) }
    }
}
