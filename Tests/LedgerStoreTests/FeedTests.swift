import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Synchronization
import Testing

@Suite("Global feed")
struct FeedTests {
    @Test("a reader running while 8 writers append 500 events each sees every event exactly once, in position order")
    func feedUnderConcurrentWriters() async throws {
        try await TestDatabase.with { client, _ in
            let store = EventStore(client: client, logger: TestDatabase.logger)
            let writers = 8
            let perWriter = 500
            let total = writers * perWriter
            let done = FinishedWriters()

            let reader = Task { () async throws -> [RecordedEvent] in
                var seen: [RecordedEvent] = []
                var after: Int64 = 0
                while true {
                    let finished = done.count == writers
                    let page = try await store.feed(afterPosition: after, limit: 137)
                    seen += page
                    after = page.last?.position ?? after
                    if page.isEmpty {
                        if finished { return seen }
                        try await Task.sleep(for: .milliseconds(1))
                    }
                }
            }

            try await store.running { _ in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for w in 0..<writers {
                        group.addTask {
                            var i = 0
                            while i < perWriter {
                                // Mix single appends and small batches, same and different subscribers.
                                let size = min(perWriter - i, (i % 3) + 1)
                                let batch = (0..<size).map { k in
                                    SampleEvents.purchase(subscriber: "w\(w)-s\((i + k) % 7)", key: "w\(w)-\(i + k)")
                                }
                                _ = try await store.append(batch)
                                i += size
                            }
                            done.increment()
                        }
                    }
                    try await group.waitForAll()
                }
            }
            let events = try await reader.value
            #expect(events.count == total)
            #expect(events.map(\.position) == Array(1...Int64(total)))
            #expect(Set(events.map(\.idempotencyKey)).count == total)
            let verification = try await ChainVerifier(client: client, logger: TestDatabase.logger).verify()
            #expect(verification.ok)
            #expect(verification.eventsChecked == total)
        }
    }
}

final class FinishedWriters: Sendable {
    private let value = Mutex(0)
    var count: Int { value.withLock { $0 } }
    func increment() { value.withLock { $0 += 1 } }
}
