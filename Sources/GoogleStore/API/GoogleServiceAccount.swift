import Crypto
import Foundation
import LedgerCore
import StoreAdapters
import _CryptoExtras

/// A Google service account's JSON key file: the account, its RSA key, and where tokens are issued.
public struct GoogleServiceAccount: Sendable {
    public var clientEmail: String
    public var privateKeyID: String?
    public var privateKey: _RSA.Signing.PrivateKey
    public var tokenURI: String

    public init(clientEmail: String, privateKeyID: String?, privateKey: _RSA.Signing.PrivateKey, tokenURI: String) {
        self.clientEmail = clientEmail
        self.privateKeyID = privateKeyID
        self.privateKey = privateKey
        self.tokenURI = tokenURI
    }

    /// Reads Google's key file format (`type: service_account`, `client_email`, `private_key`, `token_uri`).
    public init(json bytes: [UInt8]) throws {
        guard case .object(let o)? = try? JSONParser.parse(bytes) else { throw GooglePlayError.configuration("the service account file is not JSON") }
        guard let email = o["client_email"]?.stringValue else { throw GooglePlayError.configuration("the service account file has no client_email") }
        guard let pem = o["private_key"]?.stringValue, let key = try? _RSA.Signing.PrivateKey(pemRepresentation: pem) else {
            throw GooglePlayError.configuration("the service account file has no RSA private_key in PEM")
        }
        self.init(
            clientEmail: email, privateKeyID: o["private_key_id"]?.stringValue, privateKey: key,
            tokenURI: o["token_uri"]?.stringValue ?? "https://oauth2.googleapis.com/token")
    }

    public static func load(path: String) throws -> GoogleServiceAccount {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw GooglePlayError.configuration("cannot read the service account file \(path)")
        }
        return try GoogleServiceAccount(json: Array(data))
    }

    /// The signed JWT bearer assertion (RFC 7523) for the Android Publisher scope, valid for an hour.
    public func assertion(now: Int64, scope: String = "https://www.googleapis.com/auth/androidpublisher") throws -> String {
        var header: [String: JSONValue] = ["alg": "RS256", "typ": "JWT"]
        if let privateKeyID { header["kid"] = .string(privateKeyID) }
        let claims: [String: JSONValue] = [
            "iss": .string(clientEmail), "scope": .string(scope), "aud": .string(tokenURI),
            "iat": .number(JSONNumber(now)), "exp": .number(JSONNumber(now + 3600)),
        ]
        let signingInput =
            Base64URL.encode(JSONValue.object(header).canonicalBytes()) + "."
            + Base64URL.encode(JSONValue.object(claims).canonicalBytes())
        let signature = try privateKey.signature(for: Array(signingInput.utf8), padding: .insecurePKCS1v1_5)
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }
}

/// Why a call to Google failed.
public enum GooglePlayError: Error, Sendable, CustomStringConvertible {
    /// Worth retrying later: network, timeout, 429, 5xx.
    case unavailable(String)
    /// Google refused the request (4xx other than 429): retrying will not help.
    case refused(status: Int, String)
    case configuration(String)

    public var description: String {
        switch self {
        case .unavailable(let m): "Google is unavailable: \(m)"
        case .refused(let status, let m): "Google answered \(status): \(m)"
        case .configuration(let m): m
        }
    }
}
