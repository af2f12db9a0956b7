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
/// At least once, in order per subscriber: the cursor moves only after a 2xx, or past a failed message that
/// is then held for a retry (`webhook_held`), in the same statement that logs the attempt; a subscriber's
/// later messages queue behind its held one, the others' keep flowing. A crash between a send and its record
/// sends that message again (same `webhook-id`, same body). Each event's message is built once, by one
/// `MessageBuilder` for every endpoint, folding each subscriber's stream incrementally. Leases live in
/// PostgreSQL and are renewed every `leaseInterval`; an instance starts an attempt only while its lease has
/// at least the response timeout left by its own monotonic clock, so two instances never deliver to one
/// endpoint at the same time, and a killed instance's endpoints are taken over when its leases expire.
public struct WebhookDeliveryService: Service {
    let store: WebhookStore
    let configuration: WebhookConfiguration
    let logger: Logger
    /// `host:pid:random`, written into leases and the deliveries log.
    public let instance: String

    /// Feed events read per page.
    static let pageSize = 200
    /// Delivered attempts recorded in one statement (the cursor moves past them together).
    static let recordBatch = 50
    /// Held messages read per look.
    static let heldPageSize = 50
    /// A lease needs at least this much time left, beyond the response timeout, for an attempt to start.
    static let leaseMargin: Duration = .seconds(1)
    /// After this many failures in a row an endpoint is probed: one attempt, then a pause of that
    /// attempt's retry delay, until one succeeds (a receiver that is down is not sent every held message).
    static let probeAfterFailures = 5

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
        // Each endpoint has one request in flight at most, so endpoints are the limit: with the client's own
        // per-host limit (8), endpoints on one host that answer slowly would queue everyone else's requests
        // to that host behind theirs.
        httpConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = WebhookStore.maxEndpoints
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: httpConfiguration)
        let sender = WebhookSender(client: client, policy: configuration.policy)
        let state = SharedState(concurrency: configuration.concurrency, slowAfter: configuration.slowRequestAfter)
        let slots = AsyncSemaphore(configuration.databaseConnections)
        let builder = MessageBuilder(store: store, slots: slots)
        let context = Context(state: state, sender: sender, slots: slots, builder: builder)
        logger.info("webhook delivery started", metadata: ["webhooks.instance": "\(instance)"])
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask { await pollHead(context) }
                group.addTask { await housekeeping(context) }
                while !Task.isCancelled {
                    await renewLeases(context) { id in
                        group.addTask {
                            await runEndpoint(id, context)
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

    /// What the service's tasks share.
    struct Context: Sendable {
        let state: SharedState
        let sender: WebhookSender
        /// Bounds the database connections delivery holds at once (`databaseConnections`).
        let slots: AsyncSemaphore
        let builder: MessageBuilder

        /// Runs a store call within the delivery service's share of the pool.
        func db<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
            try await slots.run(body)
        }
    }

    // MARK: - Leases

    /// Renews held leases and takes free ones; starts a loop for each endpoint newly held.
    private func renewLeases(_ context: Context, start: (UUID) -> Void) async {
        let clock = ContinuousClock()
        let asked = clock.now
        let (store, instance, duration) = (self.store, self.instance, configuration.leaseDuration)
        do {
            let held = try await context.db {
                try await store.acquireLeases(instance: instance, duration: duration, limit: WebhookStore.maxEndpoints)
            }
            // By our own clock the lease lasts from before the query was sent: never longer than PostgreSQL's.
            for id in context.state.renewed(held, until: asked + duration) { start(id) }
        } catch  where Task.isCancelled {
        } catch {
            logger.warning("webhook leases not renewed", metadata: ["error.detail": "\(StoreError.classify(error))"])
        }
    }

    // MARK: - The feed's head

    private func pollHead(_ context: Context) async {
        let store = self.store
        while !Task.isCancelled {
            if let (head, edits) = try? await context.db({ try await store.pulse() }) {
                context.state.setPulse(head: head, edits: edits)
            }
            try? await Task.sleep(for: configuration.pollInterval)
        }
    }

    // MARK: - One endpoint

    /// What one endpoint's loop knows between its reads of the endpoint.
    struct EndpointProgress {
        /// The generation `heldSubscribers` was read under.
        var generation: Int64 = -1
        /// Subscribers with held messages: their later messages queue behind.
        var heldSubscribers: Set<String> = []
        var heldCount = 0
        /// Failures in a row; once probing, the earliest next attempt.
        var failuresInARow = 0
        var quietUntil: ContinuousClock.Instant? = nil
        /// When the earliest held message is due, as far as this loop knows.
        var heldDue: ContinuousClock.Instant? = nil

        mutating func succeeded() {
            failuresInARow = 0
            quietUntil = nil
        }

        mutating func failed(retryIn delay: Duration) {
            failuresInARow += 1
            let due = ContinuousClock.now + delay
            heldDue = heldDue.map { min($0, due) } ?? due
            if failuresInARow >= WebhookDeliveryService.probeAfterFailures { quietUntil = due }
        }

        var quiet: Bool { quietUntil.map { $0 > .now } ?? false }
    }

    /// Delivers to one endpoint while this instance holds its lease and it is active.
    private func runEndpoint(_ id: UUID, _ context: Context) async {
        let (state, store, instance) = (context.state, self.store, self.instance)
        var logger = self.logger
        logger[metadataKey: "webhooks.endpoint"] = "\(id.lowercasedString)"
        // The page being walked and its messages, kept across retries of held messages.
        var batch: Batch? = nil
        var progress = EndpointProgress()
        while !Task.isCancelled {
            guard state.leaseLeft(id) > configuration.responseTimeout + Self.leaseMargin else {
                if state.leaseLeft(id) <= .zero { return }
                try? await Task.sleep(for: .milliseconds(100))
                continue
            }
            do {
                // Read before the state: an edit after this is seen as a change while waiting.
                let edits = state.edits
                guard let current = try await context.db({ try await store.deliveryState(id, instance: instance) }) else { return }
                if progress.generation != current.generation {
                    let held = try await context.db { try await store.held(id) }
                    progress.generation = current.generation
                    progress.heldSubscribers = held.subscribers
                    progress.heldCount = held.count
                    batch = nil
                }
                progress.heldDue = current.nextHeldInMilliseconds.map { .now + .milliseconds($0) }
                if let quiet = progress.quietUntil, quiet > .now {
                    await state.wait(untilHeadPasses: nil, orEditsChangeFrom: edits, atMost: quiet - .now)
                    continue
                }
                if current.nextHeldInMilliseconds == 0 {
                    try await deliverHeld(current, edits: edits, context, progress: &progress, logger: logger)
                    continue
                }
                let untilHeldDue = progress.heldDue.map { max($0 - .now, .milliseconds(1)) } ?? .seconds(30)
                guard progress.heldCount < WebhookStore.maxHeldPerEndpoint else {
                    await state.wait(untilHeadPasses: nil, orEditsChangeFrom: edits, atMost: min(untilHeldDue, .seconds(30)))
                    continue
                }
                let cursor = current.endpoint.deliveredThrough
                if let kept = batch, kept.generation == current.generation, let rest = kept.after(cursor) {
                    batch = rest
                } else {
                    let page = try await context.db { try await store.feed(after: cursor, limit: Self.pageSize) }
                    if page.isEmpty {
                        batch = nil
                        await state.wait(untilHeadPasses: cursor, orEditsChangeFrom: edits, atMost: min(untilHeldDue, .seconds(30)))
                        continue
                    }
                    let wanted = Set(page.filter(current.endpoint.filter.wantsType).map(\.position))
                    let messages = try await context.builder.messages(page: page, wanted: wanted)
                    batch = Batch(generation: current.generation, page: page, messages: messages)
                }
                try await deliver(batch!, current, edits: edits, context, progress: &progress, logger: logger)
            } catch  where Task.isCancelled {
                return
            } catch {
                logger.warning("webhook delivery interrupted", metadata: ["error.detail": "\(StoreError.classify(error))"])
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Sends one message once a request slot is free. The lease is checked right before sending, and the
    /// request may not outlive it: another instance can never have a request in flight to this endpoint
    /// meanwhile. Nil when the lease is too short to start.
    private func send(_ message: WebhookMessage, _ current: WebhookDeliveryState, _ context: Context) async -> WebhookSender.Result? {
        let (timeout, state, sender) = (configuration.responseTimeout, context.state, context.sender)
        let endpoint = current.endpoint
        return await state.limited { () -> WebhookSender.Result? in
            let left = state.leaseLeft(endpoint.id) - Self.leaseMargin
            guard left > timeout else { return nil }
            return await sender.send(url: endpoint.url, message: message, secrets: current.secrets, timeout: min(timeout, left))
        }
    }

    /// Retries the held messages that are due, each the head of its subscriber's queue. Stops when the
    /// endpoint is edited, paused, disabled or fenced, or starts being probed.
    private func deliverHeld(
        _ current: WebhookDeliveryState, edits: Int64, _ context: Context, progress: inout EndpointProgress, logger: Logger
    ) async throws {
        let (store, instance, generation) = (self.store, self.instance, current.generation)
        let endpoint = current.endpoint
        let giveUp = configuration.retrySchedule.giveUpAfter
        let due = try await context.db { try await store.dueHeld(endpoint.id, limit: Self.heldPageSize) }
        for held in due {
            guard context.state.edits == edits, !progress.quiet else { return }
            let message = WebhookMessage(endpointID: endpoint.id, eventID: held.eventID, body: held.body)
            guard let result = await send(message, current, context) else { return }
            if Task.isCancelled && result.outcome != .delivered { return }
            let delay = configuration.retrySchedule.delay(afterFailures: held.failedAttempts + 1, random: Double.random(in: 0..<1))
            let attempt = WebhookAttempt(
                position: held.position, eventID: held.eventID, webhookID: message.id, outcome: result.outcome,
                httpStatus: result.httpStatus, latencyMilliseconds: result.latencyMilliseconds, error: result.error)
            Metrics.count(endpoint: endpoint.id, outcome: result.outcome)
            let recorded = try await context.db {
                try await store.recordHeld(endpoint.id, attempt, instance: instance, generation: generation, retryDelay: delay, giveUpAfter: giveUp)
            }
            switch recorded {
            case .delivered(let queued):
                progress.succeeded()
                progress.heldCount = max(0, progress.heldCount - 1)
                if !queued { progress.heldSubscribers.remove(held.subscriberID) }
            case .retry(let next):
                progress.failed(retryIn: delay)
                logger.info(
                    "webhook delivery failed",
                    metadata: [
                        "webhooks.position": "\(held.position)", "webhooks.attempt": "\(held.failedAttempts + 1)",
                        "webhooks.error": "\(result.error ?? "")", "webhooks.next_attempt": "\(next.rfc3339)",
                    ])
            case .paused:
                logger.info("webhook endpoint paused: retries exhausted", metadata: ["webhooks.position": "\(held.position)"])
                return
            case .disabled:
                logger.warning("webhook endpoint disabled: it answered 410 Gone", metadata: ["webhooks.position": "\(held.position)"])
                return
            case .stale:
                return
            }
        }
    }

    /// Walks one page of the feed: passes over what the filters exclude, queues the messages of subscribers
    /// with held ones behind them, delivers the rest in order, and holds a message that fails (its subscriber
    /// waits; the others do not). Returns when a held message falls due, so retries are not starved.
    ///
    /// A delivered event's record (the cursor's move and its log row) is written while the next event is
    /// sent, never before the previous record is done, so the endpoint still sees one request at a time in
    /// position order and the cursor moves only past events answered 2xx or held.
    private func deliver(
        _ batch: Batch, _ current: WebhookDeliveryState, edits: Int64, _ context: Context, progress: inout EndpointProgress,
        logger: Logger
    ) async throws {
        let endpoint = current.endpoint
        let filter = endpoint.filter
        let (store, instance, generation) = (self.store, self.instance, current.generation)
        var passedOver: Int64? = nil
        var pending: Task<WebhookStore.Recorded, any Error>? = nil
        /// Delivered attempts not yet recorded: recorded `recordBatch` at a time, in the background while the
        /// next messages go out (one record in flight at most), and all of them before anything else moves
        /// the endpoint (a skip, a hold, a failure) and at the end of the walk.
        var delivered: [WebhookAttempt] = []
        let slots = context.slots
        /// Waits for the record in flight; false if the lease or generation moved meanwhile.
        func inFlightSettled() async throws -> Bool {
            guard let task = pending else { return true }
            pending = nil
            return try await task.value != .stale
        }
        /// Starts recording the delivered attempts in the background, after the record in flight.
        func recordDelivered() async throws -> Bool {
            guard try await inFlightSettled() else { return false }
            guard !delivered.isEmpty else { return true }
            let attempts = delivered
            delivered = []
            pending = Task {
                try await slots.run {
                    try await store.recordDelivered(
                        endpoint.id, attempts, through: attempts.map(\.position).max() ?? 0, instance: instance, generation: generation)
                }
            }
            return true
        }
        /// Every delivered attempt recorded; false if the lease or generation moved meanwhile.
        func settled() async throws -> Bool {
            guard try await recordDelivered() else { return false }
            return try await inFlightSettled()
        }
        for event in batch.page {
            guard filter.wantsType(event), let built = batch.messages[event.position], filter.matches(event, changes: built.changes)
            else {
                passedOver = event.position
                continue
            }
            if let p = passedOver {
                guard try await settled(),
                    try await context.db({ try await store.skip(endpoint.id, through: p, instance: instance, generation: generation) })
                else { return }
                passedOver = nil
            }
            // An endpoint edited or given a new secret since its state was read: read it again first.
            guard context.state.edits == edits else { break }
            if progress.heldSubscribers.contains(event.subscriberID) {
                guard progress.heldCount < WebhookStore.maxHeldPerEndpoint, try await settled() else { break }
                let queued = try await context.db {
                    try await store.hold(
                        endpoint.id, position: event.position, eventID: event.eventID, subscriberID: event.subscriberID, body: built.body,
                        through: event.position, instance: instance, generation: generation)
                }
                guard queued else { return }
                progress.heldCount += 1
                continue
            }
            if progress.quiet || (progress.heldDue.map { $0 <= .now } ?? false) { break }
            let message = WebhookMessage(endpointID: endpoint.id, eventID: event.eventID, body: built.body)
            guard let result = await send(message, current, context) else { break }
            if Task.isCancelled && result.outcome != .delivered { return }
            let delay = configuration.retrySchedule.delay(afterFailures: 1, random: Double.random(in: 0..<1))
            let attempt = WebhookAttempt(
                position: event.position, eventID: event.eventID, webhookID: message.id, outcome: result.outcome,
                httpStatus: result.httpStatus, latencyMilliseconds: result.latencyMilliseconds, error: result.error)
            Metrics.count(endpoint: endpoint.id, outcome: result.outcome)
            if result.outcome == .delivered {
                progress.succeeded()
                delivered.append(attempt)
                if delivered.count >= Self.recordBatch { guard try await recordDelivered() else { return } }
                continue
            }
            guard try await settled() else { return }
            let (giveUp, subscriber, body) = (configuration.retrySchedule.giveUpAfter, event.subscriberID, built.body)
            let recorded = try await slots.run {
                try await store.record(
                    endpoint.id, attempt, subscriberID: subscriber, body: body, through: event.position, instance: instance,
                    generation: generation, retryDelay: delay, giveUpAfter: giveUp)
            }
            guard case .applied(let next, _) = recorded else { return }
            if result.outcome == .gone {
                logger.warning("webhook endpoint disabled: it answered 410 Gone", metadata: ["webhooks.position": "\(event.position)"])
                return
            }
            progress.heldSubscribers.insert(event.subscriberID)
            progress.heldCount += 1
            progress.failed(retryIn: delay)
            logger.info(
                "webhook delivery failed; its subscriber's later messages wait behind it",
                metadata: [
                    "webhooks.position": "\(event.position)", "webhooks.attempt": "1", "webhooks.error": "\(result.error ?? "")",
                    "webhooks.next_attempt": "\(next.map(\.rfc3339) ?? "none")",
                ])
        }
        guard try await settled() else { return }
        if let p = passedOver {
            _ = try await context.db { try await store.skip(endpoint.id, through: p, instance: instance, generation: generation) }
        }
    }

    // MARK: - Housekeeping

    /// Lag gauges every few seconds; the deliveries log pruned every minute (by age and by count).
    private func housekeeping(_ context: Context) async {
        let (store, retention) = (self.store, configuration.deliveriesRetention)
        var lastPrune = ContinuousClock.now - .seconds(3600)
        while !Task.isCancelled {
            if let endpoints = try? await context.db({ try await store.statistics() }) {
                Metrics.report(endpoints)
            }
            if ContinuousClock.now - lastPrune > .seconds(60) {
                lastPrune = ContinuousClock.now
                do {
                    try await context.db { try await store.prune(olderThan: retention) }
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

/// A page of the feed with the messages (built once for every endpoint) of the events the endpoint's type
/// filter wants, read under one generation of the endpoint.
struct Batch {
    var generation: Int64
    var page: [RecordedEvent]
    var messages: [Int64: MessageBuilder.Built]

    /// The part after `cursor`, if the page reaches past it and starts at or before it (else a new read).
    func after(_ cursor: Int64) -> Batch? {
        guard let first = page.first, first.position <= cursor + 1, let last = page.last, last.position > cursor else { return nil }
        return Batch(generation: generation, page: page.filter { $0.position > cursor }, messages: messages)
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
    /// A request in flight longer than this gives its slot back (it keeps running).
    let slowAfter: Duration

    init(concurrency: Int, slowAfter: Duration = .milliseconds(500)) {
        self.concurrency = max(1, concurrency)
        self.slowAfter = slowAfter
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

    /// Runs `body` once fewer than `concurrency` others hold a slot. A request still running after
    /// `slowAfter` gives its slot back and runs on outside the limit: slow receivers (each endpoint has at
    /// most one request in flight) cannot hold the slots that fast ones need.
    func limited<T: Sendable>(_ body: @escaping @Sendable () async -> T) async -> T {
        await acquire()
        let slot = SlotRelease(self)
        defer { slot.release() }
        return await withTaskGroup(of: Finished<T>.self) { group in
            group.addTask { .value(await body()) }
            group.addTask {
                try? await Task.sleep(for: self.slowAfter)
                return .slow
            }
            while let next = await group.next() {
                switch next {
                case .value(let v):
                    group.cancelAll()
                    return v
                case .slow:
                    slot.release()
                }
            }
            fatalError("the request's task always finishes with a value")
        }
    }

    private enum Finished<T: Sendable>: Sendable {
        case value(T)
        case slow
    }

    /// Releases a slot once, whichever of the slow timer and the end of the request comes first.
    private final class SlotRelease: Sendable {
        let owner: SharedState
        let done = Mutex(false)
        init(_ owner: SharedState) { self.owner = owner }
        func release() {
            let first = done.withLock { d -> Bool in
                defer { d = true }
                return !d
            }
            if first { owner.release() }
        }
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
    /// Endpoints this process has metrics for: those of deleted endpoints are removed at the next report.
    private static let known = Mutex<Set<UUID>>([])
    static let outcomes: [WebhookDelivery.Outcome] = [.delivered, .failed, .gone]
    static let gauges = [
        "subledger_webhook_lag_positions", "subledger_webhook_lag_seconds", "subledger_webhook_failing", "subledger_webhook_held_messages",
    ]

    static func count(endpoint: UUID, outcome: WebhookDelivery.Outcome) {
        known.withLock { _ = $0.insert(endpoint) }
        Counter(label: "subledger_webhook_deliveries_total", dimensions: [("endpoint", endpoint.lowercasedString), ("outcome", outcome.rawValue)])
            .increment()
    }

    /// Lag gauges of every endpoint; every metric of endpoints deleted since is removed.
    static func report(_ endpoints: [WebhookEndpoint]) {
        for e in endpoints {
            let d = [("endpoint", e.id.lowercasedString)]
            Gauge(label: "subledger_webhook_lag_positions", dimensions: d).record(Double(e.lagPositions))
            Gauge(label: "subledger_webhook_lag_seconds", dimensions: d).record(e.lagSeconds)
            Gauge(label: "subledger_webhook_failing", dimensions: d).record(e.status == .failing ? 1 : 0)
            Gauge(label: "subledger_webhook_held_messages", dimensions: d).record(Double(e.heldMessages))
        }
        let now = Set(endpoints.map(\.id))
        let gone = known.withLock { k -> Set<UUID> in
            let gone = k.subtracting(now)
            k = now
            return gone
        }
        for id in gone {
            let d = [("endpoint", id.lowercasedString)]
            for name in gauges { Gauge(label: name, dimensions: d).destroy() }
            for outcome in outcomes {
                Counter(label: "subledger_webhook_deliveries_total", dimensions: d + [("outcome", outcome.rawValue)]).destroy()
            }
        }
    }
}
