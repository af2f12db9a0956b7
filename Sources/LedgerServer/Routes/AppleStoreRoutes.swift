import AppleStore
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
    /// "Now" for the age limit of signed payloads and a claim's time (tests set it).
    var clock: WallClock = .system

    static let store = "apple"

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.post("stores/apple/notifications", use: notification)
        group.post("stores/apple/receipts", use: receipt)
    }

    @Sendable func notification(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.append)
        let body = try await jsonObject(request)
        let message: AppleStore.Message
        do throws(AppleStore.Refusal) {
            message = try await AppleStore.read(body: body, reader: reader, now: clock.now(), logger: context.logger)
        } catch {
            throw error.apiError
        }
        let result: StoreIntake.Result
        do {
            result = try await intake.stores.ingest(AppleStore(), message, logger: context.logger)
        } catch let error as StoreMappingError {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        return try await StoreAnswer.response(result, id: ("notification_uuid", message.notification.notificationUUID), router: router)
    }

    @Sendable func receipt(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.append)
        let body = try await jsonObject(request)
        let receipt: AppleStore.Receipt
        do throws(StoreMappingError) {
            receipt = try AppleStore.readReceipt(body)
        } catch {
            throw APIError(.unprocessableContent, code: "invalid_request", message: error.description, field: error.field)
        }
        // Claimed first under the transfer policy (a purchase another subscriber keeps: 409, nothing stored), then
        // the receipt's own facts, then what waited for the link.
        let (events, applied) = try await intake.stores.claim(
            AppleStore(), accounts: receipt.mapping.originalTransactionIDs, to: receipt.subscriber, by: "receipt",
            drafts: receipt.mapping.drafts, at: clock.now(), logger: context.logger)
        // Pending notifications applied here appended events this answer does not list: the primary's position includes them.
        let position = events.isEmpty || applied > 0 ? try await router.primaryHead() : events.map(\.position).max() ?? 0
        return Response.json([
            "subscriber_id": .string(receipt.subscriber), "events": .array(events.map(\.json)),
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

extension AppleStore.Refusal {
    var apiError: APIError {
        switch self {
        case .missingPayload:
            APIError(.unprocessableContent, code: "invalid_request", message: "signedPayload: is required (a string)", field: "signedPayload")
        case .signature(let why): APIError(.unprocessableContent, code: "invalid_signature", message: why)
        case .notificationUUID:
            APIError(.unprocessableContent, code: "invalid_request", message: "notificationUUID is not a UUID", field: "notificationUUID")
        }
    }
}
