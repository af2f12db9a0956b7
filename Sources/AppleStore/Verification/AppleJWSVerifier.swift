import Crypto
import Foundation
import LedgerCore
import StoreAdapters
import SwiftASN1
import Synchronization
@_spi(FixedExpiryValidationTime) import X509

/// Why a signed App Store payload was refused.
public struct AppleSignatureError: Error, Sendable, Hashable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// Verifies App Store JWS payloads (`signedPayload`, `signedTransactionInfo`, `signedRenewalInfo`):
/// ES256 over `header.payload`, signed by the `x5c` leaf, whose chain (leaf → intermediate → a trusted
/// root) is valid at the payload's `signedDate` and carries Apple's marker extensions.
///
/// Built on swift-certificates' `Verifier` (RFC 5280 path validation) rather than hand-rolled chain checks.
public struct AppleJWSVerifier: Sendable {
    /// Marks a certificate Apple uses to sign App Store payloads.
    public static let leafMarkerOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    /// Marks Apple's WWDR intermediate that issues those leaves.
    public static let intermediateMarkerOID: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]

    let roots: [Certificate]
    let validated = ValidatedChains()

    /// - Parameter rootsDER: trusted root certificates, DER-encoded (by default Apple Root CA - G3).
    public init(rootsDER: [[UInt8]]) throws {
        self.roots = try rootsDER.map { try Certificate(derEncoded: $0) }
        guard !roots.isEmpty else { throw AppleSignatureError("no trusted root certificate configured") }
    }

    /// Chains this verifier has validated, by their `x5c` text, with the times their path is valid at. Apple signs
    /// every payload with the same few chains, and each notification carries three JWS: the path validation
    /// (certificate parsing, RFC 5280 checks, two ECDSA verifications) runs once per chain, not three times per
    /// notification. A hit still checks the payload's own time against the path's validity, and its signature.
    final class ValidatedChains: Sendable {
        struct Entry: Sendable {
            /// The leaf's P-256 key (x9.63), which signs the payloads.
            var leafKey: [UInt8]
            /// The validated path's common validity (every certificate's, root included).
            var notBefore: Date
            var notAfter: Date
        }

        /// Enough for Apple's chains in production and sandbox across a key rotation; cleared when full.
        static let capacity = 32
        private let entries = Mutex<[String: Entry]>([:])

        func entry(_ x5c: String, at time: Date) -> Entry? {
            guard let e = entries.withLock({ $0[x5c] }), e.notBefore <= time, time <= e.notAfter else { return nil }
            return e
        }

        func add(_ x5c: String, _ entry: Entry) {
            entries.withLock { e in
                if e.count >= Self.capacity { e.removeAll() }
                e[x5c] = entry
            }
        }
    }

    /// Apple Root CA - G3, shipped with the ledger.
    public static func appleRootG3DER() throws -> [UInt8] {
        guard let url = Bundle.module.url(forResource: "AppleRootCA-G3", withExtension: "cer") else {
            throw AppleSignatureError("Apple Root CA - G3 is missing from the ledger's resources")
        }
        return Array(try Data(contentsOf: url))
    }

    /// Verifies `jws` and returns its payload. `now` is used only when the payload has no `signedDate`.
    public func verify(_ jws: String, now: Timestamp) async throws(AppleSignatureError) -> [String: JSONValue] {
        let parts = jws.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw AppleSignatureError("not a compact JWS (header.payload.signature)") }
        guard let headerBytes = Base64URL.decode(Substring(parts[0])), case .object(let header)? = try? JSONParser.parse(headerBytes) else {
            throw AppleSignatureError("the JWS header is not base64url JSON")
        }
        guard header["alg"]?.stringValue == "ES256" else { throw AppleSignatureError("the JWS algorithm must be ES256") }
        guard let x5c = header["x5c"]?.arrayValue, x5c.count == 3 else {
            throw AppleSignatureError("the JWS header has no x5c chain of three certificates (leaf, intermediate, root)")
        }
        guard let payloadBytes = Base64URL.decode(Substring(parts[1])), case .object(let payload)? = try? JSONParser.parse(payloadBytes) else {
            throw AppleSignatureError("the JWS payload is not base64url JSON")
        }
        let signedAt = appleTime(payload["signedDate"]) ?? now
        let validationTime = Date(timeIntervalSince1970: Double(signedAt.microseconds) / 1_000_000)
        let chainKey = x5c.compactMap(\.stringValue).joined(separator: ".")
        let leafKey: P256.Signing.PublicKey
        let checkedChain: [Certificate]?
        if let known = validated.entry(chainKey, at: validationTime), let key = try? P256.Signing.PublicKey(x963Representation: known.leafKey) {
            leafKey = key
            checkedChain = nil
        } else {
            var chain: [Certificate] = []
            for (i, entry) in x5c.enumerated() {
                guard let text = entry.stringValue, let der = Data(base64Encoded: text),
                    let certificate = try? Certificate(derEncoded: Array(der))
                else { throw AppleSignatureError("x5c[\(i)] is not a base64 DER certificate") }
                chain.append(certificate)
            }
            guard let key = P256.Signing.PublicKey(chain[0].publicKey) else {
                throw AppleSignatureError("the JWS signature is not an ES256 signature by the x5c leaf's P-256 key")
            }
            leafKey = key
            checkedChain = chain
        }

        // The signature first: a payload whose bytes were altered fails here, whatever its chain.
        guard let signature = Base64URL.decode(Substring(parts[2])), signature.count == 64,
            let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature)
        else { throw AppleSignatureError("the JWS signature is not an ES256 signature by the x5c leaf's P-256 key") }
        let signingInput = jws.utf8[jws.utf8.startIndex..<parts[1].endIndex]
        guard leafKey.isValidSignature(ecdsa, for: Data(signingInput)) else {
            throw AppleSignatureError("the JWS signature does not verify")
        }
        guard let chain = checkedChain else { return payload }

        guard chain[0].extensions[oid: Self.leafMarkerOID] != nil else {
            throw AppleSignatureError("the signing certificate lacks Apple's App Store marker (1.2.840.113635.100.6.11.1)")
        }
        guard chain[1].extensions[oid: Self.intermediateMarkerOID] != nil else {
            throw AppleSignatureError("the intermediate certificate lacks Apple's WWDR marker (1.2.840.113635.100.6.2.1)")
        }
        var verifier = Verifier(rootCertificates: CertificateStore(roots)) {
            RFC5280Policy(fixedExpiryValidationTime: validationTime)
        }
        let result = await verifier.validate(leaf: chain[0], intermediates: CertificateStore([chain[1]]))
        guard case .validCertificate(let path) = result else {
            throw AppleSignatureError("the x5c chain does not lead to a trusted root certificate valid at \(signedAt)")
        }
        validated.add(
            chainKey,
            ValidatedChains.Entry(
                leafKey: leafKey.x963Representation.map { $0 },
                notBefore: path.map(\.notValidBefore).max() ?? validationTime,
                notAfter: path.map(\.notValidAfter).min() ?? validationTime))
        return payload
    }
}
