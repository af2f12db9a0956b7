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
/// the endpoint's cursor with up to `endpointConcurrency` requests in flight, each for a different subscriber
/// (docs/webhooks.md).
///
/// At least once, in order per subscriber: a subscriber's next message goes only once its previous one was
/// answered 2xx or held for a retry (`webhook_held`); a subscriber's later messages queue behind its held
/// one, the others' keep flowing. The cursor moves only over events that were all delivered, held or passed
/// over, never past one still in flight. A crash between a send and its record sends that message again
/// (same `webhook-id`, same body). Each event's message is built once, by one `MessageBuilder` for every
/// endpoint, folding each subscriber's stream incrementally. Leases live in PostgreSQL and are renewed every
/// `leaseInterval`; an instance starts an attempt only while its lease has at least the response timeout left
/// by its own monotonic clock, so two instances never deliver to one endpoint at the same time, and a killed
/// instance's endpoints are taken over when its leases expire.
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
        // Each endpoint has `endpointConcurrency` requests in flight at most, so endpoints are the limit: with the
        // client's own per-host limit (8), endpoints on one host that answer slowly would queue everyone else's
        // requests to that host behind theirs.
        httpConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit =
            WebhookStore.maxEndpoints * max(1, configuration.endpointConcurrency)
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
                group.addTask { await state.releaseSlowRequests() }
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
        /// Positions above the cursor already delivered, held or passed over under `generation`: answers that
        /// came back above one still in flight when a walk stopped. The next walk passes them over.
        var settled: Set<Int64> = []
        /// Requests the walk may have in flight: one at first, doubled by each success up to `maxWindow`,
        /// halved by each failure. A receiver not yet reached, failing or answering 410 gets one request
        /// before it gets eight.
        var window = 1
        let maxWindow: Int

        init(maxWindow: Int) {
            self.maxWindow = max(1, maxWindow)
        }

        mutating func succeeded() {
            failuresInARow = 0
            quietUntil = nil
            window = min(maxWindow, window * 2)
        }

        mutating func failed(retryIn delay: Duration) {
            window = max(1, window / 2)
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
        var progress = EndpointProgress(maxWindow: configuration.endpointConcurrency)
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
                    progress.settled = []
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
                // What the walk knew may not all be recorded: read the state again, and send again rather than skip.
                progress.generation = -1
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
        return await state.limited(endpoint: endpoint.id) { () -> WebhookSender.Result? in
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

    /// A request of the walk and what came of it: nil when the lease was too short for it to start.
    struct Answer: Sendable {
        var event: RecordedEvent
        var message: WebhookMessage
        var result: WebhookSender.Result?
    }

    /// Walks one page of the feed with up to `endpointConcurrency` requests in flight (`progress.window`),
    /// each of a different subscriber: passes over what the filters exclude, queues the messages of
    /// subscribers with held ones behind them, sends a subscriber's next message only once its previous one
    /// was answered 2xx or held, and holds a message that fails (its subscriber waits; the others do not).
    /// Returns when a held message falls due, so retries are not starved, and at the page's end once every
    /// request is answered.
    ///
    /// Answers come back in any order, so the cursor moves only to the end of the page's settled prefix
    /// (`Frontier`): an answer above a request still in flight is logged, and the cursor waits below that
    /// request. What is settled above the cursor is kept in `progress` for the next walk, not sent again.
    /// Delivered attempts are recorded `recordBatch` at a time in the background (one record in flight at
    /// most), and all of them before a hold or a skip moves the endpoint: the cursor never passes a success
    /// that is not logged.
    private func deliver(
        _ batch: Batch, _ current: WebhookDeliveryState, edits: Int64, _ context: Context, progress: inout EndpointProgress,
        logger: Logger
    ) async throws {
        let endpoint = current.endpoint
        let filter = endpoint.filter
        let (store, instance, generation) = (self.store, self.instance, current.generation)
        let slots = context.slots
        progress.settled = progress.settled.filter { $0 > endpoint.deliveredThrough }
        var frontier = Frontier(cursor: endpoint.deliveredThrough, page: batch.page)
        frontier.advance(over: progress.settled)
        /// The cursor as last written (or being written) by this walk.
        var moved = endpoint.deliveredThrough
        var pending: Task<WebhookStore.Recorded, any Error>? = nil
        /// Delivered attempts not yet recorded.
        var delivered: [WebhookAttempt] = []
        /// Subscribers with a request in flight, or whose next message is in `ready`.
        var busy: Set<String> = []
        /// Messages of busy subscribers, in position order, each waiting for the one before it.
        var waiting: [String: [RecordedEvent]] = [:]
        /// Messages whose subscriber's previous one was just settled: they go before the rest of the page.
        var ready: [RecordedEvent] = []
        var (next, inFlight) = (0, 0)
        /// No new request or hold starts: the endpoint changed, a held message fell due, probing began, the lease
        /// is too short, or the service stops. The requests in flight are still answered and recorded.
        var stopping = false
        /// The lease or the generation moved (or the endpoint answered 410): nothing more is recorded.
        var fenced = false
        defer { if fenced { progress.settled.removeAll() } }
        func settle(_ position: Int64) {
            progress.settled.insert(position)
            frontier.advance(over: progress.settled)
        }
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
            let (attempts, through) = (delivered, frontier.through)
            delivered = []
            moved = max(moved, through)
            pending = Task {
                try await slots.run {
                    try await store.recordDelivered(endpoint.id, attempts, through: through, instance: instance, generation: generation)
                }
            }
            return true
        }
        /// Every delivered attempt recorded; false if the lease or generation moved meanwhile.
        func settled() async throws -> Bool {
            guard try await recordDelivered() else { return false }
            return try await inFlightSettled()
        }

        try await withThrowingTaskGroup(of: Answer.self) { group in
            func fence() {
                (fenced, stopping) = (true, true)
                group.cancelAll()
            }
            /// The subscriber's previous message is settled: its next waiting one may go.
            func release(_ subscriber: String) {
                guard var queue = waiting.removeValue(forKey: subscriber), !queue.isEmpty else {
                    busy.remove(subscriber)
                    return
                }
                ready.append(queue.removeFirst())
                if !queue.isEmpty { waiting[subscriber] = queue }
            }
            /// Holds or sends a message whose subscriber has nothing in flight.
            func start(_ event: RecordedEvent, _ built: MessageBuilder.Built) async throws {
                let subscriber = event.subscriberID
                busy.insert(subscriber)
                if progress.heldSubscribers.contains(subscriber) {
                    guard progress.heldCount < WebhookStore.maxHeldPerEndpoint else {
                        stopping = true
                        return
                    }
                    guard try await settled() else { return fence() }
                    let through = frontier.through
                    let queued = try await context.db {
                        try await store.hold(
                            endpoint.id, position: event.position, eventID: event.eventID, subscriberID: subscriber, body: built.body,
                            through: through, instance: instance, generation: generation)
                    }
                    guard queued else { return fence() }
                    moved = max(moved, through)
                    progress.heldCount += 1
                    settle(event.position)
                    return release(subscriber)
                }
                if progress.quiet || (progress.heldDue.map { $0 <= .now } ?? false) {
                    stopping = true
                    return
                }
                let message = WebhookMessage(endpointID: endpoint.id, eventID: event.eventID, body: built.body)
                inFlight += 1
                group.addTask { Answer(event: event, message: message, result: await send(message, current, context)) }
            }
            /// Records an answer: a success joins the next batch, a failure is held (410 disables the endpoint).
            func handle(_ answer: Answer) async throws {
                inFlight -= 1
                let event = answer.event
                guard !fenced else { return }
                // Not sent (the lease is too short), or failed because the service stops: left for the next walk.
                guard let result = answer.result, !Task.isCancelled || result.outcome == .delivered else {
                    stopping = true
                    return
                }
                let attempt = WebhookAttempt(
                    position: event.position, eventID: event.eventID, webhookID: answer.message.id, outcome: result.outcome,
                    httpStatus: result.httpStatus, latencyMilliseconds: result.latencyMilliseconds, error: result.error)
                Metrics.count(endpoint: endpoint.id, outcome: result.outcome)
                if result.outcome == .delivered {
                    progress.succeeded()
                    delivered.append(attempt)
                    settle(event.position)
                    release(event.subscriberID)
                    if delivered.count >= Self.recordBatch { guard try await recordDelivered() else { return fence() } }
                    return
                }
                guard try await settled() else { return fence() }
                let delay = configuration.retrySchedule.delay(afterFailures: 1, random: Double.random(in: 0..<1))
                let giveUp = configuration.retrySchedule.giveUpAfter
                let (subscriber, body, through) = (event.subscriberID, answer.message.body, frontier.through)
                let recorded = try await slots.run {
                    try await store.record(
                        endpoint.id, attempt, subscriberID: subscriber, body: body, through: through, instance: instance,
                        generation: generation, retryDelay: delay, giveUpAfter: giveUp)
                }
                guard case .applied(let next, _) = recorded else { return fence() }
                if result.outcome == .gone {
                    logger.warning("webhook endpoint disabled: it answered 410 Gone", metadata: ["webhooks.position": "\(event.position)"])
                    return fence()
                }
                moved = max(moved, through)
                progress.heldSubscribers.insert(subscriber)
                progress.heldCount += 1
                progress.failed(retryIn: delay)
                settle(event.position)
                release(subscriber)
                logger.info(
                    "webhook delivery failed; its subscriber's later messages wait behind it",
                    metadata: [
                        "webhooks.position": "\(event.position)", "webhooks.attempt": "1", "webhooks.error": "\(result.error ?? "")",
                        "webhooks.next_attempt": "\(next.map(\.rfc3339) ?? "none")",
                    ])
            }

            while true {
                // An endpoint edited or given a new secret since its state was read: read it again first.
                if !stopping && (Task.isCancelled || context.state.edits != edits) { stopping = true }
                if !stopping && inFlight < progress.window {
                    if !ready.isEmpty {
                        let event = ready.removeFirst()
                        if let built = batch.messages[event.position] { try await start(event, built) }
                        continue
                    }
                    if next < batch.page.count {
                        let event = batch.page[next]
                        next += 1
                        // Settled by an earlier walk, above what was then the cursor.
                        if progress.settled.contains(event.position) { continue }
                        guard filter.wantsType(event), let built = batch.messages[event.position], filter.matches(event, changes: built.changes)
                        else {
                            settle(event.position)
                            continue
                        }
                        if busy.contains(event.subscriberID) {
                            waiting[event.subscriberID, default: []].append(event)
                            continue
                        }
                        try await start(event, built)
                        continue
                    }
                }
                guard inFlight > 0, let answer = try await group.next() else { break }
                try await handle(answer)
            }
        }
        guard !fenced else { return }
        guard try await settled() else {
            fenced = true
            return
        }
        // Events passed over at the end of the walk: nothing else moved the cursor past them.
        if frontier.through > moved {
            let through = frontier.through
            let skipped = try await context.db { try await store.skip(endpoint.id, through: through, instance: instance, generation: generation) }
            fenced = !skipped
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

/// The end of a page's settled prefix: the last position up to which every event of the page was delivered,
/// held or passed over. The cursor may move there and no further; answers above a gap wait for it to close.
struct Frontier {
    private(set) var through: Int64
    private let positions: [Int64]
    private var next = 0

    /// `page`: the feed's events right after `cursor`, in position order.
    init(cursor: Int64, page: [RecordedEvent]) {
        through = cursor
        positions = page.map(\.position)
    }

    mutating func advance(over settled: Set<Int64>) {
        while next < positions.count, settled.contains(positions[next]) {
            through = positions[next]
            next += 1
        }
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
        /// Requests running per endpoint, those past `slowAfter` included.
        var requests: [UUID: Int] = [:]
        var waiting: [(endpoint: UUID, continuation: CheckedContinuation<Void, Never>)] = []
        var sleepers: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextSleeper = 0
        /// Sleepers whose sleep ended before they registered.
        var abandoned: Set<Int> = []
        /// Requests holding a slot, by token: when each started (`releaseSlowRequests`).
        var watched: [Int: (since: ContinuousClock.Instant, slot: SlotRelease)] = [:]
        var nextWatch = 0
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
    /// `slowAfter` gives its slot back and runs on outside the limit: slow receivers cannot hold the slots
    /// that fast ones need. A free slot goes to the endpoint with the fewest requests running (the first come
    /// among equals), so a slow endpoint's several requests in flight never queue a fast endpoint's one.
    func limited<T: Sendable>(endpoint: UUID, _ body: () async -> T) async -> T {
        await acquire(endpoint)
        let slot = SlotRelease(self)
        let token = state.withLock { s -> Int in
            s.nextWatch += 1
            s.watched[s.nextWatch] = (ContinuousClock.now, slot)
            return s.nextWatch
        }
        defer {
            _ = state.withLock { $0.watched.removeValue(forKey: token) }
            finished(request: endpoint)
            slot.release()
        }
        return await body()
    }

    /// Gives back the slots of the requests running longer than `slowAfter` (they run on outside the limit).
    /// One timer for every request: a timer armed and cancelled per request, in a task of its own, was about a
    /// tenth of delivery's CPU (`perf`, BENCHMARKS.md).
    func releaseSlowRequests() async {
        let tick = min(slowAfter / 5, .milliseconds(100))
        while !Task.isCancelled {
            try? await Task.sleep(for: tick)
            let now = ContinuousClock.now
            let slow = state.withLock { s -> [SlotRelease] in
                var out: [SlotRelease] = []
                for (token, w) in s.watched where now - w.since >= slowAfter {
                    out.append(w.slot)
                    s.watched[token] = nil
                }
                return out
            }
            for slot in slow { slot.release() }
        }
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

    private func acquire(_ endpoint: UUID) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.inFlight < concurrency {
                    s.inFlight += 1
                    s.requests[endpoint, default: 0] += 1
                    return true
                }
                s.waiting.append((endpoint, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    private func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            let (requests, waiting) = (s.requests, s.waiting)
            guard let i = waiting.indices.min(by: { (requests[waiting[$0].endpoint] ?? 0) < (requests[waiting[$1].endpoint] ?? 0) }) else {
                s.inFlight -= 1
                return nil
            }
            let next = s.waiting.remove(at: i)
            s.requests[next.endpoint, default: 0] += 1
            return next.continuation
        }
        next?.resume()
    }

    private func finished(request endpoint: UUID) {
        state.withLock { s in
            let left = (s.requests[endpoint] ?? 1) - 1
            s.requests[endpoint] = left > 0 ? left : nil
        }
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
