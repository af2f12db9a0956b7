import AppleStore
import Foundation
import LedgerCore
import StoreAdapters
import Testing

/// Apple's own signed fixtures (App Store Server Library test resources, MIT: Resources/LICENSE-…).
enum AppleFixtures {
    static func text(_ name: String) throws -> String {
        let url = try #require(Bundle.module.url(forResource: "Resources/mock_signed_data/\(name)", withExtension: nil))
        return try String(contentsOf: url, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func der(_ name: String) throws -> [UInt8] {
        let url = try #require(Bundle.module.url(forResource: "Resources/certs/\(name)", withExtension: nil))
        return Array(try Data(contentsOf: url))
    }

    /// The root at the end of a fixture's own x5c (Apple's tests trust it for `testNotification`).
    static func embeddedRoot(_ name: String) throws -> [UInt8] {
        let header = try text(name).split(separator: ".")[0]
        var s = header.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        let json = try JSONParser.parse(Array(try #require(Data(base64Encoded: s))))
        let x5c = try #require(json.objectValue?["x5c"]?.arrayValue)
        let last = try #require(x5c.last?.stringValue)
        return Array(try #require(Data(base64Encoded: last)))
    }

    static let now = try! Timestamp(rfc3339: "2026-11-21T00:00:00Z")
}

@Suite("App Store JWS verification")
struct AppleJWSTests {
    @Test("Apple's signed renewal info verifies against Apple's test CA")
    func fixtureVerifiesAgainstTestCA() async throws {
        let verifier = try AppleJWSVerifier(rootsDER: [try AppleFixtures.der("testCA.der")])
        let payload = try await verifier.verify(try AppleFixtures.text("renewalInfo"), now: AppleFixtures.now)
        #expect(payload["environment"] == "Sandbox")
        #expect(payload["signedDate"] == .number(JSONNumber(1_672_956_154_000)))
    }

    @Test("Apple's test notification verifies against its chain's root and decodes")
    func testNotificationVerifies() async throws {
        let verifier = try AppleJWSVerifier(rootsDER: [try AppleFixtures.embeddedRoot("testNotification")])
        let reader = AppleNotificationReader(verifier: verifier, bundleID: "com.example")
        // Read the day after it was signed: the reader refuses payloads older than 180 days.
        let n = try await reader.read(
            signedPayload: try AppleFixtures.text("testNotification"), now: try Timestamp(rfc3339: "2023-04-13T00:00:00Z"))
        #expect(n.type == "TEST")
        #expect(n.notificationUUID == "9ad56bd2-0bc6-42e0-af24-fd996d87a1e6")
        #expect(n.environment == .sandbox)
        #expect(AppleNotificationMapper.isNoticeOnly(n))
    }

    @Test("the same fixtures fail against Apple Root CA G3 (the default)")
    func failsAgainstAppleRoot() async throws {
        let verifier = try AppleJWSVerifier(rootsDER: [try AppleJWSVerifier.appleRootG3DER()])
        for name in ["renewalInfo", "testNotification", "transactionInfo"] {
            await #expect(throws: AppleSignatureError.self, "\(name)") {
                try await verifier.verify(try AppleFixtures.text(name), now: AppleFixtures.now)
            }
        }
    }

    @Test("a tampered payload, a missing x5c, a wrong bundle id and garbage are refused")
    func refusals() async throws {
        let verifier = try AppleJWSVerifier(rootsDER: [try AppleFixtures.der("testCA.der")])
        let good = try AppleFixtures.text("renewalInfo")
        let parts = good.split(separator: ".").map(String.init)
        // Flip the payload to another (valid base64url JSON) document: the signature no longer matches.
        let forged = Data(#"{"environment":"Production","signedDate":1672956154000}"#.utf8).base64EncodedString()
            .replacingOccurrences(of: "=", with: "")
        let tampered = [parts[0], forged, parts[2]].joined(separator: ".")
        let error = await #expect(throws: AppleSignatureError.self) { try await verifier.verify(tampered, now: AppleFixtures.now) }
        #expect(error?.reason.contains("signature") == true)

        let noX5C = await #expect(throws: AppleSignatureError.self) {
            try await verifier.verify(try AppleFixtures.text("missingX5CHeaderClaim"), now: AppleFixtures.now)
        }
        #expect(noX5C?.reason.contains("x5c") == true)

        let reader = AppleNotificationReader(verifier: verifier, bundleID: "com.example")
        let wrong = await #expect(throws: AppleSignatureError.self) {
            try await reader.read(signedPayload: try AppleFixtures.text("wrongBundleId"), now: AppleFixtures.now)
        }
        #expect(wrong?.reason.contains("com.example.wrong") == true)

        for garbage in ["", "a.b", "a.b.c", "not a jws at all", String(repeating: "x.", count: 3)] {
            await #expect(throws: AppleSignatureError.self) { try await verifier.verify(garbage, now: AppleFixtures.now) }
        }
    }

    @Test("a throwaway chain with Apple's markers verifies only where its root is trusted")
    func testSigner() async throws {
        let signer = try AppleTestSigner()
        let jws = signer.sign(["hello": "world", "signedDate": 1_700_000_000_000])
        let trusting = try AppleJWSVerifier(rootsDER: [signer.rootDER])
        #expect(try await trusting.verify(jws, now: AppleFixtures.now)["hello"] == "world")
        let other = try AppleJWSVerifier(rootsDER: [try AppleTestSigner().rootDER])
        await #expect(throws: AppleSignatureError.self) { try await other.verify(jws, now: AppleFixtures.now) }
        // A signedDate outside the chain's validity fails.
        let ancient = signer.sign(["signedDate": 100_000_000_000])  // 1973
        await #expect(throws: AppleSignatureError.self) { try await trusting.verify(ancient, now: AppleFixtures.now) }
    }

    @Test("a chain validated once still has each payload's signature and time checked: a forged signature or a time past the leaf fails")
    func validatedChainStillChecked() async throws {
        let from = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01
        let until = Date(timeIntervalSince1970: 1_780_272_000)  // 2026-06-01
        let signer = try AppleTestSigner().reissuingLeaf(validFrom: from, until: until)
        let verifier = try AppleJWSVerifier(rootsDER: [signer.rootDER])
        let march = signer.sign(["n": 1, "signedDate": 1_772_323_200_000])
        #expect(try await verifier.verify(march, now: AppleFixtures.now)["n"] == 1)
        // The same chain again (now known): another payload verifies, a forged one does not.
        #expect(try await verifier.verify(signer.sign(["n": 2, "signedDate": 1_772_323_200_000]), now: AppleFixtures.now)["n"] == 2)
        var parts = march.split(separator: ".").map(String.init)
        parts[1] = Base64URL.encode(Array(#"{"n":3,"signedDate":1772323200000}"#.utf8))
        await #expect(throws: AppleSignatureError.self) { try await verifier.verify(parts.joined(separator: "."), now: AppleFixtures.now) }
        // Signed after the leaf expired (the root is still valid): refused, though the chain was validated before.
        let july = signer.sign(["n": 4, "signedDate": 1_782_864_000_000])
        await #expect(throws: AppleSignatureError.self) { try await verifier.verify(july, now: AppleFixtures.now) }
    }
}
