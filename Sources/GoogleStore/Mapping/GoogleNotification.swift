import Foundation
import LedgerCore
import StoreAdapters

/// A Real-time developer notification as Cloud Pub/Sub pushes it: the push envelope's `messageId` and the
/// decoded `DeveloperNotification` (docs/google.md).
public struct GoogleNotification: Sendable {
    /// Pub/Sub's id of the message: the inbox key (a redelivery has the same one).
    public var messageID: String
    public var packageName: String
    public var eventTime: Timestamp
    /// `subscription`, `one_time_product`, `voided_purchase` or `test`.
    public var kind: String
    /// The notification type's number as text (`subscriptionNotification.notificationType`), if any.
    public var subtype: String?
    public var purchaseToken: String?
    /// `subscriptionId` (subscriptions) or `sku` (one-time products).
    public var productID: String?
    /// `voidedPurchaseNotification.orderId`.
    public var orderID: String?
    /// The decoded `DeveloperNotification`, kept in the inbox.
    public var payload: [String: JSONValue]

    /// Longest accepted purchase token, order id, package name and product id (docs/limits.md).
    public static let maxTokenBytes = 1024
    public static let maxIdentifierBytes = 200

    /// Reads a push body. The `data` must decode to a JSON `DeveloperNotification` naming its package.
    public init(pushBody body: [String: JSONValue]) throws(StoreMappingError) {
        guard let message = body["message"]?.objectValue else {
            throw StoreMappingError(field: "message", reason: "is required (a Pub/Sub push envelope)")
        }
        guard let id = message["messageId"]?.stringValue ?? message["message_id"]?.stringValue, !id.isEmpty,
            id.utf8.count <= Self.maxIdentifierBytes
        else { throw StoreMappingError(field: "message.messageId", reason: "is required (1–\(Self.maxIdentifierBytes) bytes)") }
        guard let data = message["data"]?.stringValue, let bytes = Data(base64Encoded: data) else {
            throw StoreMappingError(field: "message.data", reason: "is required (base64 of a DeveloperNotification)")
        }
        guard case .object(let n)? = try? JSONParser.parse(Array(bytes), maxDepth: 32) else {
            throw StoreMappingError(field: "message.data", reason: "is not a JSON DeveloperNotification")
        }
        try self.init(messageID: id, notification: n)
    }

    /// Reads a stored `DeveloperNotification` (the inbox payload).
    public init(messageID: String, notification n: [String: JSONValue]) throws(StoreMappingError) {
        func text(_ o: [String: JSONValue], _ key: String, _ path: String, max: Int = Self.maxIdentifierBytes) throws(StoreMappingError) -> String? {
            guard let v = o[key] else { return nil }
            guard let s = v.stringValue, !s.isEmpty, s.utf8.count <= max else {
                throw StoreMappingError(field: "\(path).\(key)", reason: "must be a string of 1–\(max) bytes")
            }
            return s
        }
        guard let package = try text(n, "packageName", "message.data") else {
            throw StoreMappingError(field: "message.data.packageName", reason: "is required")
        }
        let millis = n["eventTimeMillis"]?.stringValue.flatMap { Int64($0) } ?? n["eventTimeMillis"]?.numberValue?.int64Value
        guard let millis, let time = GoogleTime.millis(millis) else {
            throw StoreMappingError(field: "message.data.eventTimeMillis", reason: "is required (milliseconds since 1970, in range)")
        }
        self.messageID = messageID
        packageName = package
        eventTime = time
        payload = n
        subtype = nil
        purchaseToken = nil
        productID = nil
        orderID = nil
        if let s = n["subscriptionNotification"]?.objectValue {
            kind = "subscription"
            guard let type = s["notificationType"]?.numberValue?.int64Value, (1...99).contains(type) else {
                throw StoreMappingError(field: "message.data.subscriptionNotification.notificationType", reason: "is required (1–99)")
            }
            subtype = String(type)
            purchaseToken = try text(s, "purchaseToken", "message.data.subscriptionNotification", max: Self.maxTokenBytes)
            productID = try text(s, "subscriptionId", "message.data.subscriptionNotification")
            guard purchaseToken != nil else {
                throw StoreMappingError(field: "message.data.subscriptionNotification.purchaseToken", reason: "is required")
            }
        } else if let o = n["oneTimeProductNotification"]?.objectValue {
            kind = "one_time_product"
            subtype = o["notificationType"]?.numberValue?.int64Value.map { String($0) }
            purchaseToken = try text(o, "purchaseToken", "message.data.oneTimeProductNotification", max: Self.maxTokenBytes)
            productID = try text(o, "sku", "message.data.oneTimeProductNotification")
        } else if let v = n["voidedPurchaseNotification"]?.objectValue {
            kind = "voided_purchase"
            subtype = v["productType"]?.numberValue?.int64Value.map { String($0) }
            purchaseToken = try text(v, "purchaseToken", "message.data.voidedPurchaseNotification", max: Self.maxTokenBytes)
            orderID = try text(v, "orderId", "message.data.voidedPurchaseNotification")
            guard purchaseToken != nil, orderID != nil else {
                throw StoreMappingError(field: "message.data.voidedPurchaseNotification", reason: "purchaseToken and orderId are required")
            }
        } else if n["testNotification"] != nil {
            kind = "test"
        } else {
            kind = "unknown"
        }
    }

    /// Whether resolving this notification needs the Play Developer API.
    public var needsAPI: Bool { kind == "subscription" }
}

/// Google's times: RFC 3339 strings with up to nanoseconds, or milliseconds since 1970.
public enum GoogleTime {
    public static func millis(_ ms: Int64) -> Timestamp? {
        let (us, overflow) = ms.multipliedReportingOverflow(by: 1000)
        guard !overflow else { return nil }
        let t = Timestamp(microseconds: us)
        return t >= .minimum && t <= .maximum ? t : nil
    }

    /// `2026-03-01T10:00:00.123456789Z`: fractions beyond microseconds are dropped.
    public static func parse(_ text: String?) -> Timestamp? {
        guard let text, text.utf8.count <= 64 else { return nil }
        if let t = try? Timestamp(rfc3339: text) { return t }
        guard let dot = text.firstIndex(of: "."), let z = text.lastIndex(where: { $0 == "Z" || $0 == "+" || $0 == "-" }), z > dot else {
            return nil
        }
        let fraction = text[text.index(after: dot)..<z].prefix(6)
        return try? Timestamp(rfc3339: String(text[..<dot]) + (fraction.isEmpty ? "" : "." + fraction) + String(text[z...]))
    }
}
