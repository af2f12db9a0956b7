import Crypto
import Foundation

/// A webhook signing secret in the Standard Webhooks form `whsec_<base64 of the key>`.
public struct WebhookSecret: Sendable, Hashable {
    public static let prefix = "whsec_"
    /// Bytes of a generated key: 256 bits, the HMAC-SHA256 block's worth of entropy.
    public static let generatedKeyBytes = 32

    public let key: [UInt8]

    public init(key: [UInt8]) {
        self.key = key
    }

    /// Parses `whsec_<base64>` (the prefix is optional, as in the specification's libraries); nil if the
    /// base64 is malformed or the key is empty.
    public init?(_ text: String) {
        let body = text.hasPrefix(Self.prefix) ? String(text.dropFirst(Self.prefix.count)) : text
        guard let data = Data(base64Encoded: body), !data.isEmpty else { return nil }
        self.key = Array(data)
    }

    /// A new random secret. The generator is a parameter so that LedgerCore never reaches for entropy itself.
    public static func generate(using generator: inout some RandomNumberGenerator) -> WebhookSecret {
        WebhookSecret(key: (0..<generatedKeyBytes).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }

    public var text: String { Self.prefix + Data(key).base64EncodedString() }
}

/// Signatures of the Standard Webhooks specification: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`,
/// space-separated when several secrets sign (during a rotation).
public enum WebhookSignature {
    /// The `webhook-signature` header value for a message signed by every secret, in the order given.
    public static func header(id: String, timestamp: Int64, body: some Collection<UInt8>, secrets: [WebhookSecret]) -> String {
        secrets.map { "v1," + signature(id: id, timestamp: timestamp, body: body, secret: $0) }.joined(separator: " ")
    }

    /// The base64 HMAC-SHA256 of `{id}.{timestamp}.{body}` under `secret`.
    public static func signature(id: String, timestamp: Int64, body: some Collection<UInt8>, secret: WebhookSecret) -> String {
        var mac = HMAC<SHA256>(key: SymmetricKey(data: secret.key))
        mac.update(data: Array("\(id).\(timestamp).".utf8))
        mac.update(data: Array(body))
        return Data(mac.finalize()).base64EncodedString()
    }

    /// Whether `header` carries a `v1` signature of the message under `secret` (compared in constant time).
    /// The ledger only signs; this is the receiver's side, for tests and tools.
    public static func verify(header: String, id: String, timestamp: Int64, body: some Collection<UInt8>, secret: WebhookSecret) -> Bool {
        let expected = Array(signature(id: id, timestamp: timestamp, body: body, secret: secret).utf8)
        return header.split(separator: " ").contains { part in
            guard part.hasPrefix("v1,") else { return false }
            let given = Array(part.dropFirst(3).utf8)
            guard given.count == expected.count else { return false }
            return zip(given, expected).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
        }
    }
}
