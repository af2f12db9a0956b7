import Crypto
import Foundation
import LedgerCore
import StoreAdapters

/// The in-app purchase key from App Store Connect, which signs every App Store Server API request.
///
/// Apple's rule: an ES256 JWT whose header names the key (`kid`) and whose claims are the issuer id, the
/// issue and expiry times (at most 60 minutes apart), the audience `appstoreconnect-v1` and the app's bundle id.
public struct AppStoreAPICredentials: Sendable {
    public var issuerID: String
    public var keyID: String
    public var bundleID: String
    /// The key's raw scalar (the Crypto key type is not `Sendable`).
    let keyRaw: Data
    var key: P256.Signing.PrivateKey { get throws { try P256.Signing.PrivateKey(rawRepresentation: keyRaw) } }

    public struct Invalid: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    public init(issuerID: String, keyID: String, bundleID: String, privateKey: P256.Signing.PrivateKey) {
        self.issuerID = issuerID
        self.keyID = keyID
        self.bundleID = bundleID
        self.keyRaw = privateKey.rawRepresentation
    }

    /// From the `.p8` file App Store Connect downloads (a PEM PKCS #8 P-256 key).
    public init(issuerID: String, keyID: String, bundleID: String, privateKeyPEM: String) throws {
        let key: P256.Signing.PrivateKey
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: privateKeyPEM)
        } catch {
            throw Invalid(description: "the private key is not a PEM P-256 key (App Store Connect's .p8 file): \(error)")
        }
        for (name, value) in [("issuer id", issuerID), ("key id", keyID), ("bundle id", bundleID)] where value.isEmpty {
            throw Invalid(description: "the \(name) is empty")
        }
        self.init(issuerID: issuerID, keyID: keyID, bundleID: bundleID, privateKey: key)
    }

    /// Longest lifetime Apple accepts for a token.
    public static let maxLifetime: Duration = .seconds(3600)

    /// A signed request token, valid from `now` for `lifetime` (capped at 60 minutes).
    public func token(now: Date, lifetime: Duration = .seconds(1200)) throws -> String {
        let iat = Int64(now.timeIntervalSince1970.rounded(.down))
        let exp = iat + min(lifetime, Self.maxLifetime).components.seconds
        let header: JSONValue = .object(["alg": "ES256", "kid": .string(keyID), "typ": "JWT"])
        let claims: JSONValue = .object([
            "iss": .string(issuerID), "iat": .number(JSONNumber(iat)), "exp": .number(JSONNumber(exp)),
            "aud": "appstoreconnect-v1", "bid": .string(bundleID),
        ])
        let signingInput = Base64URL.encode(Array(header.canonicalString().utf8)) + "." + Base64URL.encode(Array(claims.canonicalString().utf8))
        // JOSE ES256 signatures are the raw r ‖ s (64 bytes), not DER.
        let signature = try key.signature(for: Data(signingInput.utf8)).rawRepresentation
        return signingInput + "." + Base64URL.encode(Array(signature))
    }
}
