import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Bulk import with COPY")
struct ImportTests {
    static func event(_ i: Int, note: String = "tab\there\nnewline, back\\slash \"quoted\" é 😀") -> NewEvent {
        try! EventDecoder.decode(
            [
                "subscriber_id": .string("imp-\(i % 7)"), "type": "credit", "occurred_at": "2025-06-01T00:00:00Z", "source": "import",
                "environment": "production", "idempotency_key": .string("imp-\(i)"),
                "data": ["entitlement": "pro", "duration": "P7D", "reason": "legacy", "granted_by": "migration"],
                "metadata": ["note": .string(note), "n": .number(JSONNumber(Int64(i)))],
            ], path: "")
    }

    @Test("imported events read back byte for byte, chain and verify like appended ones; a re-import stores nothing")
    func importRoundTrip() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            _ = try await store.append([Self.event(1000)])
            let batch = (0..<200).map { Self.event($0) }
            let result = try await store.importBatch(batch)
            #expect(result.createdCount == 200)
            let feed = try await store.feed(afterPosition: 0, limit: 1000)
            #expect(feed.count == 201)
            #expect(feed.map(\.position) == Array(1...201))
            #expect(feed[1].metadata == batch[0].metadata)
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
            #expect(try await store.importBatch(batch).createdCount == 0)
            await #expect(throws: StoreError.idempotencyConflict(source: "import", key: "imp-3", index: 1)) {
                try await store.importBatch([Self.event(500), Self.event(3, note: "changed")])
            }
            #expect(try await store.feed(afterPosition: 0, limit: 1000).count == 201)
        }
    }
}
