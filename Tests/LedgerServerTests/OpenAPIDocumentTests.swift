import Foundation
import LedgerCore
import Testing

/// The OpenAPI document states limits the code derives from `LedgerCore`; these keep the two from drifting.
@Suite("OpenAPI document agrees with the code")
struct OpenAPIDocumentTests {
    static func document() throws -> String {
        let url = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/LedgerServer/Resources/openapi.yaml")
        return try String(contentsOf: url, encoding: .utf8)
    }

    /// The lines of one `components.schemas` entry (four-space indented name).
    static func schema(_ name: String, in document: String) -> [Substring] {
        let lines = document.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(of: Substring("    \(name):")) else { return [] }
        var body: [Substring] = []
        for line in lines[(start + 1)...] {
            if !line.hasPrefix("      ") && !line.trimmingCharacters(in: .whitespaces).isEmpty { break }
            body.append(line)
        }
        return body
    }

    @Test("the EventType enum lists every event type, and a webhook filter may name each once")
    func eventTypes() throws {
        let doc = try Self.document()
        let enumLine = try #require(Self.schema("EventType", in: doc).first { $0.contains("enum:") })
        let listed = enumLine.split(separator: "[").last!.split(separator: "]").first!
            .split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(Set(listed) == Set(EventType.allCases.map(\.rawValue)))
        let maxItems = try #require(Self.schema("WebhookEventTypes", in: doc).first { $0.contains("maxItems:") })
        #expect(maxItems.trimmingCharacters(in: .whitespaces) == "maxItems: \(EventType.allCases.count)")
    }
}
