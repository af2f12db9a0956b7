import AsyncHTTPClient
import Foundation
import LedgerCore
import LedgerStore
import Logging
import Metrics
import NIOCore
import ServiceLifecycle
import Synchronization

/// Delivers webhooks: one loop per endpoint this instance holds the lease of, walking the global feed from
/// the endpoint's cursor in position order (docs/webhooks.md).
///
/// At least once: the cursor moves only after a 2xx, in the same statement that logs the attempt, so a crash
/// between the two sends the event again (same `webhook-id`, same body). An endpoint that fails holds only
/// its own loop. Leases live in PostgreSQL and are renewed every `leaseInterval`; an instance starts an
/// attempt only while its lease has at least the response timeout left by its own monotonic clock, so two
/// instances never deliver to one endpoint at the same time, and a killed instance's endpoints are taken
/// over when its leases expire.
public struct WebhookDeliveryService: Service {
    let store: WebhookStore
    let configuration: WebhookConfiguration
    let logger: Logger
    /// `host:pid:random`, written into leases and the deliveries log.
    public let instance: String

    /// Feed events read per page.
    static let pageSize = 200
    /// A lease needs at least this much time left, beyond the response timeout, for an attempt to start.
    static let leaseMargin: Duration = .seconds(1)

    public init(store: WebhookStore, configuration: WebhookConfiguration, logger: Logger, instance: String? = nil) {
        self.store = store
        self.configuration = configuration
        self.logger = logger
        self.instance = instance ?? Self.instanceName()
    }

    static func instanceName() -> String {
        let host = ProcessInfo.processInfo.hostName.prefix(64)
        return "\(host):\(ProcessInfo.processInfo.processIdentifier):\(UUID().uuidString.prefix(8).lowercased())"
    }

    public func run() async throws {
        var httpConfiguration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: Self.timeAmount(configuration.connectTimeout), read: Self.timeAmount(configuration.responseTimeout)))
        httpConfiguration.decompression = .disabled
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: httpConfiguration)
        let sender = WebhookSender(client: client, policy: configuration.policy)
        let state = SharedState(concurrency: configuration.concurrency)
        logger.info("webhook delivery started", metadata: ["webhooks.instance": "\(instance)"])
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask { await pollHead(state) }
                group.addTask { await housekeeping() }
                while !Task.isCancelled {
                    await renewLeases(state) { id in
                        group.addTask {
                            await runEndpoint(id, state: state, sender: sender)
                            state.finished(id)
                        }
                    }
                    try? await Task.sleep(for: configuration.leaseInterval)
                }
                group.cancelAll()
            }
        }
        // Hand the leases over at once rather than after they expire; not cancelled with the service.
        let store = self.store
        let instance = self.instance
        await Task.detached { try? await store.releaseLeases(instance: instance) }.value
        try? await client.shutdown()
        logger.info("webhook delivery stopped", metadata: ["webhooks.instance": "\(instance)"])
    }

    // MARK: - Leases

    /// Renews held leases and takes free ones; starts a loop for each endpoint newly held.
    private func renewLeases(_ state: SharedState, start: (UUID) -> Void) async {
        let clock = ContinuousClock()
        let asked = clock.now
        do {
            let held = try await store.acquireLeases(instance: instance, duration: configuration.leaseDuration, limit: WebhookStore.maxEndpoints)
            // By our own clock the lease lasts from before the query was sent: never longer than PostgreSQL's.
            for id in state.renewed(held, until: asked + configuration.leaseDuration) { start(id) }
        } catch  where Task.isCancelled {
        } catch {
            logger.warning("webhook leases not renewed", metadata: ["error.detail": "\(StoreError.classify(error))"])
        }
    }

    // MARK: - The feed's head

    private func pollHead(_ state: SharedState) async {
        while !Task.isCancelled {
            if let (head, edits) = try? await store.pulse() { state.setPulse(head: head, edits: edits) }
            try? await Task.sleep(for: configuration.pollInterval)
        }
    }

    // MARK: - One endpoint

    /// Delivers to one endpoint while this instance holds its lease and it is active.
    private func runEndpoint(_ id: UUID, state: SharedState, sender: WebhookSender) async {
        var logger = self.logger
        logger[metadataKey: "webhooks.endpoint"] = "\(id.lowercasedString)"
        var folds = FoldCache()
        // The page being delivered and the streams it needs, kept across a retry: a failure must not cost a
        // page and its streams read again.
        var batch: Batch? = nil
        while !Task.isCancelled {
            guard state.leaseLeft(id) > configuration.responseTimeout + Self.leaseMargin else {
                if state.leaseLeft(id) <= .zero { return }
                try? await Task.sleep(for: .milliseconds(100))
                continue
            }
            do {
                // Read before the state: an edit after this is seen as a change while waiting.
                let edits = state.edits
                guard let current = try await store.deliveryState(id, instance: instance) else { return }
                if current.retryInMilliseconds > 0 {
                    await state.wait(untilHeadPasses: nil, orEditsChangeFrom: edits, atMost: .milliseconds(min(current.retryInMilliseconds, 30_000)))
                    continue
                }
                let cursor = current.endpoint.deliveredThrough
                if let kept = batch, kept.generation == current.generation, let rest = kept.after(cursor) {
                    batch = rest
                } else {
                    let page = try await store.feed(after: cursor, limit: Self.pageSize)
                    if page.isEmpty {
                        batch = nil
                        await state.wait(untilHeadPasses: cursor, orEditsChangeFrom: edits, atMost: .seconds(30))
                        continue
                    }
                    let wanted = page.filter(current.endpoint.filter.wantsType)
                    let streams = try await store.streams(Set(wanted.map(\.subscriberID)), through: page.last!.position)
                    batch = Batch(generation: current.generation, page: page, streams: streams)
                }
                try await deliver(batch!, current, edits: edits, state: state, sender: sender, folds: &folds, logger: logger)
            } catch  where Task.isCancelled {
                return
            } catch {
                logger.warning("webhook delivery interrupted", metadata: ["error.detail": "\(StoreError.classify(error))"])
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Walks one page of the feed: passes over what the filters exclude, delivers the rest in order, and
    /// stops at the first failure (the next attempt waits for its retry time).
    ///
    /// A delivered event's record (the cursor's move and its log row) is written while the next event is
    /// sent, never before the previous record is done, so the endpoint still sees one request at a time in
    /// position order and the cursor still moves only past events answered 2xx; a round trip to PostgreSQL
    /// no longer adds to each delivery's time.
    private func deliver(
        _ batch: Batch, _ current: WebhookDeliveryState, edits: Int64, state: SharedState, sender: WebhookSender,
        folds: inout FoldCache, logger: Logger
    ) async throws {
        let endpoint = current.endpoint
        let filter = endpoint.filter
        let (page, streams) = (batch.page, batch.streams)
        var passedOver: Int64? = nil
        var failedBefore = endpoint.failedAttempts
        var pending: Task<WebhookStore.Recorded, any Error>? = nil
        /// Waits for the previous delivered event's record; false if the lease or generation moved meanwhile.
        func settled() async throws -> Bool {
            guard let task = pending else { return true }
            pending = nil
            return try await task.value != .stale
        }
        for event in page {
            guard filter.wantsType(event) else {
                passedOver = event.position
                continue
            }
            let (before, after) = folds.ledgers(for: event, stream: streams[event.subscriberID] ?? [])
            let changes = EntitlementChange.between(before, after, at: event.occurredAt)
            guard filter.matches(event, changes: changes) else {
                passedOver = event.position
                continue
            }
            if let p = passedOver {
                guard try await settled(), try await store.skip(endpoint.id, through: p, instance: instance, generation: current.generation)
                else { return }
                passedOver = nil
            }
            // An endpoint edited or given a new secret since its state was read: read it again first.
            guard state.edits == edits else { break }
            let message = WebhookMessage(endpointID: endpoint.id, event: event, after: after, changes: changes)
            // The lease is checked once a request slot is free, right before sending, and the request may not
            // outlive it: another instance can never have a request in flight to this endpoint meanwhile.
            let timeout = configuration.responseTimeout
            let sent = await state.limited { () -> WebhookSender.Result? in
                let left = state.leaseLeft(endpoint.id) - Self.leaseMargin
                guard left > timeout else { return nil }
                return await sender.send(url: endpoint.url, message: message, secrets: current.secrets, timeout: min(timeout, left))
            }
            guard try await settled(), let result = sent else { return }
            if Task.isCancelled && result.outcome != .delivered { return }
            let failures = failedBefore + 1
            let delay = configuration.retrySchedule.delay(afterFailures: failures, random: Double.random(in: 0..<1))
            let attempt = WebhookAttempt(
                position: event.position, eventID: event.eventID, webhookID: message.id, outcome: result.outcome,
                httpStatus: result.httpStatus, latencyMilliseconds: result.latencyMilliseconds, error: result.error)
            let (store, instance, generation, giveUp) = (self.store, self.instance, current.generation, configuration.retrySchedule.giveUpAfter)
            let record = { @Sendable in
                try await store.record(
                    endpoint.id, attempt, instance: instance, generation: generation, retryDelay: delay, giveUpAfter: giveUp)
            }
            Metrics.count(endpoint: endpoint.id, outcome: result.outcome)
            if result.outcome == .delivered {
                failedBefore = 0
                pending = Task(operation: record)
                continue
            }
            guard case .applied(let next, let paused) = try await record() else { return }
            if result.outcome == .gone {
                logger.warning("webhook endpoint disabled: it answered 410 Gone", metadata: ["webhooks.position": "\(event.position)"])
            } else {
                logger.info(
                    paused ? "webhook endpoint paused: retries exhausted" : "webhook delivery failed",
                    metadata: [
                        "webhooks.position": "\(event.position)", "webhooks.attempt": "\(failures)",
                        "webhooks.error": "\(result.error ?? "")", "webhooks.next_attempt": "\(next.map(\.rfc3339) ?? "none")",
                    ])
            }
            return
        }
        guard try await settled() else { return }
        if let p = passedOver {
            _ = try await store.skip(endpoint.id, through: p, instance: instance, generation: current.generation)
        }
    }

    // MARK: - Housekeeping

    /// Lag gauges every few seconds; the deliveries log pruned now and then.
    private func housekeeping() async {
        var known: Set<UUID> = []
        var lastPrune = ContinuousClock.now - .seconds(3600)
        while !Task.isCancelled {
            if let endpoints = try? await store.statistics() {
                known = Metrics.report(endpoints, previously: known)
            }
            if ContinuousClock.now - lastPrune > .seconds(600) {
                lastPrune = ContinuousClock.now
                do {
                    try await store.prune(olderThan: configuration.deliveriesRetention)
                } catch  where !Task.isCancelled {
                    logger.warning("webhook deliveries log not pruned", metadata: ["error.detail": "\(StoreError.classify(error))"])
                } catch {}
            }
            try? await Task.sleep(for: .seconds(2))
        }
    }

    static func timeAmount(_ d: Duration) -> TimeAmount {
        .nanoseconds(d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000)
    }
}

/// A page of the feed with the streams (up to its last position) of the subscribers whose events the
/// endpoint's type filter wants, read under one generation of the endpoint.
struct Batch {
    var generation: Int64
    var page: [RecordedEvent]
    var streams: [String: [FoldEvent]]

    /// The part after `cursor`, if the page reaches past it and starts at or before it (else a new read).
    func after(_ cursor: Int64) -> Batch? {
        guard let first = page.first, first.position <= cursor + 1, let last = page.last, last.position > cursor else { return nil }
        return Batch(generation: generation, page: page.filter { $0.position > cursor }, streams: streams)
    }
}

/// Folds a subscriber's stream up to an event and just before it, reusing the previous event's fold when it
/// was the subscriber's event right before.
struct FoldCache {
    private var last: [String: (position: Int64, ledger: SubscriberLedger)] = [:]

    mutating func ledgers(for event: RecordedEvent, stream: [FoldEvent]) -> (before: SubscriberLedger, after: SubscriberLedger) {
        let earlier = stream.filter { $0.position < event.position }
        let before: SubscriberLedger
        if let cached = last[event.subscriberID], cached.position == earlier.last?.position {
            before = cached.ledger
        } else {
            before = Fold.fold(earlier)
        }
        let after = Fold.fold(earlier + [FoldEvent(event)])
        if last.count > 500 { last.removeAll(keepingCapacity: true) }
        last[event.subscriberID] = (event.position, after)
        return (before, after)
    }
}

/// What the service's tasks share: the feed's head, the leases held (by the local monotonic clock), the
/// endpoints with a running loop, and the limit on requests in flight.
final class SharedState: Sendable {
    private struct State {
        var head: Int64 = 0
        var edits: Int64 = 0
        var leases: [UUID: ContinuousClock.Instant] = [:]
        var running: Set<UUID> = []
        var inFlight = 0
        var waiting: [CheckedContinuation<Void, Never>] = []
        var sleepers: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextSleeper = 0
        /// Sleepers whose sleep ended before they registered.
        var abandoned: Set<Int> = []
    }

    private let state = Mutex(State())
    let concurrency: Int

    init(concurrency: Int) {
        self.concurrency = max(1, concurrency)
    }

    func setPulse(head: Int64, edits: Int64) {
        let woken = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            guard head > s.head || edits != s.edits else { return [] }
            s.head = max(s.head, head)
            s.edits = edits
            defer { s.sleepers.removeAll() }
            return Array(s.sleepers.values)
        }
        for w in woken { w.resume() }
    }

    var edits: Int64 { state.withLock { $0.edits } }

    /// Waits until the head passes `position` (if given), the endpoints were edited, or `atMost` passed.
    /// Sleepers are woken by the poller only when something changed: idle loops cost nothing.
    func wait(untilHeadPasses position: Int64?, orEditsChangeFrom edits: Int64, atMost: Duration) async {
        let deadline = ContinuousClock.now + atMost
        while !Task.isCancelled {
            let (head, now) = state.withLock { ($0.head, $0.edits) }
            if now != edits || position.map({ head > $0 }) ?? false { return }
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return }
            await sleep(atMost: left)
        }
    }

    /// Sleeps until the next change of the pulse, `atMost`, or cancellation.
    private func sleep(atMost: Duration) async {
        let id = state.withLock { s -> Int in
            s.nextSleeper += 1
            return s.nextSleeper
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    let early = self.state.withLock { s -> Bool in
                        if s.abandoned.remove(id) != nil { return true }
                        s.sleepers[id] = c
                        return false
                    }
                    if early { c.resume() }
                }
            }
            group.addTask { try? await Task.sleep(for: atMost) }
            await group.next()
            group.cancelAll()
            // Wakes the sleeper if the timer (or cancellation) came first, or marks it so that it does not
            // wait once it registers.
            let waiting = state.withLock { s -> CheckedContinuation<Void, Never>? in
                if let c = s.sleepers.removeValue(forKey: id) { return c }
                s.abandoned.insert(id)
                return nil
            }
            waiting?.resume()
        }
        _ = state.withLock { $0.abandoned.remove(id) }
    }

    /// Records the leases just renewed; answers the ones without a running loop (now marked running).
    func renewed(_ ids: [UUID], until: ContinuousClock.Instant) -> [UUID] {
        state.withLock { s in
            var start: [UUID] = []
            for id in ids {
                s.leases[id] = until
                if s.running.insert(id).inserted { start.append(id) }
            }
            return start
        }
    }

    func leaseLeft(_ id: UUID) -> Duration {
        state.withLock { s in s.leases[id].map { $0 - ContinuousClock.now } ?? .zero }
    }

    func finished(_ id: UUID) {
        _ = state.withLock { $0.running.remove(id) }
    }

    /// Runs `body` once fewer than `concurrency` others are running.
    func limited<T: Sendable>(_ body: () async -> T) async -> T {
        await acquire()
        defer { release() }
        return await body()
    }

    private func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.inFlight < concurrency {
                    s.inFlight += 1
                    return true
                }
                s.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    private func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiting.isEmpty {
                s.inFlight -= 1
                return nil
            }
            return s.waiting.removeFirst()
        }
        next?.resume()
    }
}

/// The service's metrics (swift-metrics; `/metrics` shows them through Prometheus).
enum Metrics {
    static func count(endpoint: UUID, outcome: WebhookDelivery.Outcome) {
        Counter(label: "subledger_webhook_deliveries_total", dimensions: [("endpoint", endpoint.lowercasedString), ("outcome", outcome.rawValue)])
            .increment()
    }

    /// Lag gauges of every endpoint; those of endpoints deleted since the last report are removed.
    static func report(_ endpoints: [WebhookEndpoint], previously: Set<UUID>) -> Set<UUID> {
        for e in endpoints {
            let d = [("endpoint", e.id.lowercasedString)]
            Gauge(label: "subledger_webhook_lag_positions", dimensions: d).record(Double(e.lagPositions))
            Gauge(label: "subledger_webhook_lag_seconds", dimensions: d).record(e.lagSeconds)
            Gauge(label: "subledger_webhook_failing", dimensions: d).record(e.status == .failing ? 1 : 0)
        }
        let now = Set(endpoints.map(\.id))
        for gone in previously.subtracting(now) {
            let d = [("endpoint", gone.lowercasedString)]
            for name in ["subledger_webhook_lag_positions", "subledger_webhook_lag_seconds", "subledger_webhook_failing"] {
                Gauge(label: name, dimensions: d).destroy()
            }
        }
        return now
    }
}
