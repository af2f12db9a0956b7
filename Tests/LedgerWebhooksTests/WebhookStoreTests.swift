import Foundation
import LedgerCore
import LedgerTestSupport
import PostgresNIO
import Testing

@testable import LedgerStore

/// The webhook store against the real PostgreSQL, acting as the service's role `subledger_app`: cursors,
/// leases and their fencing, the retry bookkeeping and the deliveries log.
@Suite("Webhook store: cursor, lease, deliveries log")
struct WebhookStoreTests {
    static let secret = WebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")!

    static func withStore(_ body: @escaping @Sendable (WebhookStore, EventStore) async throws -> Void) async throws {
        try await TestDatabase.with(role: "subledger_app") { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            try await body(WebhookStore(database: database), EventStore(database: database))
        }
    }

    static func append(_ events: EventStore, _ n: Int, prefix: String = "k") async throws {
        for i in 0..<n {
            _ = try await events.append([SampleEvents.purchase(subscriber: "s\(i % 3)", key: "\(prefix)\(i)")])
        }
    }

    static func attempt(_ position: Int64, _ outcome: WebhookDelivery.Outcome, status: Int? = nil) -> WebhookAttempt {
        WebhookAttempt(
            position: position, eventID: UUID(), webhookID: "msg_\(position)", outcome: outcome, httpStatus: status,
            latencyMilliseconds: 3, error: outcome == .delivered ? nil : "HTTP \(status ?? 0)")
    }

    @Test("a new endpoint starts at the end of the feed; lag counts what follows; filters and secrets round-trip")
    func createAndLag() async throws {
        try await Self.withStore { store, events in
            try await Self.append(events, 3)
            let e = try await store.create(
                url: "https://example.com/h", description: "d", eventTypes: ["purchase"], entitlements: ["pro"], secret: Self.secret)
            #expect(e.deliveredThrough == 3 && e.lagPositions == 0 && e.status == .active)
            #expect(e.eventTypes == ["purchase"] && e.entitlements == ["pro"] && e.description == "d")
            try await Self.append(events, 2, prefix: "m")
            let later = try await store.get(e.id)
            #expect(later.lagPositions == 2 && later.lagSeconds >= 0)
            #expect(try await store.list().map(\.id) == [e.id])
            let cleared = try await store.update(e.id, WebhookEndpointPatch(eventTypes: [], entitlements: []))
            #expect(cleared.eventTypes == nil && cleared.entitlements == nil && cleared.description == "d")
            #expect(try await store.delete(e.id))
            #expect(try await store.delete(e.id) == false)
            await #expect(throws: WebhookStoreError.notFound(e.id)) { try await store.get(e.id) }
        }
    }

    @Test("one instance at a time holds a lease; another takes it over once it expires; release hands it over")
    func leases() async throws {
        try await Self.withStore { store, _ in
            let e = try await store.create(url: "https://example.com/h", description: nil, eventTypes: nil, entitlements: nil, secret: Self.secret)
            // Long enough that a loaded machine runs the next checks within it.
            #expect(try await store.acquireLeases(instance: "a", duration: .seconds(3), limit: 10) == [e.id])
            #expect(try await store.acquireLeases(instance: "b", duration: .seconds(5), limit: 10).isEmpty)
            #expect(try await store.deliveryState(e.id, instance: "b") == nil)
            let state = try #require(try await store.deliveryState(e.id, instance: "a"))
            #expect(state.secrets == [Self.secret] && state.nextHeldInMilliseconds == nil)
            try await Task.sleep(for: .milliseconds(3200))
            #expect(try await store.deliveryState(e.id, instance: "a") == nil)
            #expect(try await store.acquireLeases(instance: "b", duration: .seconds(5), limit: 10) == [e.id])
            // "a" comes back late: fenced out of every write.
            #expect(try await store.skip(e.id, through: 1, instance: "a", generation: state.generation) == false)
            #expect(
                try await store.record(
                    e.id, Self.attempt(1, .delivered), subscriberID: "s0", body: [1], through: 1, instance: "a",
                    generation: state.generation, retryDelay: .seconds(1), giveUpAfter: .seconds(60)) == .stale)
            try await store.releaseLeases(instance: "b")
            #expect(try await store.acquireLeases(instance: "a", duration: .seconds(5), limit: 10) == [e.id])
        }
    }

    static func record(
        _ store: WebhookStore, _ e: WebhookEndpoint, _ attempt: WebhookAttempt, subscriber: String, generation: Int64,
        through: Int64? = nil, delay: Duration = .seconds(5), giveUp: Duration = .seconds(60)
    ) async throws -> WebhookStore.Recorded {
        try await store.record(
            e.id, attempt, subscriberID: subscriber, body: Array("body \(attempt.position)".utf8), through: through ?? attempt.position,
            instance: "a", generation: generation, retryDelay: delay, giveUpAfter: giveUp)
    }

    @Test("delivered moves the cursor; a failure is held and its subscriber's later messages queue behind it; replays fence")
    func cursor() async throws {
        try await Self.withStore { store, events in
            let e = try await store.create(url: "https://example.com/h", description: nil, eventTypes: nil, entitlements: nil, secret: Self.secret)
            try await Self.append(events, 5)  // s0 s1 s2 s0 s1
            _ = try await store.acquireLeases(instance: "a", duration: .seconds(30), limit: 10)
            var s = try #require(try await store.deliveryState(e.id, instance: "a"))
            let g = s.generation
            #expect(
                try await Self.record(store, e, Self.attempt(1, .delivered, status: 200), subscriber: "s0", generation: g)
                    == .applied(nextRetryAt: nil, paused: false))
            #expect(try await store.get(e.id).deliveredThrough == 1)
            guard
                case .applied(let next?, false) = try await Self.record(
                    store, e, Self.attempt(2, .failed, status: 500), subscriber: "s1", generation: g)
            else {
                Issue.record("a failure did not schedule a retry")
                return
            }
            s = try #require(try await store.deliveryState(e.id, instance: "a"))
            // The cursor moved past the failed message: it waits as held, not in front of everyone.
            #expect(s.endpoint.deliveredThrough == 2 && s.endpoint.failedAttempts == 1 && s.endpoint.lastError == "HTTP 500")
            #expect(s.endpoint.heldMessages == 1 && s.endpoint.nextAttemptAt == next)
            #expect((3001...5000).contains(s.nextHeldInMilliseconds ?? 0))
            #expect(try await store.held(e.id) == (["s1"], 1))
            #expect(try await store.skip(e.id, through: 4, instance: "a", generation: g))
            #expect(try await store.hold(e.id, position: 5, eventID: UUID(), subscriberID: "s1", body: [5], through: 5, instance: "a", generation: g))
            let queued = try await store.get(e.id)
            #expect(queued.deliveredThrough == 5 && queued.heldMessages == 2 && queued.lagPositions == 4)
            #expect(try await store.dueHeld(e.id, limit: 10).isEmpty)

            // Enabling restarts each subscriber's queue at its head, now; the one behind waits.
            _ = try await store.update(e.id, WebhookEndpointPatch(enabled: true))
            s = try #require(try await store.deliveryState(e.id, instance: "a"))
            #expect(try await store.dueHeld(e.id, limit: 10).map(\.position) == [2])
            #expect(try await store.dueHeld(e.id, limit: 10).first?.body == Array("body 2".utf8))
            #expect(
                try await store.recordHeld(
                    e.id, Self.attempt(2, .delivered, status: 200), instance: "a", generation: s.generation, retryDelay: .seconds(5),
                    giveUpAfter: .seconds(60)) == .delivered(queued: true))
            #expect(try await store.dueHeld(e.id, limit: 10).map(\.position) == [5])
            guard
                case .retry = try await store.recordHeld(
                    e.id, Self.attempt(5, .failed, status: 502), instance: "a", generation: s.generation, retryDelay: .seconds(5),
                    giveUpAfter: .seconds(60))
            else {
                Issue.record("a held message's failure did not schedule a retry")
                return
            }
            #expect(try await store.get(e.id).heldMessages == 1)

            let replayed = try await store.replay(e.id, from: 2)
            #expect(replayed.deliveredThrough == 1 && replayed.failedAttempts == 0 && replayed.nextAttemptAt == nil && replayed.heldMessages == 0)
            #expect(try await Self.record(store, e, Self.attempt(2, .delivered), subscriber: "s1", generation: s.generation) == .stale)
            #expect(
                try await store.recordHeld(
                    e.id, Self.attempt(5, .delivered), instance: "a", generation: s.generation, retryDelay: .seconds(5), giveUpAfter: .seconds(60))
                    == .stale)
            #expect(try await store.get(e.id).deliveredThrough == 1)
            await #expect(throws: WebhookStoreError.replayBeyondHead(from: 7, head: 5)) { try await store.replay(e.id, from: 7) }
            #expect(try await store.replay(e.id, from: 6).deliveredThrough == 5)

            let log = try await store.deliveries(e.id, before: nil, limit: 10)
            // The fenced attempt at 2 is logged (it was made), without moving anything.
            #expect(log.map(\.position) == [2, 5, 2, 2, 1])
            #expect(log.map(\.outcome) == [.delivered, .failed, .delivered, .failed, .delivered])
            #expect(log[3].attempt == 1 && log[3].httpStatus == 500 && log[3].nextRetryAt == next)
            #expect(log[2].attempt == 1)  // enabling started a fresh schedule
            #expect(try await store.deliveries(e.id, before: log[0].id, limit: 1).map(\.id) == [log[1].id])

            // The log is bounded per endpoint as well as by age.
            try await store.prune(olderThan: .seconds(3600), keepPerEndpoint: 2)
            #expect(try await store.deliveries(e.id, before: nil, limit: 10).map(\.id) == [log[0].id, log[1].id])
        }
    }

    @Test("with requests answered out of order the cursor stops at the first unsettled event; a held one above it keeps order")
    func cursorBelowAGap() async throws {
        try await Self.withStore { store, events in
            let e = try await store.create(url: "https://example.com/h", description: nil, eventTypes: nil, entitlements: nil, secret: Self.secret)
            try await Self.append(events, 6)  // s0 s1 s2 s0 s1 s2
            _ = try await store.acquireLeases(instance: "a", duration: .seconds(30), limit: 10)
            let g = try #require(try await store.deliveryState(e.id, instance: "a")).generation
            // 1, 5 and 6 answered while 2 is still in flight; 1's record is lost (a crash), 5 and 6 are logged
            // and the cursor stays below 2.
            #expect(
                try await store.recordDelivered(
                    e.id, [Self.attempt(5, .delivered, status: 200), Self.attempt(6, .delivered, status: 200)], through: 0,
                    instance: "a", generation: g) == .applied(nextRetryAt: nil, paused: false))
            #expect(try await store.get(e.id).deliveredThrough == 0)
            // 4 (s0) fails while 2 is still in flight: held above the cursor.
            guard case .applied = try await Self.record(store, e, Self.attempt(4, .failed, status: 500), subscriber: "s0", generation: g, through: 0)
            else {
                Issue.record("the failure was not held")
                return
            }
            let held = try await store.get(e.id)
            #expect(held.deliveredThrough == 0 && held.heldMessages == 1)
            #expect(try await store.deliveries(e.id, before: nil, limit: 10).map(\.position) == [4, 6, 5])
            // The walk after the crash meets s0's message 1 again: s0 has a held message, so 1 is held, due at
            // once, in front of 4, which now waits behind it.
            #expect(
                try await store.hold(e.id, position: 1, eventID: UUID(), subscriberID: "s0", body: [1], through: 1, instance: "a", generation: g))
            #expect(try await store.get(e.id).deliveredThrough == 1)
            #expect(try await store.dueHeld(e.id, limit: 10).map(\.position) == [1])
            #expect(
                try await store.recordHeld(
                    e.id, Self.attempt(1, .delivered, status: 200), instance: "a", generation: g, retryDelay: .seconds(5),
                    giveUpAfter: .seconds(60)) == .delivered(queued: true))
            #expect(try await store.dueHeld(e.id, limit: 10).map(\.position) == [4])
        }
    }

    @Test("a held message failing past the give-up time pauses the endpoint; enabling resumes it; 410 disables")
    func pauseAndGone() async throws {
        try await Self.withStore { store, events in
            let e = try await store.create(url: "https://example.com/h", description: nil, eventTypes: nil, entitlements: nil, secret: Self.secret)
            try await Self.append(events, 2)
            _ = try await store.acquireLeases(instance: "a", duration: .seconds(30), limit: 10)
            var s = try #require(try await store.deliveryState(e.id, instance: "a"))
            _ = try await Self.record(
                store, e, Self.attempt(1, .failed), subscriber: "s0", generation: s.generation, delay: .milliseconds(10), giveUp: .milliseconds(300))
            try await Task.sleep(for: .milliseconds(350))
            #expect(
                try await store.recordHeld(
                    e.id, Self.attempt(1, .failed), instance: "a", generation: s.generation, retryDelay: .milliseconds(10),
                    giveUpAfter: .milliseconds(300)) == .paused)
            let paused = try await store.get(e.id)
            #expect(paused.status == .failing && paused.deliveredThrough == 1 && paused.heldMessages == 1 && paused.statusReason != nil)
            #expect(try await store.deliveryState(e.id, instance: "a") == nil)
            #expect(try await store.acquireLeases(instance: "a", duration: .seconds(30), limit: 10).isEmpty)

            let resumed = try await store.update(e.id, WebhookEndpointPatch(enabled: true))
            #expect(resumed.status == .active && resumed.heldMessages == 1 && resumed.failedAttempts == 0)
            #expect(try await store.acquireLeases(instance: "a", duration: .seconds(30), limit: 10) == [e.id])
            s = try #require(try await store.deliveryState(e.id, instance: "a"))
            #expect(s.nextHeldInMilliseconds == 0)
            #expect(
                try await store.recordHeld(
                    e.id, Self.attempt(1, .gone, status: 410), instance: "a", generation: s.generation, retryDelay: .seconds(1),
                    giveUpAfter: .seconds(60)) == .disabled)
            let gone = try await store.get(e.id)
            #expect(gone.status == .disabled && gone.heldMessages == 1 && gone.statusReason?.contains("410") == true)
        }
    }

    @Test("a rotated secret signs beside the new one; the overlap is reported")
    func rotation() async throws {
        try await Self.withStore { store, _ in
            let e = try await store.create(url: "https://example.com/h", description: nil, eventTypes: nil, entitlements: nil, secret: Self.secret)
            var g = SystemRandomNumberGenerator()
            let new = WebhookSecret.generate(using: &g)
            let rotated = try await store.rotateSecret(e.id, to: new)
            let until = try #require(rotated.previousSecretUntil)
            #expect(until > rotated.updatedAt)
            _ = try await store.acquireLeases(instance: "a", duration: .seconds(30), limit: 10)
            #expect(try await store.deliveryState(e.id, instance: "a")?.secrets == [new, Self.secret])
        }
    }

    @Test("streams are read up to a position, and the feed pages in order")
    func reads() async throws {
        try await Self.withStore { store, events in
            try await Self.append(events, 9)
            let page = try await store.feed(after: 2, limit: 4)
            #expect(page.map(\.position) == [3, 4, 5, 6])
            let streams = try await store.streams(["s0", "s1"], through: 5)
            #expect(streams["s0"]?.map(\.position) == [1, 4])
            #expect(streams["s1"]?.map(\.position) == [2, 5])
            #expect(try await store.pulse().head == 9)
        }
    }
}
