import LedgerCore
import LedgerStore
import StoreAdapters

extension EventIntake {
    /// The one path of a verified App Store notification into the ledger, whether Apple pushed it or a
    /// backfill fetched it from the notification history: mapped, recorded in the inbox by its
    /// `notificationUUID` (so a second arrival appends nothing), applied when its subscriber is known.
    public func ingest(apple notification: AppleNotification, signedPayload: String) async throws -> Outcome {
        // A payload the mapping refuses throws its `StoreMappingError` (the route answers 422 naming the field).
        let drafts = try AppleNotificationMapper.drafts(for: notification)
        return try await ingest(
            StoreMessage(
                store: AppleNotificationMapper.store, messageID: notification.notificationUUID, kind: notification.type,
                subtype: notification.subtype, environment: notification.environment, accountID: notification.originalTransactionID,
                subscriberHint: notification.appAccountToken, raw: signedPayload, payload: notification.payload, drafts: drafts))
    }
}
