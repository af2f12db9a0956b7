import Foundation
import Hummingbird
import LedgerAppStore
import LedgerCore
import LedgerStore
import Logging

/// `POST /v1/stores/apple/notifications` (signed Server Notifications V2) and
/// `POST /v1/stores/apple/receipts` (verifyReceipt responses), turned into ledger events.
struct AppleStoreRoutes {
    let reader: AppleNotificationReader
    let inbox: AppleInbox
    let store: EventStore
    /// For the position of answers that append nothing themselves (the primary's, which includes them).
    let router: ReadRouter
    let catalog: CatalogStore
    let maxBodyBytes: Int

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.post("stores/apple/notifications", use: notification)
        group.post("stores/apple/receipts", use: receipt)
    }

    @Sendable func notification(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.append)
        let body = try await jsonObject(request)
        guard let signed = body["signedPayload"]?.stringValue, !signed.isEmpty else {
            throw APIError(.unprocessableContent, code: "invalid_request", message: "signedPayload: is required (a string)", field: "signedPayload")
        }
        let notification: AppleNotification
        do {
            notification = try await reader.read(signedPayload: signed, now: .now())
        } catch {
            throw APIError(.unprocessableContent, code: "invalid_signature", message: error.description)
        }
        guard let uuid = UUID(uuidString: notification.notificationUUID) else {
            throw APIError(.unprocessableContent, code: "invalid_request", message: "notificationUUID is not a UUID", field: "notificationUUID")
        }
        context.logger.info(
            "apple notification",
            metadata: ["apple.notification_uuid": "\(uuid)", "apple.type": "\(notification.type)", "apple.subtype": "\(notification.subtype ?? "")"])
        if let status = try await inbox.status(of: uuid), status != .pending {
            return Response.json(["status": "duplicate", "notification_uuid": .string(notification.notificationUUID)])
                .ledgerPosition(try await router.primaryHead())
        }
        let drafts: [StoreEventDraft]
        do {
            drafts = try AppleNotificationMapper.drafts(for: notification)
        } catch {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        func record(_ status: AppleInbox.Status, _ subscriber: String?) async throws {
            try await inbox.record(
                notificationUUID: uuid, type: notification.type, subtype: notification.subtype, environment: notification.environment,
                originalTransactionID: notification.originalTransactionID, subscriberID: subscriber, status: status,
                signedPayload: signed, payload: notification.payload)
        }
        if drafts.isEmpty {
            try await record(.notice, nil)
            return Response.json(["status": "notice", "notification_uuid": .string(notification.notificationUUID)])
                .ledgerPosition(try await router.primaryHead())
        }
        let subscriber = try await resolveSubscriber(notification)
        guard let subscriber else {
            // Kept, not dropped: applied when a receipt upload links the original transaction to a subscriber.
            try await record(.pending, nil)
            return Response.json(["status": "pending", "notification_uuid": .string(notification.notificationUUID)])
                .ledgerPosition(try await router.primaryHead())
        }
        let events = try await apply(drafts, subscriber: subscriber)
        try await record(.applied, subscriber)
        return Response.json([
            "status": "applied", "notification_uuid": .string(notification.notificationUUID),
            "subscriber_id": .string(subscriber), "events": .array(events.map(\.json)),
        ]).ledgerPosition(events.map(\.position).max() ?? 0)
    }

    @Sendable func receipt(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.append)
        let body = try await jsonObject(request)
        guard let subscriber = body["subscriber_id"]?.stringValue else {
            throw APIError(.unprocessableContent, code: "invalid_request", message: "subscriber_id: is required", field: "subscriber_id")
        }
        guard Identifiers.isValidSubscriberID(subscriber) else {
            throw APIError(
                .unprocessableContent, code: "invalid_request",
                message: "subscriber_id: must be 1–200 characters of A–Z, a–z, 0–9 and . _ : @ -", field: "subscriber_id")
        }
        let mapping: AppleReceiptMapping
        do {
            mapping = try AppleReceiptMapper.map(.object(body))
        } catch {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        do {
            try await inbox.link(mapping.originalTransactionIDs, to: subscriber, by: "receipt")
        } catch let conflict as AppleInbox.LinkConflict {
            throw APIError(.conflict, code: "version_conflict", message: conflict.description)
        }
        let events = mapping.drafts.isEmpty ? [] : try await apply(mapping.drafts, subscriber: subscriber)
        let applied = try await applyPending(originalTransactionIDs: mapping.originalTransactionIDs, subscriber: subscriber, logger: context.logger)
        // Pending notifications applied here appended events this answer does not list: the primary's
        // position includes them.
        let position = events.isEmpty || applied > 0 ? try await router.primaryHead() : events.map(\.position).max() ?? 0
        return Response.json([
            "subscriber_id": .string(subscriber), "events": .array(events.map(\.json)),
            "applied_notifications": .number(JSONNumber(Int64(applied))),
        ]).ledgerPosition(position)
    }

    /// `appAccountToken` names the subscriber (and links the original transaction to it); otherwise the
    /// subscriber already linked to the original transaction.
    private func resolveSubscriber(_ n: AppleNotification) async throws -> String? {
        if let token = n.appAccountToken, Identifiers.isValidSubscriberID(token) {
            if let original = n.originalTransactionID {
                do {
                    try await inbox.link([original], to: token, by: "app_account_token")
                } catch let conflict as AppleInbox.LinkConflict {
                    throw APIError(.conflict, code: "version_conflict", message: conflict.description)
                }
            }
            return token
        }
        guard let original = n.originalTransactionID else { return nil }
        return try await inbox.subscriber(forOriginalTransaction: original)
    }

    /// Completes drafts from the catalog and appends them; facts already stored stand as stored.
    private func apply(_ drafts: [StoreEventDraft], subscriber: String) async throws -> [RecordedEvent] {
        let needed = StoreDraftCompletion.productsNeeded(drafts)
        let products = needed.isEmpty ? [:] : try await catalog.latest(needed)
        let events: [NewEvent]
        do {
            events = try StoreDraftCompletion.complete(drafts, subscriberID: subscriber, products: products)
        } catch {
            throw APIError.invalidEvent(error)
        }
        return try await store.append(events, replays: .keepStored).events
    }

    /// Applies notifications that were waiting for these original transactions' subscriber.
    private func applyPending(originalTransactionIDs: [String], subscriber: String, logger: Logger) async throws -> Int {
        var applied = 0
        for pending in try await inbox.pending(originalTransactionIDs: originalTransactionIDs) {
            guard let n = AppleNotification(storedPayload: pending.payload) else { continue }
            do {
                let drafts = try AppleNotificationMapper.drafts(for: n)
                if !drafts.isEmpty { _ = try await apply(drafts, subscriber: subscriber) }
                try await inbox.markApplied(pending.notificationUUID, subscriberID: subscriber)
                applied += 1
            } catch let error as APIError where error.status == .unprocessableContent {
                logger.warning(
                    "pending notification still cannot be applied",
                    metadata: ["apple.notification_uuid": "\(pending.notificationUUID)", "error.message": "\(error.message)"])
            }
        }
        return applied
    }

    private func jsonObject(_ request: Request) async throws -> [String: JSONValue] {
        let bytes = try await RequestBody.collect(request, limit: maxBodyBytes)
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes.readableBytesView)
        } catch {
            throw APIError.invalidRequest("the body is not valid JSON: \(error)")
        }
        guard case .object(let o) = value else { throw APIError.invalidRequest("the body must be a JSON object") }
        return o
    }
}
