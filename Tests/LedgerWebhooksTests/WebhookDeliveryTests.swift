import Foundation
import Hummingbird
import LedgerCore
import LedgerTestSupport
import Logging
import NIOCore
import PostgresNIO
import Synchronization
import Testing

@testable import LedgerStore
@testable import LedgerWebhooks

/// A local webhook receiver: verifies every signature, records what arrived, and answers as told.
final class Receiver: Sendable {
    struct Delivery: Sendable {
        var id: String
        var body: [UInt8]
        var position: Int64
        var subscriber: String
        var signatureValid: Bool
    }

    /// Decides the status of one request from its position and subscriber (overrides the behaviour's status).
    typealias Decide = @Sendable (Int64, String) -> Int

    private let decide = Mutex<Decide?>(nil)
    func decide(_ d: @escaping Decide) { decide.withLock { $0 = d } }

    /// How long to wait before answering one request, from its position and subscriber (added to the behaviour's).
    typealias Delay = @Sendable (Int64, String) -> Duration
    private let delay = Mutex<Delay?>(nil)
    func delay(_ d: @escaping Delay) { delay.withLock { $0 = d } }

    /// Requests being answered: how many at most at once, and how often one subscriber had two at once.
    struct Concurrency: Sendable {
        var now = 0
        var most = 0
        var bySubscriber: [String: Int] = [:]
        var sameSubscriber = 0
    }
    private let concurrency = Mutex(Concurrency())

    /// Requests for this position are answered only once `release()` is called: a message that stalls.
    private let gate = Mutex<(position: Int64?, waiting: [CheckedContinuation<Void, Never>])>((nil, []))
    func stall(_ position: Int64) { gate.withLock { $0.position = position } }
    func release() {
        let waiting = gate.withLock { g in
            defer { g = (nil, []) }
            return g.waiting
        }
        for w in waiting { w.resume() }
    }
    var mostInFlight: Int { concurrency.withLock { $0.most } }
    var sameSubscriberInFlight: Int { concurrency.withLock { $0.sameSubscriber } }

    /// How the next requests are answered: a status, after a delay.
    struct Behaviour: Sendable {
        var status: Int = 200
        var delay: Duration = .zero
        /// Answer `status` only this many times, then 200 again (nil: always).
        var times: Int? = nil
    }

    private let state = Mutex<(deliveries: [Delivery], behaviour: Behaviour, secret: WebhookSecret?)>(([], Behaviour(), nil))

    var deliveries: [Delivery] { state.withLock { $0.deliveries } }
    func set(_ b: Behaviour) { state.withLock { $0.behaviour = b } }
    func trust(_ secret: WebhookSecret) { state.withLock { $0.secret = secret } }

    func handle(_ request: Request) async throws -> Response {
        let body = Array(try await request.body.collect(upTo: 1 << 20).readableBytesView)
        // `?slow=MS`: an endpoint of a slow receiver on the same host and port: answered 200 after MS, not recorded.
        if let ms = request.uri.queryParameters.get("slow", as: Int.self) {
            try await Task.sleep(for: .milliseconds(ms))
            return Response(status: .ok)
        }
        let id = request.headers[.init("webhook-id")!] ?? ""
        let timestamp = Int64(request.headers[.init("webhook-timestamp")!] ?? "") ?? 0
        let signature = request.headers[.init("webhook-signature")!] ?? ""
        let (behaviour, secret) = state.withLock { s -> (Behaviour, WebhookSecret?) in
            let b = s.behaviour
            if let n = b.times {
                if n <= 1 { s.behaviour = Behaviour() } else { s.behaviour.times = n - 1 }
            }
            return (b, s.secret)
        }
        let valid = secret.map { WebhookSignature.verify(header: signature, id: id, timestamp: timestamp, body: body, secret: $0) } ?? false
        let event = (try? JSONParser.parse(body))?.objectValue?["data"]?.objectValue?["event"]?.objectValue
        let position = event?["position"]?.numberValue?.int64Value ?? -1
        let subscriber = event?["subscriber_id"]?.stringValue ?? ""
        concurrency.withLock { c in
            c.now += 1
            c.most = max(c.most, c.now)
            c.bySubscriber[subscriber, default: 0] += 1
            if c.bySubscriber[subscriber, default: 0] > 1 { c.sameSubscriber += 1 }
        }
        // Before the answer is written: the sender may send the subscriber's next message once it reads it.
        defer {
            concurrency.withLock { c in
                c.now -= 1
                c.bySubscriber[subscriber, default: 1] -= 1
            }
        }
        let wait = behaviour.delay + (delay.withLock { $0 }.map { $0(position, subscriber) } ?? .zero)
        if wait > .zero { try await Task.sleep(for: wait) }
        if gate.withLock({ $0.position }) == position {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let open = gate.withLock { g -> Bool in
                    guard g.position == position else { return true }
                    g.waiting.append(c)
                    return false
                }
                if open { c.resume() }
            }
        }
        let status = decide.withLock { $0 }.map { $0(position, subscriber) } ?? behaviour.status
        if (200..<300).contains(status) {
            state.withLock {
                $0.deliveries.append(Delivery(id: id, body: body, position: position, subscriber: subscriber, signatureValid: valid))
            }
        }
        return Response(status: .init(code: status))
    }

    /// Runs the receiver on a free port of 127.0.0.1 while `body` runs.
    func serve<T: Sendable>(_ body: @escaping @Sendable (Int) async throws -> T) async throws -> T {
        let router = Router()
        router.post("hook") { request, _ in try await self.handle(request) }
        return try await LocalHTTPServer.serve(router, label: "receiver", body)
    }
}

/// The delivery service end to end inside one process: a real PostgreSQL, a real HTTP receiver.
@Suite("Webhook delivery service")
struct WebhookDeliveryTests {
    static let configuration = WebhookConfiguration(
        policy: WebhookDestinationPolicy(allowHTTP: true, allowPrivate: true), concurrency: 4,
        // Long enough that a loaded machine's slow answer is not a timeout (which would deliver twice).
        connectTimeout: .seconds(2), responseTimeout: .seconds(3),
        retrySchedule: WebhookRetrySchedule(delays: [.milliseconds(50), .milliseconds(100)], giveUpAfter: .seconds(60), jitter: 0),
        leaseDuration: .seconds(8), leaseInterval: .milliseconds(200), pollInterval: .milliseconds(50))

    /// Runs the service on a fresh database while `body` runs, with a receiver listening.
    static func running(
        _ configuration: WebhookConfiguration = configuration,
        _ body: @escaping @Sendable (WebhookStore, EventStore, Receiver, String) async throws -> Void
    ) async throws {
        try await TestDatabase.with(role: "subledger_app") { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let store = WebhookStore(database: database)
            let receiver = Receiver()
            try await receiver.serve { port in
                let service = WebhookDeliveryService(store: store, configuration: configuration, logger: TestDatabase.logger)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await service.run() }
                    try await body(store, EventStore(database: database), receiver, "http://127.0.0.1:\(port)/hook")
                    group.cancelAll()
                }
            }
        }
    }

    static func eventually(_ what: String, timeout: Duration = .seconds(20), _ condition: @Sendable () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("timed out waiting until \(what)")
    }

    /// Whether each subscriber's deliveries came in position order.
    static func inOrderPerSubscriber(_ deliveries: [Receiver.Delivery]) -> Bool {
        Dictionary(grouping: deliveries, by: \.subscriber).values.allSatisfy { d in zip(d, d.dropFirst()).allSatisfy { $0.position < $1.position } }
    }

    static func create(_ store: WebhookStore, _ url: String, receiver: Receiver, types: [String]? = nil) async throws -> WebhookEndpoint {
        var g = SystemRandomNumberGenerator()
        let secret = WebhookSecret.generate(using: &g)
        receiver.trust(secret)
        return try await store.create(url: url, description: nil, eventTypes: types, entitlements: nil, secret: secret)
    }

    @Test("every event after the cursor arrives once, each subscriber's in order, signed, with its entitlements")
    func delivers() async throws {
        try await Self.running { store, events, receiver, url in
            _ = try await events.append([SampleEvents.purchase(subscriber: "before", key: "b0")])
            let e = try await Self.create(store, url, receiver: receiver)
            for i in 0..<30 { _ = try await events.append([SampleEvents.purchase(subscriber: "s\(i % 4)", key: "k\(i)")]) }
            try await Self.eventually("30 deliveries") { receiver.deliveries.count >= 30 }
            let got = receiver.deliveries
            // Each subscriber's in order; different subscribers' may pass each other (several requests in flight).
            #expect(got.map(\.position).sorted() == Array(2...31))
            #expect(Self.inOrderPerSubscriber(got))
            #expect(got.allSatisfy { $0.signatureValid })
            #expect(Set(got.map(\.id)).count == 30)
            let first = try JSONParser.parse(got[0].body).objectValue!["data"]!.objectValue!
            #expect(first["entitlements"]?.arrayValue?.first?.objectValue?["active"] == true)
            try await Self.eventually("the cursor reaches the head") { try await store.get(e.id).deliveredThrough == 31 }
            #expect(try await store.get(e.id).lagPositions == 0)
        }
    }

    @Test("failures are retried with the same id and body until delivered; the log shows every attempt")
    func retries() async throws {
        try await Self.running { store, events, receiver, url in
            let e = try await Self.create(store, url, receiver: receiver)
            receiver.set(.init(status: 503, times: 3))
            _ = try await events.append([SampleEvents.purchase(subscriber: "s", key: "k1")])
            _ = try await events.append([SampleEvents.autoRenewOff(subscriber: "s", key: "k2")])
            try await Self.eventually("both delivered") { receiver.deliveries.count >= 2 }
            #expect(receiver.deliveries.map(\.position) == [1, 2])
            // A delivered event's record is written while the next one is sent: wait for the last record.
            try await Self.eventually("every attempt logged") { try await store.deliveries(e.id, before: nil, limit: 100).count >= 5 }
            let log = try await store.deliveries(e.id, before: nil, limit: 100)
            #expect(log.map(\.outcome) == [.delivered, .delivered, .failed, .failed, .failed])
            #expect(Set(log.filter { $0.position == 1 }.map(\.webhookID)).count == 1)
            #expect(log.last?.attempt == 1 && log[2].attempt == 3 && log[2].httpStatus == 503)
            let changes = try JSONParser.parse(receiver.deliveries[1].body).objectValue!["data"]!.objectValue!["changes"]!
            #expect(changes.arrayValue?.first?.objectValue?["changes"] == ["renewal_disabled"])
        }
    }

    @Test("a slow endpoint times out and is retried; 410 disables the endpoint and keeps its cursor")
    func timeoutAndGone() async throws {
        try await Self.running { store, events, receiver, url in
            let e = try await Self.create(store, url, receiver: receiver)
            receiver.set(.init(status: 200, delay: .seconds(4), times: 1))
            _ = try await events.append([SampleEvents.purchase(subscriber: "s", key: "k1")])
            try await Self.eventually("delivered after a timeout") {
                let through = try await store.get(e.id).deliveredThrough
                return through == 1 && receiver.deliveries.contains { $0.position == 1 }
            }
            let log = try await store.deliveries(e.id, before: nil, limit: 100)
            #expect(log.contains { $0.outcome == .failed && ($0.error ?? "").contains("timed out") })
            receiver.set(.init(status: 410))
            _ = try await events.append([SampleEvents.autoRenewOff(subscriber: "s", key: "k2")])
            try await Self.eventually("disabled") { try await store.get(e.id).status == .disabled }
            #expect(try await store.get(e.id).deliveredThrough == 1)
        }
    }

    @Test("filters pass over other event types without holding the cursor")
    func filters() async throws {
        try await Self.running { store, events, receiver, url in
            let e = try await Self.create(store, url, receiver: receiver, types: ["auto_renew_changed"])
            _ = try await events.append([SampleEvents.purchase(subscriber: "s", key: "k1")])
            _ = try await events.append([SampleEvents.autoRenewOff(subscriber: "s", key: "k2")])
            _ = try await events.append([SampleEvents.purchase(subscriber: "t", key: "k3")])
            try await Self.eventually("the cursor passes everything") { try await store.get(e.id).deliveredThrough == 3 }
            #expect(receiver.deliveries.map(\.position) == [2])
        }
    }
}

/// Issue 32's defects of delivery: head-of-line blocking, slow receivers holding the shared slots, a
/// quadratic message cost. Each test failed before the change it is named for.
@Suite("Webhook delivery: no stalls")
struct WebhookNoStallTests {
    @Test("a failed message delays only its own subscriber's later messages; the others keep flowing")
    func failureHoldsOnlyItsSubscriber() async throws {
        var c = WebhookDeliveryTests.configuration
        // Long enough that, were the whole endpoint held, nothing else could arrive before the retry (with room for
        // the others' deliveries on a machine busy with the whole test suite).
        c.retrySchedule = WebhookRetrySchedule(delays: [.seconds(6)], giveUpAfter: .seconds(60), jitter: 0)
        try await WebhookDeliveryTests.running(c) { store, events, receiver, url in
            let e = try await WebhookDeliveryTests.create(store, url, receiver: receiver)
            let failedOnce = Mutex(false)
            receiver.decide { _, subscriber in
                guard subscriber == "slow" else { return 200 }
                return failedOnce.withLock { f in
                    defer { f = true }
                    return f ? 200 : 503
                }
            }
            _ = try await events.append([SampleEvents.purchase(subscriber: "slow", key: "s0")])
            _ = try await events.append([SampleEvents.autoRenewOff(subscriber: "slow", key: "s1")])
            for i in 0..<10 { _ = try await events.append([SampleEvents.purchase(subscriber: "fast\(i % 3)", key: "f\(i)")]) }
            try await WebhookDeliveryTests.eventually("the others' 10 delivered", timeout: .seconds(5)) {
                receiver.deliveries.filter { $0.subscriber != "slow" }.count == 10
            }
            #expect(!receiver.deliveries.contains { $0.subscriber == "slow" })
            // The last delivered record is written while the walk goes on: wait for it.
            try await WebhookDeliveryTests.eventually("the cursor past everything", timeout: .seconds(2)) {
                try await store.get(e.id).deliveredThrough == 12
            }
            let held = try await store.get(e.id)
            #expect(held.heldMessages == 2 && held.failedAttempts == 1)
            try await WebhookDeliveryTests.eventually("the held subscriber delivered after its retry") { receiver.deliveries.count == 12 }
            #expect(receiver.deliveries.suffix(2).map(\.position) == [1, 2])
            try await WebhookDeliveryTests.eventually("nothing held", timeout: .seconds(2)) { try await store.get(e.id).heldMessages == 0 }
        }
    }

    @Test("a receiver failing a fifth of requests at random: every message arrives, each subscriber's in order")
    func randomFailures() async throws {
        try await WebhookDeliveryTests.running { store, events, receiver, url in
            _ = try await WebhookDeliveryTests.create(store, url, receiver: receiver)
            receiver.decide { _, _ in Int.random(in: 0..<5) == 0 ? 500 : 200 }
            var batch: [NewEvent] = []
            for i in 0..<200 {
                batch.append(
                    i % 3 == 0
                        ? SampleEvents.autoRenewOff(subscriber: "r\(i % 20)", key: "k\(i)")
                        : SampleEvents.purchase(subscriber: "r\(i % 20)", key: "k\(i)"))
            }
            for chunk in stride(from: 0, to: batch.count, by: 50) { _ = try await events.append(Array(batch[chunk..<chunk + 50])) }
            try await WebhookDeliveryTests.eventually("200 delivered", timeout: .seconds(60)) {
                Set(receiver.deliveries.map(\.position)).count == 200
            }
            let got = receiver.deliveries
            #expect(WebhookDeliveryTests.inOrderPerSubscriber(got))
            #expect(Set(got.map(\.position)) == Set(1...200))
        }
    }

    @Test("slow receivers do not hold the shared request slots: a fast endpoint's events arrive at once")
    func slowReceiversShareFairly() async throws {
        var c = WebhookDeliveryTests.configuration
        c.concurrency = 2
        c.slowRequestAfter = .milliseconds(100)
        c.responseTimeout = .seconds(5)
        try await WebhookDeliveryTests.running(c) { store, events, receiver, url in
            // Ten endpoints answering after 1.5 s and one fast one, all on one host and port (the HTTP client's
            // connections per host are a shared limit too).
            do {
                for _ in 0..<10 { _ = try await WebhookDeliveryTests.create(store, url + "?slow=1500", receiver: receiver) }
                _ = try await WebhookDeliveryTests.create(store, url, receiver: receiver)
                let started = ContinuousClock.now
                for i in 0..<10 { _ = try await events.append([SampleEvents.purchase(subscriber: "s\(i)", key: "k\(i)")]) }
                try await WebhookDeliveryTests.eventually("the fast endpoint's 10 delivered", timeout: .seconds(30)) {
                    receiver.deliveries.count == 10
                }
                // Before: each of its requests waited for a slot held by a 1.5 s request (about 10 × 1.5 s / 2).
                #expect(ContinuousClock.now - started < .seconds(5))
            }
        }
    }

    @Test("4,000 events of one subscriber cost about what 4,000 over 400 do: each message folds one event")
    func linearInASubscribersSize() async throws {
        let reads = Mutex<[Int]>([])
        try await TestDatabase.with(role: "subledger_app") { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let store = WebhookStore(database: database)
            let events = EventStore(database: database)
            var batch: [NewEvent] = []
            for i in 0..<1000 {
                let at = Timestamp(microseconds: 1_767_225_600_000_000 + Int64(i) * 3_600_000_000).rfc3339
                batch.append(SampleEvents.purchase(subscriber: "big", key: "k\(i)", occurredAt: at))
            }
            for chunk in stride(from: 0, to: batch.count, by: 250) { _ = try await events.append(Array(batch[chunk..<chunk + 250])) }
            let builder = MessageBuilder { subscribers, position in
                let streams = try await store.streams(subscribers, through: position)
                reads.withLock { $0.append(streams.values.map(\.count).reduce(0, +)) }
                return streams
            }
            var built = 0
            var after: Int64 = 0
            while true {
                let page = try await store.feed(after: after, limit: 200)
                guard let last = page.last else { break }
                built += try await builder.messages(page: page, wanted: Set(page.map(\.position))).count
                after = last.position
            }
            #expect(built == 1000)
        }
        // The stream is never read: it begins in the first page (version 1), and its fold is kept from page to page.
        #expect(reads.withLock { $0 } == [])
    }

    @Test("built messages equal the definition (folds of the whole stream before and after), late facts included")
    func builderMatchesTheDefinition() async throws {
        try await TestDatabase.with(role: "subledger_app") { client, _ in
            let database = Database(client: client, logger: TestDatabase.logger)
            let store = WebhookStore(database: database)
            let events = EventStore(database: database)
            let generated = GeneratedLedger.events(seed: 32, subscribers: 6, eventsPerSubscriber: 20...60)
            for chunk in stride(from: 0, to: generated.count, by: 40) {
                _ = try await events.append(Array(generated[chunk..<min(chunk + 40, generated.count)]))
            }
            let builder = MessageBuilder(store: store, slots: AsyncSemaphore(1))
            let all = try await store.feed(after: 0, limit: 10_000)
            var late = 0
            var after: Int64 = 0
            // Pages of odd sizes, every other event wanted: folds carry across pages and unwanted events.
            while let page = Optional(all.filter { $0.position > after }.prefix(37)), let last = page.last {
                let wanted = Set(page.map(\.position).filter { $0 % 2 == 0 })
                let built = try await builder.messages(page: Array(page), wanted: wanted)
                #expect(Set(built.keys) == wanted)
                for e in page where wanted.contains(e.position) {
                    let stream = all.filter { $0.subscriberID == e.subscriberID && $0.position <= e.position }
                    if stream.dropLast().contains(where: { ($0.occurredAt, $0.position) > (e.occurredAt, e.position) }) { late += 1 }
                    let before = Fold.fold(Array(stream.dropLast()))
                    let definition = WebhookMessage(endpointID: UUID(), event: e, before: before, after: Fold.fold(stream))
                    #expect(built[e.position]?.body == definition.body, "position \(e.position)")
                }
                after = last.position
            }
            #expect(late > 10)
        }
    }
}

@Suite("Webhook metrics")
struct WebhookMetricsTests {
    static func endpoint(_ id: UUID) -> WebhookEndpoint {
        WebhookEndpoint(
            id: id, url: "https://example.com/h", description: nil, eventTypes: nil, entitlements: nil, status: .active,
            statusReason: nil, deliveredThrough: 0, failedAttempts: 0, failingSince: nil, nextAttemptAt: nil, lastError: nil,
            previousSecretUntil: nil, createdAt: Timestamp(microseconds: 0), updatedAt: Timestamp(microseconds: 0), lagPositions: 3,
            lagSeconds: 1, heldMessages: 2)
    }

    @Test("a deleted endpoint's metrics, its delivery counters included, leave /metrics at the next report")
    func deletedEndpointLeaves() {
        _ = TestMetrics.registry
        let (gone, kept) = (UUID(), UUID())
        Metrics.count(endpoint: gone, outcome: .delivered)
        Metrics.count(endpoint: gone, outcome: .failed)
        Metrics.report([Self.endpoint(gone), Self.endpoint(kept)])
        var text = TestMetrics.text()
        #expect(text.contains("subledger_webhook_deliveries_total{endpoint=\"\(gone.lowercasedString)\""))
        #expect(text.contains("subledger_webhook_held_messages{endpoint=\"\(gone.lowercasedString)\"} 2"))
        Metrics.report([Self.endpoint(kept)])
        text = TestMetrics.text()
        #expect(!text.contains(gone.lowercasedString))
        #expect(text.contains("subledger_webhook_lag_positions{endpoint=\"\(kept.lowercasedString)\"}"))
    }
}

@Suite("Webhook destinations resolved at delivery")
struct WebhookResolutionTests {
    @Test("a name is resolved on its own thread, and its loopback addresses are refused by the default policy")
    func resolvesAndRefuses() async throws {
        let addresses = try #require(await WebhookSender.resolve("localhost", within: .seconds(5)))
        #expect(addresses.contains([127, 0, 0, 1]) || addresses.contains(Array(repeating: 0, count: 15) + [1]))
        #expect(WebhookDestinationPolicy().check(resolved: addresses) != nil)
        #expect(WebhookDestinationPolicy(allowPrivate: true).check(resolved: addresses) == nil)
    }
}
