import Crypto
import Foundation
import LedgerCore
import StoreAdapters
import SwiftASN1
import X509

/// Signs App Store payloads with a throwaway CA → intermediate → leaf chain that carries Apple's marker
/// extensions, so tests and local trials can post real, verifiable notifications of every type.
///
/// Never trusted by default: a server verifies them only when started with this chain's root as an
/// `--apple-root-cert`.
public struct AppleTestSigner: Sendable {
    public let rootDER: [UInt8]
    public let intermediateDER: [UInt8]
    public let leafDER: [UInt8]
    /// The leaf's private key, raw (CryptoKit keys are not `Sendable`).
    let leafKeyRaw: [UInt8]
    /// The intermediate's private key, raw, so that a leaf with other dates can be issued under the same root
    /// (nil for folders saved before it was kept).
    let intermediateKeyRaw: [UInt8]?
    var leafKey: P256.Signing.PrivateKey { try! P256.Signing.PrivateKey(rawRepresentation: leafKeyRaw) }

    /// A fresh chain valid from 2000 to 2099; the leaf alone may be given other dates (an expired signer).
    public init(leafValidFrom: Date? = nil, leafValidUntil: Date? = nil) throws {
        let rootKey = P256.Signing.PrivateKey()
        let intermediateKey = P256.Signing.PrivateKey()
        let leafKey = P256.Signing.PrivateKey()
        let from = Date(timeIntervalSince1970: 946_684_800)  // 2000-01-01
        let until = Date(timeIntervalSince1970: 4_102_444_800)  // 2100-01-01
        let rootName = try DistinguishedName { CommonName("subledger test root") }
        let intermediateName = try DistinguishedName { CommonName("subledger test intermediate") }
        let leafName = try DistinguishedName { CommonName("subledger test App Store signer") }
        let root = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(rootKey.publicKey), notValidBefore: from,
            notValidAfter: until, issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(rootKey))
        let intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(intermediateKey.publicKey), notValidBefore: from,
            notValidAfter: until, issuer: rootName, subject: intermediateName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                Certificate.Extension(oid: AppleJWSVerifier.intermediateMarkerOID, critical: false, value: [0x05, 0x00])
            },
            issuerPrivateKey: .init(rootKey))
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey), notValidBefore: leafValidFrom ?? from,
            notValidAfter: leafValidUntil ?? until, issuer: intermediateName, subject: leafName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                Certificate.Extension(oid: AppleJWSVerifier.leafMarkerOID, critical: false, value: [0x05, 0x00])
            },
            issuerPrivateKey: .init(intermediateKey))
        self.init(root: root, intermediate: intermediate, leaf: leaf, leafKey: leafKey, intermediateKey: intermediateKey)
    }

    init(
        root: Certificate, intermediate: Certificate, leaf: Certificate, leafKey: P256.Signing.PrivateKey,
        intermediateKey: P256.Signing.PrivateKey?
    ) {
        var serializer = DER.Serializer()
        func der(_ c: Certificate) -> [UInt8] {
            serializer = DER.Serializer()
            try! serializer.serialize(c)
            return serializer.serializedBytes
        }
        self.rootDER = der(root)
        self.intermediateDER = der(intermediate)
        self.leafDER = der(leaf)
        self.leafKeyRaw = Array(leafKey.rawRepresentation)
        self.intermediateKeyRaw = intermediateKey.map { Array($0.rawRepresentation) }
    }

    /// The same root and intermediate with a new leaf valid only from `from` until `until` (an expired or
    /// not-yet-valid signer, to try the server's date checks).
    public func reissuingLeaf(validFrom from: Date, until: Date) throws -> AppleTestSigner {
        guard let raw = intermediateKeyRaw else {
            throw AppleSignatureError("this test CA folder has no intermediate key; create a new one")
        }
        let intermediateKey = try P256.Signing.PrivateKey(rawRepresentation: raw)
        let intermediate = try Certificate(derEncoded: intermediateDER)
        let leafKey = P256.Signing.PrivateKey()
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey), notValidBefore: from,
            notValidAfter: until, issuer: intermediate.subject,
            subject: try DistinguishedName { CommonName("subledger test App Store signer (reissued)") },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                Certificate.Extension(oid: AppleJWSVerifier.leafMarkerOID, critical: false, value: [0x05, 0x00])
            },
            issuerPrivateKey: .init(intermediateKey))
        return AppleTestSigner(
            root: try Certificate(derEncoded: rootDER), intermediate: intermediate, leaf: leaf, leafKey: leafKey,
            intermediateKey: intermediateKey)
    }

    /// Saves the chain and the leaf key to `directory` (root.der, intermediate.der, leaf.der, leaf-key.raw).
    public func save(to directory: URL) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try Data(rootDER).write(to: directory.appendingPathComponent("root.der"))
        try Data(intermediateDER).write(to: directory.appendingPathComponent("intermediate.der"))
        try Data(leafDER).write(to: directory.appendingPathComponent("leaf.der"))
        try leafKey.rawRepresentation.write(to: directory.appendingPathComponent("leaf-key.raw"))
        if let intermediateKeyRaw { try Data(intermediateKeyRaw).write(to: directory.appendingPathComponent("intermediate-key.raw")) }
    }

    /// Loads a chain saved by `save(to:)`.
    public init(directory: URL) throws {
        func read(_ name: String) throws -> [UInt8] { Array(try Data(contentsOf: directory.appendingPathComponent(name))) }
        self.rootDER = try read("root.der")
        self.intermediateDER = try read("intermediate.der")
        self.leafDER = try read("leaf.der")
        self.leafKeyRaw = Array(try P256.Signing.PrivateKey(rawRepresentation: try read("leaf-key.raw")).rawRepresentation)
        self.intermediateKeyRaw = try? read("intermediate-key.raw")
    }

    /// A compact JWS of `payload`, ES256, with the chain in `x5c`.
    public func sign(_ payload: JSONValue) -> String {
        let header: JSONValue = [
            "alg": "ES256", "typ": "JWT",
            "x5c": .array([leafDER, intermediateDER, rootDER].map { .string(Data($0).base64EncodedString()) }),
        ]
        let input = Base64URL.encode(header.canonicalBytes()) + "." + Base64URL.encode(payload.canonicalBytes())
        let signature = try! leafKey.signature(for: Data(input.utf8))
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }

    /// A signed notification (`{"signedPayload": …}` body) with signed transaction and renewal info.
    public func notificationBody(
        type: String, subtype: String? = nil, uuid: String = UUID().lowercasedString, signedDate: Timestamp,
        bundleID: String = "com.example.app", environment: String = "Production",
        transaction: [String: JSONValue]? = nil, renewal: [String: JSONValue]? = nil
    ) -> JSONValue {
        var data: [String: JSONValue] = ["bundleId": .string(bundleID), "environment": .string(environment), "appAppleId": 1234]
        if var t = transaction {
            t["bundleId"] = t["bundleId"] ?? .string(bundleID)
            t["environment"] = t["environment"] ?? .string(environment)
            t["signedDate"] = .number(JSONNumber(signedDate.microseconds / 1000))
            data["signedTransactionInfo"] = .string(sign(.object(t)))
        }
        if var r = renewal {
            r["environment"] = r["environment"] ?? .string(environment)
            r["signedDate"] = .number(JSONNumber(signedDate.microseconds / 1000))
            data["signedRenewalInfo"] = .string(sign(.object(r)))
        }
        var payload: [String: JSONValue] = [
            "notificationType": .string(type), "notificationUUID": .string(uuid), "version": "2.0",
            "signedDate": .number(JSONNumber(signedDate.microseconds / 1000)), "data": .object(data),
        ]
        if let subtype { payload["subtype"] = .string(subtype) }
        return ["signedPayload": .string(sign(.object(payload)))]
    }
}
