import AppleStore
import Foundation
import LedgerCore
import StoreAdapters
import Testing

/// Issue 13 item 6: a payload cannot pick the `signedDate` at which its chain is validated.
@Suite("App Store signedDate checks")
struct AppleSignedDateTests {
    static func t(_ s: String) -> Timestamp { try! Timestamp(rfc3339: s) }
    static func date(_ s: String) -> Date { Date(timeIntervalSince1970: Double(t(s).microseconds) / 1_000_000) }

    let signer: AppleTestSigner
    let reader: AppleNotificationReader

    init() throws {
        signer = try AppleTestSigner()
        reader = AppleNotificationReader(verifier: try AppleJWSVerifier(rootsDER: [signer.rootDER]), bundleID: "com.example.app")
    }

    func body(_ signer: AppleTestSigner, signed: String, purchased: String) -> String {
        let transaction: [String: JSONValue] = [
            "transactionId": "1", "originalTransactionId": "1", "productId": "pro.monthly",
            "purchaseDate": .number(JSONNumber(Self.t(purchased).microseconds / 1000)), "type": "Non-Consumable",
        ]
        return signer.notificationBody(type: "ONE_TIME_CHARGE", signedDate: Self.t(signed), transaction: transaction)
            .objectValue!["signedPayload"]!.stringValue!
    }

    @Test("an expired leaf backdating its signedDate into its validity is refused")
    func expiredLeafBackdated() async throws {
        let expired = try signer.reissuingLeaf(validFrom: Self.date("2020-01-01T00:00:00Z"), until: Self.date("2021-01-01T00:00:00Z"))
        let jws = body(expired, signed: "2020-06-01T00:00:00Z", purchased: "2026-11-01T00:00:00Z")
        let now = Self.t("2026-11-23T00:00:00Z")
        let error = await #expect(throws: AppleSignatureError.self) { try await reader.read(signedPayload: jws, now: now) }
        #expect(error != nil)
        // Even read "in 2020", the purchase it carries is dated after the signature.
        let then = await #expect(throws: AppleSignatureError.self) {
            try await reader.read(signedPayload: jws, now: Self.t("2020-06-02T00:00:00Z"))
        }
        #expect(then?.reason.contains("purchaseDate") == true)
    }

    @Test("future, too old, and earlier than the inner payload are refused; a fresh one is read")
    func dates() async throws {
        let now = Self.t("2026-11-23T12:00:00Z")
        let future = await #expect(throws: AppleSignatureError.self) {
            try await reader.read(signedPayload: body(signer, signed: "2026-11-23T12:10:00Z", purchased: "2026-11-23T11:00:00Z"), now: now)
        }
        #expect(future?.reason.contains("future") == true)
        let old = await #expect(throws: AppleSignatureError.self) {
            try await reader.read(signedPayload: body(signer, signed: "2026-05-01T00:00:00Z", purchased: "2026-04-30T00:00:00Z"), now: now)
        }
        #expect(old?.reason.contains("older") == true)
        let early = await #expect(throws: AppleSignatureError.self) {
            try await reader.read(signedPayload: body(signer, signed: "2026-11-20T00:00:00Z", purchased: "2026-11-21T00:00:00Z"), now: now)
        }
        #expect(early?.reason.contains("purchaseDate") == true)
        let fine = try await reader.read(
            signedPayload: body(signer, signed: "2026-11-23T11:59:00Z", purchased: "2026-11-23T11:00:00Z"), now: now)
        #expect(fine.type == "ONE_TIME_CHARGE")
        // Within the clock skew of five minutes.
        _ = try await reader.read(signedPayload: body(signer, signed: "2026-11-23T12:04:00Z", purchased: "2026-11-23T11:00:00Z"), now: now)
    }
}
