import Foundation
import StoreAdapters
import StripeStore
import Testing

@Suite("Stripe-Signature verification")
struct StripeSignatureTests {
    static let secret = "whsec_test_secret"
    static let body = Array(#"{"id":"evt_1","object":"event"}"#.utf8)
    static let t: Int64 = 1_780_000_000

    func header(_ t: Int64 = t, secret: String = secret, body: [UInt8] = body) -> String {
        "t=\(t),v1=\(StripeSignatureVerifier.signature(secret: secret, timestamp: t, body: body))"
    }

    @Test("a valid signature verifies; one changed byte, another secret or an old t do not")
    func basics() throws {
        let v = StripeSignatureVerifier(secrets: [Self.secret])
        try v.verify(header: header(), body: Self.body, now: Self.t + 10)
        var tampered = Self.body
        tampered[5] ^= 1
        #expect(throws: StripeSignatureVerifier.Failure.self) { try v.verify(header: header(), body: tampered, now: Self.t) }
        #expect(throws: StripeSignatureVerifier.Failure.self) {
            try v.verify(header: header(secret: "whsec_other"), body: Self.body, now: Self.t)
        }
        #expect(throws: StripeSignatureVerifier.Failure.self) { try v.verify(header: header(), body: Self.body, now: Self.t + 301) }
        #expect(throws: StripeSignatureVerifier.Failure.self) { try v.verify(header: header(), body: Self.body, now: Self.t - 301) }
        try v.verify(header: header(), body: Self.body, now: Self.t + 300)
        #expect(throws: StripeSignatureVerifier.Failure.self) { try v.verify(header: nil, body: Self.body, now: Self.t) }
        #expect(throws: StripeSignatureVerifier.Failure.self) {
            try StripeSignatureVerifier(secrets: []).verify(header: header(), body: Self.body, now: Self.t)
        }
    }

    @Test("the signature is HMAC-SHA256 of \"{t}.{body}\" in lower-case hex (value computed with openssl)")
    func vector() throws {
        let sig = StripeSignatureVerifier.signature(secret: "whsec_test_secret", timestamp: 1_780_000_000, body: Array("abc".utf8))
        #expect(sig == "346984ec94fb27e89201712fa7cf8fccb8594adde33e36fc5c64b7145337bd4a")
        try StripeSignatureVerifier(secrets: ["whsec_test_secret"]).verify(
            header: "t=1780000000,v1=\(sig)", body: Array("abc".utf8), now: 1_780_000_000)
    }

    @Test("rotation: any configured secret, any v1 entry")
    func rotation() throws {
        let v = StripeSignatureVerifier(secrets: ["whsec_new", Self.secret])
        try v.verify(header: header(), body: Self.body, now: Self.t)
        let both =
            "t=\(Self.t),v1=\(String(repeating: "0", count: 64)),v1=\(StripeSignatureVerifier.signature(secret: "whsec_new", timestamp: Self.t, body: Self.body))"
        try StripeSignatureVerifier(secrets: ["whsec_new"]).verify(header: both, body: Self.body, now: Self.t)
    }

    @Test("header format edge cases as Stripe's libraries read them")
    func headerFormat() throws {
        let v = StripeSignatureVerifier(secrets: [Self.secret])
        let sig = StripeSignatureVerifier.signature(secret: Self.secret, timestamp: Self.t, body: Self.body)
        // Order does not matter; v0 and unknown schemes are ignored; spaces around items are tolerated.
        try v.verify(header: "v1=\(sig),t=\(Self.t)", body: Self.body, now: Self.t)
        try v.verify(header: "t=\(Self.t),v0=deadbeef,v1=\(sig),foo=bar", body: Self.body, now: Self.t)
        try v.verify(header: "t=\(Self.t), v1=\(sig)", body: Self.body, now: Self.t)
        try v.verify(header: "t=\(Self.t),v1=\(sig.uppercased())", body: Self.body, now: Self.t)
        // A v0 signature alone is not enough (Stripe's test-mode v0 is not an HMAC of ours).
        let v0Only = "t=\(Self.t),v0=\(sig)"
        for bad in [
            "v1=\(sig)", "t=,v1=\(sig)", "t=abc,v1=\(sig)", "t=-5,v1=\(sig)", "t=\(Self.t)", v0Only, "t=\(Self.t),v1=zz",
            "t=\(Self.t),t=\(Self.t),v1=\(sig)", "garbage", "", "t=99999999999999999999,v1=\(sig)",
        ] {
            #expect(throws: StripeSignatureVerifier.Failure.self, "\(bad)") { try v.verify(header: bad, body: Self.body, now: Self.t) }
        }
        let many = "t=\(Self.t)" + String(repeating: ",v1=\(sig)", count: 17)
        #expect(throws: StripeSignatureVerifier.Failure.self) { try v.verify(header: many, body: Self.body, now: Self.t) }
        let long = "t=\(Self.t),v1=\(sig)," + String(repeating: "x", count: 5000)
        #expect(throws: StripeSignatureVerifier.Failure.self) { try v.verify(header: long, body: Self.body, now: Self.t) }
    }

    @Test("a v1 that is there but is not the body's HMAC (deadbeef) is told it did not match, not that it is missing")
    func mismatchMessage() throws {
        let v = StripeSignatureVerifier(secrets: [Self.secret])
        func reason(_ header: String) -> String? {
            do {
                try v.verify(header: header, body: Self.body, now: Self.t)
                return nil
            } catch { return error.reason }
        }
        #expect(reason("t=\(Self.t),v1=deadbeef") == "no v1 signature matches a configured secret")
        #expect(reason("t=\(Self.t),v1=\(String(repeating: "0", count: 64))") == "no v1 signature matches a configured secret")
        #expect(reason("t=\(Self.t),v0=deadbeef") == "has no v1 signature")
        #expect(reason("t=\(Self.t - 1000),v1=deadbeef")?.hasPrefix("t is outside the tolerance") == true)
    }
}
