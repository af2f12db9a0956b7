import AppStoreServerAPI
import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import StoreAdapters

/// `POST /v1/stores/apple/notifications` (signed Server Notifications V2) and
/// `POST /v1/stores/apple/receipts` (verifyReceipt responses), turned into ledger events.
struct AppleStoreRoutes {
    let reader: AppleNotificationReader
    let intake: EventIntake
    /// For the position of answers that append nothing themselves (the primary's, which includes them).
    let router: ReadRouter
    let maxBodyBytes: Int

    static let store = "apple"

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
        guard UUID(uuidString: notification.notificationUUID) != nil else {
            throw APIError(.unprocessableContent, code: "invalid_request", message: "notificationUUID is not a UUID", field: "notificationUUID")
        }
        context.logger.info(
            "apple notification",
            metadata: [
                "apple.notification_uuid": "\(notification.notificationUUID)", "apple.type": "\(notification.type)",
                "apple.subtype": "\(notification.subtype ?? "")",
            ])
        let outcome: EventIntake.Outcome
        do {
            outcome = try await intake.ingest(apple: notification, signedPayload: signed)
        } catch let error as StoreMappingError {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        let uuid = JSONValue.string(notification.notificationUUID)
        switch outcome {
        case .duplicate:
            return Response.json(["status": "duplicate", "notification_uuid": uuid]).ledgerPosition(try await router.primaryHead())
        case .notice:
            return Response.json(["status": "notice", "notification_uuid": uuid]).ledgerPosition(try await router.primaryHead())
        case .pending:
            return Response.json(["status": "pending", "notification_uuid": uuid]).ledgerPosition(try await router.primaryHead())
        case .applied(let subscriber, let events):
            return Response.json([
                "status": "applied", "notification_uuid": uuid, "subscriber_id": .string(subscriber),
                "events": .array(events.map(\.json)),
            ]).ledgerPosition(events.map(\.position).max() ?? 0)
        }
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
                message: "subscriber_id: \(Identifiers.subscriberIDRule)", field: "subscriber_id")
        }
        let mapping: AppleReceiptMapping
        do {
            mapping = try AppleReceiptMapper.map(.object(body))
        } catch {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        // Link first, under the transfer policy (a purchase another subscriber keeps: 409, nothing stored), then
        // the receipt's own facts, then what waited for the link.
        _ = try await intake.claim(
            store: Self.store, accounts: mapping.originalTransactionIDs, for: subscriber, by: "receipt", kind: .app, at: Timestamp.now(),
            logger: context.logger)
        let events = mapping.drafts.isEmpty ? [] : try await intake.append(drafts: mapping.drafts, subscriber: subscriber, source: Self.store).events
        let applied = try await intake.linkApple(
            originalTransactionIDs: mapping.originalTransactionIDs, to: subscriber, by: "receipt", logger: context.logger)
        // Pending notifications applied here appended events this answer does not list: the primary's
        // position includes them.
        let position = events.isEmpty || applied > 0 ? try await router.primaryHead() : events.map(\.position).max() ?? 0
        return Response.json([
            "subscriber_id": .string(subscriber), "events": .array(events.map(\.json)),
            "applied_notifications": .number(JSONNumber(Int64(applied))),
        ]).ledgerPosition(position)
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
