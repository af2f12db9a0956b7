import Foundation
import LedgerCore
import LedgerTestSupport
import PostgresNIO
import Testing

@testable import LedgerStore

/// Store messages that arrive together share one transaction (`SharedTransaction`): one lock turn for their
/// appends and one commit; a member that fails rolls the shared transaction back, and each member then runs alone.
@Suite("Store messages sharing a transaction")
struct SharedTransactionTests {
    /// A store for these tests: each message names its subscriber and says one complete purchase; a message
    /// marked `fails` throws from its mapping.
    struct TestStore: StoreAdapter {
        struct Message: Sendable {
            var id: String
            var subscriber: String
            var fails = false
        }

        struct Refused: Error {}

        var store: String { "teststore" }

        func record(_ m: Message) -> StoreInbox.Message {
            StoreInbox.Message(
                store: store, messageID: m.id, kind: "test", environment: .production, status: .received, raw: m.id,
                payload: ["id": .string(m.id)])
        }

        func map(_ m: Message, on tx: StoreTransaction) async throws -> StoreMapping {
            if m.fails { throw Refused() }
            let draft = EventDraft(
                type: .purchase, occurredAt: try Timestamp(rfc3339: "2026-03-01T00:00:00Z"), environment: .production,
                idempotencyKey: "test:\(m.id)", productID: nil, originalTransactionID: m.id,
                data: [
                    "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": .string(m.id),
                    "original_transaction_id": .string(m.id), "kind": "auto_renewable", "offer": "none",
                    "period_start": "2026-03-01T00:00:00Z", "period_end": "2026-04-01T00:00:00Z", "period": "P1M",
                    "price_minor": 1000, "currency": "USD", "commission_rate": "0.30",
                ], metadata: [:])
            return StoreMapping(drafts: [draft], accountID: "acct-\(m.id)", subscriberHint: m.subscriber)
        }

        func remap(_ stored: StoreInbox.Message, on tx: StoreTransaction) async throws -> [EventDraft] { [] }
    }

    /// Ingests the messages all at once; each message's outcome name, or "failed".
    static func ingest(_ messages: [TestStore.Message], _ intake: EventIntake) async throws -> [String: String] {
        try await withThrowingTaskGroup(of: (String, String).self) { group in
            for m in messages {
                group.addTask {
                    do {
                        return (m.id, try await intake.stores.ingest(TestStore(), m, logger: TestDatabase.logger).outcome.name)
                    } catch is TestStore.Refused {
                        return (m.id, "failed")
                    }
                }
            }
            var out: [String: String] = [:]
            for try await (id, outcome) in group { out[id] = outcome }
            return out
        }
    }

    static func counts(_ client: PostgresClient) async throws -> (events: Int, applied: Int) {
        var events = 0
        var applied = 0
        for try await n in try await client.query("SELECT count(*)::int8 FROM events WHERE source = 'teststore'").decode(Int64.self) {
            events = Int(n)
        }
        for try await n in try await client.query(
            "SELECT count(*)::int8 FROM store_inbox WHERE store = 'teststore' AND status = 'applied'"
        ).decode(Int64.self) { applied = Int(n) }
        return (events, applied)
    }

    /// A fresh database's event store and intake.
    static func withIntake(_ body: @escaping @Sendable (PostgresClient, EventStore, EventIntake) async throws -> Void) async throws {
        try await TestDatabase.with { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let store = EventStore(database: database)
            try await body(client, store, EventIntake(store: store, catalog: CatalogStore(database: database), database: database))
        }
    }

    @Test("messages arriving together share transactions, each stored once, in one unbroken chain")
    func shared() async throws {
        try await Self.withIntake { client, store, intake in
            // Two messages per subscriber: their appends go to the same streams in the same lock turn.
            let messages = (0..<40).map { TestStore.Message(id: "m\($0)", subscriber: "s\($0 % 20)") }
            let outcomes = try await Self.ingest(messages, intake)
            #expect(outcomes.values.allSatisfy { $0 == "applied" }, "\(outcomes)")
            let tally = store.sharing.tally
            #expect(tally.messages == 40 && tally.rolledBack == 0)
            #expect(tally.transactions < 40, "some messages shared a transaction (\(tally))")
            // Members that asked while another's look-up ran were answered together (`SharedTransaction.lookup`).
            #expect(tally.lookups == 40 && tally.lookupStatements < 40, "\(tally)")
            let stored = try await Self.counts(client)
            #expect(stored.events == 40 && stored.applied == 40)
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
            // A second delivery of each is a duplicate, stored nothing.
            let again = try await Self.ingest(messages, intake)
            #expect(again.values.allSatisfy { $0 == "duplicate" || $0 == "applied" }, "\(again)")
            let after = try await Self.counts(client)
            #expect(after.events == 40 && after.applied == 40)
        }
    }

    @Test("a member that fails rolls its shared transaction back; the others run alone and are stored, the failing one is not")
    func failingMember() async throws {
        try await Self.withIntake { client, store, intake in
            let messages = (0..<30).map { TestStore.Message(id: "m\($0)", subscriber: "s\($0)", fails: $0 % 7 == 3) }
            let outcomes = try await Self.ingest(messages, intake)
            for m in messages { #expect(outcomes[m.id] == (m.fails ? "failed" : "applied"), "\(m.id)") }
            let failing = messages.filter(\.fails).count
            let stored = try await Self.counts(client)
            #expect(stored.events == 30 - failing && stored.applied == 30 - failing)
            #expect(try await ChainVerifier(client: client, logger: TestDatabase.logger).verify().ok)
            let tally = store.sharing.tally
            #expect(tally.messages == 30)
            // Every failing message's first run was in a shared transaction, which was rolled back.
            #expect(tally.rolledBack >= 1, "\(tally)")
        }
    }
}
