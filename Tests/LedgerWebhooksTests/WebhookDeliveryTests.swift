import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Logging
import NIOCore
import PostgresNIO
import Synchronization
import Testing

@testable import LedgerWebhooks

/// A local webhook receiver: verifies every signature, records what arrived, and answers as told.
final class Receiver: Sendable {
    struct Delivery: Sendable {
        var id: String
        var body: [UInt8]
        var position: Int64
        var signatureValid: Bool
    }

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
        if behaviour.delay > .zero { try await Task.sleep(for: behaviour.delay) }
        let valid = secret.map { WebhookSignature.verify(header: signature, id: id, timestamp: timestamp, body: body, secret: $0) } ?? false
        let position =
            (try? JSONParser.parse(body))?.objectValue?["data"]?.objectValue?["event"]?.objectValue?["position"]?.numberValue?.int64Value ?? -1
        if (200..<300).contains(behaviour.status) {
            state.withLock { $0.deliveries.append(Delivery(id: id, body: body, position: position, signatureValid: valid)) }
        }
        return Response(status: .init(code: behaviour.status))
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

    static func create(_ store: WebhookStore, _ url: String, receiver: Receiver, types: [String]? = nil) async throws -> WebhookEndpoint {
        var g = SystemRandomNumberGenerator()
        let secret = WebhookSecret.generate(using: &g)
        receiver.trust(secret)
        return try await store.create(url: url, description: nil, eventTypes: types, entitlements: nil, secret: secret)
    }

    @Test("every event after the cursor arrives once, in order, signed, with its entitlements")
    func delivers() async throws {
        try await Self.running { store, events, receiver, url in
            _ = try await events.append([SampleEvents.purchase(subscriber: "before", key: "b0")])
            let e = try await Self.create(store, url, receiver: receiver)
            for i in 0..<30 { _ = try await events.append([SampleEvents.purchase(subscriber: "s\(i % 4)", key: "k\(i)")]) }
            try await Self.eventually("30 deliveries") { receiver.deliveries.count >= 30 }
            let got = receiver.deliveries
            #expect(got.map(\.position) == Array(2...31))
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
