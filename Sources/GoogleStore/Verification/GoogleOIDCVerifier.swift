import Foundation
import LedgerCore
import StoreAdapters
import _CryptoExtras

/// Why a Pub/Sub push's OIDC token was refused (401; the push is stored nowhere).
public struct GoogleTokenError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Google's published signing keys (a JWKS document: `{"keys": [{"kid", "kty": "RSA", "n", "e", …}]}`).
public struct GoogleJWKS: Sendable {
    public var keys: [String: _RSA.Signing.PublicKey]

    public init(keys: [String: _RSA.Signing.PublicKey]) { self.keys = keys }

    /// Parses a JWKS document; keys that are not RSA signature keys are skipped.
    public init(json bytes: [UInt8]) throws(GoogleTokenError) {
        guard case .object(let o)? = try? JSONParser.parse(bytes), let list = o["keys"]?.arrayValue else {
            throw GoogleTokenError("the JWKS is not a JSON object with a keys array")
        }
        var keys: [String: _RSA.Signing.PublicKey] = [:]
        for entry in list {
            guard let k = entry.objectValue, k["kty"]?.stringValue == "RSA", let kid = k["kid"]?.stringValue,
                let n = k["n"]?.stringValue.flatMap({ Base64URL.decode(Substring($0)) }),
                let e = k["e"]?.stringValue.flatMap({ Base64URL.decode(Substring($0)) }),
                let key = try? _RSA.Signing.PublicKey(n: n, e: e)
            else { continue }
            keys[kid] = key
        }
        self.keys = keys
    }
}

/// Verifies the OIDC ID token Cloud Pub/Sub sends with a push (`Authorization: Bearer <jwt>`): RS256 signed
/// by one of Google's keys, issued by Google, for our audience, to our push service account, not expired.
public struct GoogleOIDCVerifier: Sendable {
    public static let issuers: Set<String> = ["accounts.google.com", "https://accounts.google.com"]
    /// Tolerated clock difference for `exp`, `iat` and `nbf`.
    public static let leeway: Int64 = 60
    /// Longest accepted token (Google's are about 1 KB).
    public static let maxTokenBytes = 8192

    public var audience: String
    public var serviceAccountEmail: String

    public init(audience: String, serviceAccountEmail: String) {
        self.audience = audience
        self.serviceAccountEmail = serviceAccountEmail
    }

    /// The token's key id (to find or refresh the key), without verifying anything.
    public static func keyID(of token: String) -> String? {
        guard let dot = token.firstIndex(of: "."), let bytes = Base64URL.decode(token[..<dot]),
            case .object(let header)? = try? JSONParser.parse(bytes)
        else { return nil }
        return header["kid"]?.stringValue
    }

    /// The verified claims; `now` in seconds since 1970.
    public func verify(_ token: String, keys: GoogleJWKS, now: Int64) throws(GoogleTokenError) -> [String: JSONValue] {
        guard token.utf8.count <= Self.maxTokenBytes else { throw GoogleTokenError("the token is longer than \(Self.maxTokenBytes) bytes") }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(parts[0]), let claimBytes = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2]),
            case .object(let header)? = try? JSONParser.parse(headerBytes),
            case .object(let claims)? = try? JSONParser.parse(claimBytes)
        else { throw GoogleTokenError("the token is not a JWT") }
        guard header["alg"]?.stringValue == "RS256" else { throw GoogleTokenError("the token is not signed with RS256") }
        guard let kid = header["kid"]?.stringValue, let key = keys.keys[kid] else {
            throw GoogleTokenError("the token's key is not one of Google's")
        }
        let signed = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard key.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: signed, padding: .insecurePKCS1v1_5) else {
            throw GoogleTokenError("the token's signature is not valid")
        }
        guard let iss = claims["iss"]?.stringValue, Self.issuers.contains(iss) else { throw GoogleTokenError("the token's issuer is not Google") }
        let audiences: [String] = claims["aud"]?.stringValue.map { [$0] } ?? claims["aud"]?.arrayValue?.compactMap(\.stringValue) ?? []
        guard audiences.contains(audience) else { throw GoogleTokenError("the token's audience is not this endpoint's") }
        guard claims["email"]?.stringValue == serviceAccountEmail else {
            throw GoogleTokenError("the token is not for the configured push service account")
        }
        guard claims["email_verified"]?.boolValue == true else { throw GoogleTokenError("the token's email is not verified") }
        guard let exp = claims["exp"]?.numberValue?.int64Value else { throw GoogleTokenError("the token has no exp") }
        guard exp > now - Self.leeway else { throw GoogleTokenError("the token has expired") }
        if let iat = claims["iat"]?.numberValue?.int64Value, iat > now + Self.leeway {
            throw GoogleTokenError("the token is issued in the future")
        }
        if let nbf = claims["nbf"]?.numberValue?.int64Value, nbf > now + Self.leeway {
            throw GoogleTokenError("the token is not valid yet")
        }
        return claims
    }
}
