import AppleStore
import Foundation
import LedgerCore
import LedgerTestSupport
import StoreAdapters
import Testing

/// Store adapters take arbitrary JSON from the outside: random documents must map or be refused, never trap.
@Suite("Hostile input to the App Store adapters")
struct AdapterHostileInputTests {
    static func randomValue(_ rng: inout SplitMix64, depth: Int = 0) -> JSONValue {
        let keys = [
            "status", "environment", "receipt", "latest_receipt_info", "in_app", "pending_renewal_info", "transaction_id",
            "original_transaction_id", "product_id", "purchase_date", "purchase_date_ms", "expires_date", "expires_date_ms",
            "cancellation_date_ms", "is_trial_period", "auto_renew_status", "grace_period_expires_date_ms", "transactionId",
            "originalTransactionId", "productId", "purchaseDate", "expiresDate", "price", "currency", "revocationDate",
            "revocationType", "revocationPercentage", "offerType", "type", "gracePeriodExpiresDate",
        ]
        switch rng.int(0...(depth > 3 ? 3 : 6)) {
        case 0: return .null
        case 1: return .bool(rng.int(0...1) == 0)
        case 2:
            return .number(
                JSONNumber(jsonText: Substring(rng.pick(["0", "-1", "21007", "1e18", "9223372036854775807", "-9223372036854775808", "1.5"])))!)
        case 3:
            return .string(
                rng.pick([
                    "", "0", "1", "true", "NaN", "1700000000000", "99999999999999999999", "2026-03-01 00:00:00 Etc/GMT", "garbage", "Sandbox", "USD",
                ]))
        case 4: return .array((0..<rng.int(0...4)).map { _ in randomValue(&rng, depth: depth + 1) })
        default:
            var o: [String: JSONValue] = [:]
            for _ in 0..<rng.int(0...10) { o[rng.pick(keys)] = randomValue(&rng, depth: depth + 1) }
            if depth == 0, rng.int(0...1) == 0 { o["status"] = 0 }
            return .object(o)
        }
    }

    @Test("random receipts map or are refused by field", arguments: 0..<1500)
    func receipts(seed: Int) {
        var rng = SplitMix64(seed: UInt64(seed))
        let body = Self.randomValue(&rng)
        do {
            let mapping = try AppleReceiptMapper.map(body)
            for d in mapping.drafts { #expect(!d.idempotencyKey.isEmpty) }
        } catch {
            #expect(!error.field.isEmpty)
        }
    }

    @Test("random notification payloads map or are refused", arguments: 0..<1500)
    func notifications(seed: Int) {
        var rng = SplitMix64(seed: UInt64(seed))
        let types = [
            "SUBSCRIBED", "DID_RENEW", "REFUND", "REFUND_REVERSED", "REVOKE", "DID_CHANGE_RENEWAL_STATUS", "DID_FAIL_TO_RENEW", "EXPIRED",
            "GRACE_PERIOD_EXPIRED", "RENEWAL_EXTENDED", "TEST",
        ]
        let payload: [String: JSONValue] = [
            "notificationUUID": "0b6a8a1e-7b5c-4e0e-9d43-1c3f2a1b0c9d", "notificationType": .string(rng.pick(types)),
            "signedDate": Self.randomValue(&rng, depth: 3),
            "data": ["signedTransactionInfo": Self.randomValue(&rng, depth: 1), "signedRenewalInfo": Self.randomValue(&rng, depth: 1)],
        ]
        guard let n = AppleNotification(storedPayload: payload) else { return }
        if let drafts = try? AppleNotificationMapper.drafts(for: n) {
            _ = try? DraftCompletion.complete(drafts, subscriberID: "s", products: [:])
        }
    }
}
