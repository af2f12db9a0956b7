import Crypto
import Foundation
import LedgerCore
import StoreAdapters
import SwiftASN1
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

    /// - Parameter rootsDER: trusted root certificates, DER-encoded (by default Apple Root CA - G3).
    public init(rootsDER: [[UInt8]]) throws {
        self.roots = try rootsDER.map { try Certificate(derEncoded: $0) }
        guard !roots.isEmpty else { throw AppleSignatureError("no trusted root certificate configured") }
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
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw AppleSignatureError("not a compact JWS (header.payload.signature)") }
        guard let headerBytes = Base64URL.decode(parts[0]), case .object(let header)? = try? JSONParser.parse(headerBytes) else {
            throw AppleSignatureError("the JWS header is not base64url JSON")
        }
        guard header["alg"]?.stringValue == "ES256" else { throw AppleSignatureError("the JWS algorithm must be ES256") }
        guard let x5c = header["x5c"]?.arrayValue, x5c.count == 3 else {
            throw AppleSignatureError("the JWS header has no x5c chain of three certificates (leaf, intermediate, root)")
        }
        var chain: [Certificate] = []
        for (i, entry) in x5c.enumerated() {
            guard let text = entry.stringValue, let der = Data(base64Encoded: text),
                let certificate = try? Certificate(derEncoded: Array(der))
            else { throw AppleSignatureError("x5c[\(i)] is not a base64 DER certificate") }
            chain.append(certificate)
        }
        guard let payloadBytes = Base64URL.decode(parts[1]), case .object(let payload)? = try? JSONParser.parse(payloadBytes) else {
            throw AppleSignatureError("the JWS payload is not base64url JSON")
        }

        // The signature first: a payload whose bytes were altered fails here, whatever its chain.
        guard let signature = Base64URL.decode(parts[2]), signature.count == 64,
            let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
            let key = P256.Signing.PublicKey(chain[0].publicKey)
        else { throw AppleSignatureError("the JWS signature is not an ES256 signature by the x5c leaf's P-256 key") }
        guard key.isValidSignature(ecdsa, for: Data("\(parts[0]).\(parts[1])".utf8)) else {
            throw AppleSignatureError("the JWS signature does not verify")
        }

        guard chain[0].extensions[oid: Self.leafMarkerOID] != nil else {
            throw AppleSignatureError("the signing certificate lacks Apple's App Store marker (1.2.840.113635.100.6.11.1)")
        }
        guard chain[1].extensions[oid: Self.intermediateMarkerOID] != nil else {
            throw AppleSignatureError("the intermediate certificate lacks Apple's WWDR marker (1.2.840.113635.100.6.2.1)")
        }
        let signedAt = appleTime(payload["signedDate"]) ?? now
        let validationTime = Date(timeIntervalSince1970: Double(signedAt.microseconds) / 1_000_000)
        var verifier = Verifier(rootCertificates: CertificateStore(roots)) {
            RFC5280Policy(fixedExpiryValidationTime: validationTime)
        }
        let result = await verifier.validate(leaf: chain[0], intermediates: CertificateStore([chain[1]]))
        guard case .validCertificate = result else {
            throw AppleSignatureError("the x5c chain does not lead to a trusted root certificate valid at \(signedAt)")
        }
        return payload
    }
}
