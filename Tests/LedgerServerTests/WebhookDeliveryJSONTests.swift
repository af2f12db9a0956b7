import Foundation
import LedgerCore
import Testing

@testable import LedgerServer
@testable import LedgerStore

@Suite("Webhook deliveries' JSON")
struct WebhookDeliveryJSONTests {
    @Test("message_id is the msg_ id, webhook_id its deprecated alias with the same value, and both are in the OpenAPI schema")
    func messageID() throws {
        let id = "msg_" + String(repeating: "ab", count: 16)
        let delivery = WebhookDelivery(
            id: 7, position: 42, eventID: UUID(), webhookID: id, attempt: 2, outcome: .failed, httpStatus: 500, latencyMilliseconds: 12,
            error: "HTTP 500", nextRetryAt: nil, attemptedAt: try Timestamp(rfc3339: "2026-03-01T10:00:00Z"))
        let o = try #require(delivery.json.objectValue)
        #expect(o["message_id"]?.stringValue == id)
        #expect(o["webhook_id"]?.stringValue == id)
        let schema = OpenAPIDocumentTests.schema("WebhookDelivery", in: try OpenAPIDocumentTests.document())
        let properties = Set(
            schema.filter { $0.hasPrefix("        ") && !$0.hasPrefix("         ") && $0.contains(":") }
                .map { $0.trimmingCharacters(in: .whitespaces).split(separator: ":")[0] }.map(String.init))
        #expect(properties == Set(o.keys))
        let alias = schema.drop { !$0.hasPrefix("        webhook_id:") }.prefix(5).joined(separator: "\n")
        #expect(alias.contains("deprecated: true"))
    }
}
