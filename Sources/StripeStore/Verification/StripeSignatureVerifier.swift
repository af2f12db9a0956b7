import Crypto
import Foundation
import LedgerCore

/// Verifies `Stripe-Signature` headers as Stripe specifies: HMAC-SHA256 with an endpoint secret over
/// `"{t}.{raw body}"`, hex-encoded in `v1` entries; any `v1` may match any configured secret (rotation),
/// and `t` must lie within the tolerance of now. Pure: the caller passes the clock.
public struct StripeSignatureVerifier: Sendable {
    /// Why a signature was refused (the route answers 400 `invalid_signature` and stores nothing).
    public struct Failure: Error, Sendable, Hashable, CustomStringConvertible {
        public var reason: String
        public init(_ reason: String) { self.reason = reason }
        public var description: String { "Stripe-Signature: \(reason)" }
    }

    /// Longest `Stripe-Signature` header read (docs/limits.md).
    public static let maxHeaderBytes = 4096
    /// Most `v1` entries compared (docs/limits.md).
    public static let maxSignatures = 16
    /// Stripe's libraries' default tolerance.
    public static let defaultTolerance: Int64 = 300

    /// The secrets' bytes (SymmetricKey is not Sendable: keys are made per verification).
    let keys: [[UInt8]]
    /// Seconds `t` may differ from now, either way.
    public let tolerance: Int64

    /// `secrets` are the endpoint secrets (`whsec_…`), used as given (their UTF-8 bytes are the HMAC key).
    public init(secrets: [String], tolerance: Int64 = defaultTolerance) {
        self.keys = secrets.filter { !$0.isEmpty }.map { Array($0.utf8) }
        self.tolerance = tolerance
    }

    public var isConfigured: Bool { !keys.isEmpty }

    /// What a header that names a `v1` none of whose entries is the body's HMAC is told: a `v1` too short to be
    /// an HMAC (`v1=deadbeef`) is such an entry too, not a missing one.
    static let noMatch = "no v1 signature matches a configured secret"

    /// The header's parts: one `t` and the `v1` signatures; other schemes (`v0`) and unknown keys are ignored.
    /// `v1Entries` counts every `v1` item, malformed ones too, so that a header with only malformed ones is
    /// told its signature did not match rather than that it has none.
    public static func parse(_ header: String) throws(Failure) -> (timestamp: Int64, signatures: [[UInt8]], v1Entries: Int) {
        guard header.utf8.count <= maxHeaderBytes else { throw Failure("is longer than \(maxHeaderBytes) bytes") }
        var timestamp: Int64?
        var signatures: [[UInt8]] = []
        var v1Entries = 0
        for item in header.split(separator: ",", omittingEmptySubsequences: true) {
            let pair = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pair.count == 2 else { continue }
            let key = pair[0].trimmingCharacters(in: .whitespaces)
            let value = pair[1].trimmingCharacters(in: .whitespaces)
            switch key {
            case "t":
                guard timestamp == nil else { throw Failure("has more than one t") }
                guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), value.utf8.count <= 12, let t = Int64(value)
                else { throw Failure("t is not a Unix time in seconds") }
                timestamp = t
            case "v1":
                v1Entries += 1
                // A malformed entry cannot match; it is skipped like a signature made with another secret.
                if !value.isEmpty, let bytes = Hex.decode(value), bytes.count == SHA256.byteCount {
                    guard signatures.count < maxSignatures else { throw Failure("has more than \(maxSignatures) v1 signatures") }
                    signatures.append(bytes)
                }
            default:
                continue
            }
        }
        guard let timestamp else { throw Failure("has no timestamp (t=…)") }
        guard v1Entries > 0 else { throw Failure("has no v1 signature") }
        return (timestamp, signatures, v1Entries)
    }

    /// Checks `header` against `body` (the exact bytes received) at `now` (Unix seconds).
    public func verify(header: String?, body: [UInt8], now: Int64) throws(Failure) {
        guard isConfigured else { throw Failure("no webhook secret is configured") }
        guard let header, !header.isEmpty else { throw Failure("the header is missing") }
        let (t, signatures, _) = try Self.parse(header)
        let (age, overflow) = now.subtractingReportingOverflow(t)
        guard !overflow, age <= tolerance, age >= -tolerance else {
            throw Failure("t is outside the tolerance of \(tolerance) seconds (an old or replayed delivery)")
        }
        var signed = Array("\(t).".utf8)
        signed.append(contentsOf: body)
        for secret in keys {
            let key = SymmetricKey(data: secret)
            for signature in signatures where HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: signed, using: key) {
                return
            }
        }
        throw Failure(Self.noMatch)
    }

    /// `v1` for `body` at `t` with `secret`: what Stripe sends (for tests and `tools/smoke`).
    public static func signature(secret: String, timestamp: Int64, body: [UInt8]) -> String {
        var signed = Array("\(timestamp).".utf8)
        signed.append(contentsOf: body)
        let mac = HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: Array(secret.utf8)))
        return Hex.encode(mac)
    }
}
