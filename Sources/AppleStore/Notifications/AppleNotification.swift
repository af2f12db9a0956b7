import Foundation
import LedgerCore

/// A verified App Store Server Notification V2 with its nested signed payloads decoded.
public struct AppleNotification: Sendable, Hashable {
    public var notificationUUID: String
    public var type: String
    public var subtype: String?
    public var signedDate: Timestamp?
    public var environment: LedgerEnvironment
    public var bundleID: String?
    /// The decoded `signedTransactionInfo`, if the notification has one.
    public var transaction: [String: JSONValue]?
    /// The decoded `signedRenewalInfo`, if the notification has one.
    public var renewal: [String: JSONValue]?
    /// The notification payload as received (nested JWS strings replaced by their decoded payloads).
    public var payload: [String: JSONValue]

    public var originalTransactionID: String? {
        transaction?["originalTransactionId"]?.stringValue ?? renewal?["originalTransactionId"]?.stringValue
    }

    /// The app's own account token, which the ledger takes as the subscriber id when present.
    public var appAccountToken: String? {
        (transaction?["appAccountToken"]?.stringValue ?? renewal?["appAccountToken"]?.stringValue).map { $0.lowercased() }
    }
}

/// An App Store time (milliseconds since 1970) within the ledger's range, or nil (hostile input must not
/// overflow the microsecond count).
func appleTime(_ value: JSONValue?) -> Timestamp? {
    guard let ms = value?.numberValue?.int64Value else { return nil }
    let (us, overflow) = ms.multipliedReportingOverflow(by: 1000)
    guard !overflow else { return nil }
    let t = Timestamp(microseconds: us)
    return t >= .minimum && t <= .maximum ? t : nil
}

/// `Sandbox`, `Xcode` and `LocalTesting` are all sandbox: they never count in revenue or churn.
func appleEnvironment(_ value: String?) -> LedgerEnvironment {
    value == "Production" ? .production : .sandbox
}

/// Reads and verifies a `signedPayload` and its nested signed transaction and renewal info.
///
/// The chain is validated at the payload's own `signedDate`, as Apple's library does, so a payload may
/// not choose that date freely: it must not be in the future (beyond `clockSkew`), older than `maxAge`, or
/// earlier than the transaction it carries (its `purchaseDate`, or the `signedDate` of a nested JWS).
/// Otherwise a leaked, long-expired signing key could sign new purchases backdated into its validity.
public struct AppleNotificationReader: Sendable {
    let verifier: AppleJWSVerifier
    /// When set, a payload for another app is refused.
    let bundleID: String?
    /// Oldest `signedDate` accepted; Apple's notification history reaches 180 days back.
    let maxAge: Duration
    /// How far in the future a `signedDate` may be (clocks differ).
    let clockSkew: Duration

    public static let defaultMaxAge: Duration = .seconds(180 * 86_400)

    public init(verifier: AppleJWSVerifier, bundleID: String?, maxAge: Duration = defaultMaxAge, clockSkew: Duration = .seconds(300)) {
        self.verifier = verifier
        self.bundleID = bundleID
        self.maxAge = maxAge
        self.clockSkew = clockSkew
    }

    /// Refuses a `signedDate` the signer could have chosen to pass an expired certificate (see the type).
    func checkSignedDate(_ signed: Timestamp?, of what: String, now: Timestamp, notBefore: [(String, Timestamp?)]) throws(AppleSignatureError) {
        guard let signed else { throw AppleSignatureError("the \(what) has no signedDate") }
        let skew = clockSkew.components.seconds * 1_000_000
        let age = maxAge.components.seconds * 1_000_000
        if signed.microseconds > now.microseconds + skew {
            throw AppleSignatureError("the \(what)'s signedDate \(signed.rfc3339) is in the future")
        }
        if signed.microseconds < now.microseconds - age {
            throw AppleSignatureError(
                "the \(what)'s signedDate \(signed.rfc3339) is older than the accepted \(maxAge.components.seconds / 86_400) days")
        }
        for case (let name, let t?) in notBefore where t > signed {
            throw AppleSignatureError("the \(what) is signed at \(signed.rfc3339), before its \(name) \(t.rfc3339)")
        }
    }

    public func read(signedPayload: String, now: Timestamp) async throws(AppleSignatureError) -> AppleNotification {
        var payload = try await verifier.verify(signedPayload, now: now)
        guard let uuid = payload["notificationUUID"]?.stringValue, !uuid.isEmpty else {
            throw AppleSignatureError("the notification has no notificationUUID")
        }
        guard let type = payload["notificationType"]?.stringValue else {
            throw AppleSignatureError("the notification has no notificationType")
        }
        var data = payload["data"]?.objectValue ?? [:]
        let bundle = data["bundleId"]?.stringValue ?? payload["summary"]?.objectValue?["bundleId"]?.stringValue
        if let bundleID, bundle != bundleID {
            throw AppleSignatureError("the notification is for bundle \(bundle.map { "\"\($0)\"" } ?? "(none)"), not \"\(bundleID)\"")
        }
        var transaction: [String: JSONValue]?
        var renewal: [String: JSONValue]?
        if let signed = data["signedTransactionInfo"]?.stringValue {
            transaction = try await verifier.verify(signed, now: now)
            if let bundleID, let b = transaction?["bundleId"]?.stringValue, b != bundleID {
                throw AppleSignatureError("the transaction is for bundle \"\(b)\", not \"\(bundleID)\"")
            }
            data["signedTransactionInfo"] = .object(transaction!)
        }
        if let signed = data["signedRenewalInfo"]?.stringValue {
            renewal = try await verifier.verify(signed, now: now)
            data["signedRenewalInfo"] = .object(renewal!)
        }
        let outer = appleTime(payload["signedDate"])
        try checkSignedDate(
            outer, of: "notification", now: now,
            notBefore: [
                ("transaction's purchaseDate", appleTime(transaction?["purchaseDate"])),
                ("transaction's signedDate", appleTime(transaction?["signedDate"])),
                ("renewal info's signedDate", appleTime(renewal?["signedDate"])),
            ])
        for (name, inner) in [("transaction", transaction), ("renewal info", renewal)] {
            guard let inner, inner["signedDate"] != nil else { continue }
            try checkSignedDate(appleTime(inner["signedDate"]), of: name, now: now, notBefore: [])
        }
        payload["data"] = .object(data)
        return AppleNotification(
            notificationUUID: uuid.lowercased(), type: type, subtype: payload["subtype"]?.stringValue,
            signedDate: appleTime(payload["signedDate"]),
            environment: appleEnvironment(data["environment"]?.stringValue ?? transaction?["environment"]?.stringValue),
            bundleID: bundle, transaction: transaction, renewal: renewal, payload: payload)
    }
}

extension AppleNotification {
    /// Rebuilds a notification from the payload kept in the inbox (nested signed infos already decoded and
    /// verified when it was received).
    public init?(storedPayload payload: [String: JSONValue]) {
        guard let uuid = payload["notificationUUID"]?.stringValue, let type = payload["notificationType"]?.stringValue else {
            return nil
        }
        let data = payload["data"]?.objectValue ?? [:]
        let transaction = data["signedTransactionInfo"]?.objectValue
        self.init(
            notificationUUID: uuid.lowercased(), type: type, subtype: payload["subtype"]?.stringValue,
            signedDate: appleTime(payload["signedDate"]),
            environment: appleEnvironment(data["environment"]?.stringValue ?? transaction?["environment"]?.stringValue),
            bundleID: data["bundleId"]?.stringValue, transaction: transaction,
            renewal: data["signedRenewalInfo"]?.objectValue, payload: payload)
    }
}
