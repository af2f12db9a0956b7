import Foundation
import LedgerCore
import LedgerStore
import Logging
import StoreAdapters

/// The App Store on the intake seam (`StoreAdapter`): a verified Server Notification V2 and the signed
/// payload it was read from, mapped by `AppleNotificationMapper` with the paid period the ledger recorded.
public struct AppleStore: StoreAdapter {
    public struct Message: Sendable {
        public var notification: AppleNotification
        public var signedPayload: String

        public init(notification: AppleNotification, signedPayload: String) {
            self.notification = notification
            self.signedPayload = signedPayload
        }
    }

    public let store = AppleNotificationMapper.store

    public init() {}

    /// A payload the mapping refuses throws its `StoreMappingError` (the route answers 422 naming the field).
    public func map(_ m: Message, on tx: StoreTransaction) async throws -> StoreMapping {
        let n = m.notification
        let drafts = try AppleNotificationMapper.drafts(for: n, paidUntil: try await paidUntil(n, on: tx))
        return StoreMapping(drafts: drafts, accountID: n.originalTransactionID, subscriberHint: n.appAccountToken)
    }

    /// The inbox row: by `notificationUUID`, the signed payload as received, the verified payload decoded.
    public func record(_ m: Message) -> StoreInbox.Message {
        StoreInbox.Message(
            store: store, messageID: m.notification.notificationUUID, kind: m.notification.type, subtype: m.notification.subtype,
            environment: m.notification.environment, accountID: m.notification.originalTransactionID, status: .received,
            raw: m.signedPayload, payload: m.notification.payload)
    }

    /// A notification that waited for its original transaction's link, re-read from the inbox's verified payload.
    public func remap(_ stored: StoreInbox.Message, on tx: StoreTransaction) async throws -> [EventDraft] {
        guard let n = AppleNotification(storedPayload: stored.payload) else { return [] }
        let paid = try await paidUntil(n, on: tx)
        do {
            return try AppleNotificationMapper.drafts(for: n, paidUntil: paid)
        } catch let error as StoreMappingError {
            throw EventValidationError(field: error.field, reason: error.description)
        }
    }

    /// The expiry the ledger recorded for the transaction a notification extends (`paidPeriodKey`), if any.
    func paidUntil(_ n: AppleNotification, on tx: StoreTransaction) async throws -> Timestamp? {
        guard let key = AppleNotificationMapper.paidPeriodKey(n),
            let recorded = try await tx.event(source: AppleNotificationMapper.store, idempotencyKey: key)
        else { return nil }
        return recorded.data[EventDataKey.periodEnd]?.stringValue.flatMap { try? Timestamp(rfc3339: $0) }
    }
}

extension EventIntake {
    /// The one path of a verified App Store notification into the ledger, whether Apple pushed it or a
    /// backfill fetched it from the notification history: recorded in the inbox by its `notificationUUID`
    /// (so a second arrival appends nothing), applied when its subscriber is known, in one transaction.
    public func ingest(apple notification: AppleNotification, signedPayload: String, logger: Logger? = nil) async throws -> StoreOutcome {
        try await stores.ingest(
            AppleStore(), AppleStore.Message(notification: notification, signedPayload: signedPayload),
            logger: logger ?? store.logger
        ).outcome
    }

    /// Links App Store original transactions to a subscriber and applies the notifications that waited for
    /// them (re-read from the inbox's verified payload). Returns how many were applied.
    public func linkApple(originalTransactionIDs: [String], to subscriber: String, by origin: String, logger: Logger) async throws -> Int {
        try await stores.link(AppleStore(), accounts: originalTransactionIDs, to: subscriber, by: origin, logger: logger)
    }
}

extension AppleStore {
    /// Why a request body is not an App Store notification the ledger can take (all 422).
    public enum Refusal: Error, Sendable {
        /// `signedPayload` is missing or not a string.
        case missingPayload
        /// The JWS does not verify (`invalid_signature`).
        case signature(String)
        /// `notificationUUID` is not a UUID.
        case notificationUUID
    }

    /// A request body (`{"signedPayload": …}`) read into a verified message: the JWS chain checked, the
    /// notification decoded, logged.
    public static func read(
        body: [String: JSONValue], reader: AppleNotificationReader, now: Timestamp, logger: Logger
    ) async throws(Refusal) -> Message {
        guard let signed = body["signedPayload"]?.stringValue, !signed.isEmpty else { throw .missingPayload }
        let notification: AppleNotification
        do {
            notification = try await reader.read(signedPayload: signed, now: now)
        } catch {
            throw .signature(error.description)
        }
        guard UUID(uuidString: notification.notificationUUID) != nil else { throw .notificationUUID }
        logger.info(
            "apple notification",
            metadata: [
                "apple.notification_uuid": "\(notification.notificationUUID)", "apple.type": "\(notification.type)",
                "apple.subtype": "\(notification.subtype ?? "")",
            ])
        return Message(notification: notification, signedPayload: signed)
    }
}

extension AppleStore {
    /// A receipt the app submits for a subscriber (`POST /v1/stores/apple/receipts`): the subscriber it names
    /// and what the verifyReceipt response says.
    public struct Receipt: Sendable {
        public var subscriber: String
        public var mapping: AppleReceiptMapping
    }

    /// A receipt body read: its `subscriber_id` checked, the verifyReceipt response mapped (both shapes).
    public static func readReceipt(_ body: [String: JSONValue]) throws(StoreMappingError) -> Receipt {
        guard let subscriber = body["subscriber_id"]?.stringValue else {
            throw StoreMappingError(field: "subscriber_id", reason: "is required")
        }
        guard Identifiers.isValidSubscriberID(subscriber) else {
            throw StoreMappingError(field: "subscriber_id", reason: Identifiers.subscriberIDRule)
        }
        return Receipt(subscriber: subscriber, mapping: try AppleReceiptMapper.map(.object(body)))
    }
}
