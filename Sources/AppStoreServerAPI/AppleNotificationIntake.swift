import LedgerCore
import LedgerStore
import Logging
import StoreAdapters

extension EventIntake {
    /// The one path of a verified App Store notification into the ledger, whether Apple pushed it or a
    /// backfill fetched it from the notification history: mapped, recorded in the inbox by its
    /// `notificationUUID` (so a second arrival appends nothing), applied when its subscriber is known.
    public func ingest(apple notification: AppleNotification, signedPayload: String) async throws -> Outcome {
        // A payload the mapping refuses throws its `StoreMappingError` (the route answers 422 naming the field).
        let drafts = try AppleNotificationMapper.drafts(for: notification, paidUntil: try await paidUntil(notification))
        return try await ingest(
            StoreMessage(
                store: AppleNotificationMapper.store, messageID: notification.notificationUUID, kind: notification.type,
                subtype: notification.subtype, environment: notification.environment, accountID: notification.originalTransactionID,
                subscriberHint: notification.appAccountToken, raw: signedPayload, payload: notification.payload, drafts: drafts))
    }

    /// The expiry the ledger recorded for the transaction a notification extends (`paidPeriodKey`), if any.
    func paidUntil(_ n: AppleNotification) async throws -> Timestamp? {
        guard let key = AppleNotificationMapper.paidPeriodKey(n),
            let recorded = try await store.event(source: AppleNotificationMapper.store, idempotencyKey: key)
        else { return nil }
        return recorded.data["period_end"]?.stringValue.flatMap { try? Timestamp(rfc3339: $0) }
    }

    /// Links App Store original transactions to a subscriber and applies the notifications that waited for
    /// them (re-read from the inbox's verified payload). Returns how many were applied.
    public func linkApple(originalTransactionIDs: [String], to subscriber: String, by origin: String, logger: Logger) async throws -> Int {
        try await link(store: AppleNotificationMapper.store, accountIDs: originalTransactionIDs, to: subscriber, by: origin, logger: logger) {
            pending in
            guard let n = AppleNotification(storedPayload: pending.payload) else { return [] }
            let paid = try await paidUntil(n)
            do {
                return try AppleNotificationMapper.drafts(for: n, paidUntil: paid)
            } catch let error as StoreMappingError {
                throw EventValidationError(field: error.field, reason: error.description)
            }
        }
    }
}
