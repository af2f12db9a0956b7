import LedgerCore
import LedgerStore
import Synchronization

/// Builds each event's message body once for every endpoint, folding each subscriber's stream one event at a
/// time.
///
/// A message needs the subscriber's fold just before its event and just after. Folding the whole stream
/// again per event made delivery quadratic in a subscriber's size (4,000 events of one subscriber took 400 s
/// of CPU), and every endpoint and replay repeated it. Here a subscriber's fold is kept after the last event
/// built and extended by the next ones; the stream is read from PostgreSQL only for a subscriber not kept
/// (or kept at an older version) whose stream began before the page (a new subscriber's first event, version
/// 1, needs no read), and folded whole again only for a late fact (an event that sorts before
/// one already folded; its stream is read once per page however many late facts the page holds). Bodies are cached by position for the endpoints that walk the same stretch of the
/// feed, and builds run one at a time, so concurrent endpoints wait for one build instead of each doing it.
final class MessageBuilder: Sendable {
    /// What every endpoint needs of one event's message: the changes (for the entitlement filter) and the body.
    struct Built: Sendable {
        var changes: [EntitlementChange]
        var body: [UInt8]
    }

    /// Cached bodies at most (bytes) and folds kept at most (subscribers).
    static let maxCachedBytes = 32 << 20
    static let maxFolds = 2_000

    private struct Cache {
        var built: [Int64: Built] = [:]
        var order: [Int64] = []
        var orderStart = 0
        var bytes = 0
        var folds: [String: IncrementalFold] = [:]

        mutating func insert(_ position: Int64, _ b: Built) {
            guard built.updateValue(b, forKey: position) == nil else { return }
            order.append(position)
            bytes += b.body.count + 64
            while bytes > MessageBuilder.maxCachedBytes, orderStart < order.count {
                if let old = built.removeValue(forKey: order[orderStart]) { bytes -= old.body.count + 64 }
                orderStart += 1
            }
            if orderStart > 4096 && orderStart * 2 > order.count {
                order.removeFirst(orderStart)
                orderStart = 0
            }
        }

        mutating func keep(_ fold: IncrementalFold, for subscriber: String) {
            if folds.count >= MessageBuilder.maxFolds && folds[subscriber] == nil { folds.removeAll(keepingCapacity: true) }
            folds[subscriber] = fold
        }
    }

    private let cache = Mutex(Cache())
    /// One build at a time.
    private let gate = AsyncSemaphore(1)
    /// Reads streams (every event of each subscriber up to a position, inclusive).
    private let readStreams: @Sendable (Set<String>, Int64) async throws -> [String: [FoldEvent]]

    init(store: WebhookStore, slots: AsyncSemaphore) {
        self.readStreams = { subscribers, position in
            try await slots.run { try await store.streams(subscribers, through: position) }
        }
    }

    init(readStreams: @escaping @Sendable (Set<String>, Int64) async throws -> [String: [FoldEvent]]) {
        self.readStreams = readStreams
    }

    /// The messages of the `wanted` positions of `page` (a contiguous stretch of the feed, in order).
    func messages(page: [RecordedEvent], wanted: Set<Int64>) async throws -> [Int64: Built] {
        if let all = cached(wanted) { return all }
        return try await gate.run {
            if let all = cached(wanted) { return all }
            return try await build(page: page, wanted: wanted)
        }
    }

    private func cached(_ wanted: Set<Int64>) -> [Int64: Built]? {
        cache.withLock { c in
            var out: [Int64: Built] = [:]
            for p in wanted {
                guard let b = c.built[p] else { return nil }
                out[p] = b
            }
            return out
        }
    }

    private func build(page: [RecordedEvent], wanted: Set<Int64>) async throws -> [Int64: Built] {
        guard let first = page.first else { return [:] }
        var out: [Int64: Built] = [:]
        var missing: Set<Int64> = []
        var folds: [String: IncrementalFold] = [:]
        cache.withLock { c in
            for p in wanted {
                if let b = c.built[p] { out[p] = b } else { missing.insert(p) }
            }
        }
        guard !missing.isEmpty else { return out }
        // Every event of the page of each subscriber with a message to build, in position order: events the
        // endpoint does not want still change the fold.
        let subscribers = Set(page.lazy.filter { missing.contains($0.position) }.map(\.subscriberID))
        var streams: [String: [RecordedEvent]] = [:]
        for e in page where subscribers.contains(e.subscriberID) { streams[e.subscriberID, default: []].append(e) }
        var unread: Set<String> = []
        cache.withLock { c in
            for (s, events) in streams {
                if let f = c.folds[s], f.version == events[0].version - 1 {
                    folds[s] = f
                } else if events[0].version == 1 {
                    // The stream starts in this page: nothing before it to read.
                    folds[s] = IncrementalFold()
                } else {
                    unread.insert(s)
                }
            }
        }
        if !unread.isEmpty {
            let read = try await readStreams(unread, first.position - 1)
            for s in unread { folds[s] = IncrementalFold(read[s] ?? []) }
        }
        let last = page.last!.position
        for (s, events) in streams {
            var fold = folds[s] ?? IncrementalFold()
            var before: SubscriberLedger? = nil
            // The subscriber's stream through the page, read at its first late fact: once per page, not per fact.
            var whole: [FoldEvent]? = nil
            for e in events {
                let wantedHere = missing.contains(e.position)
                if wantedHere && before == nil { before = fold.ledger }
                if !fold.apply(FoldEvent(e)) {
                    // A late fact: it sorts before an event already folded, so the stream is folded again.
                    if whole == nil { whole = try await readStreams([s], last)[s] ?? [] }
                    fold = IncrementalFold(whole!.filter { $0.position <= e.position })
                }
                guard wantedHere, let earlier = before else {
                    before = nil
                    continue
                }
                let after = fold.ledger
                let states = after.entitlements(at: e.occurredAt)
                let changes = EntitlementChange.between(earlier, after, at: e.occurredAt, afterStates: states)
                let body = WebhookMessage.payload(event: e, entitlements: states, changes: changes).canonicalBytes()
                out[e.position] = Built(changes: changes, body: body)
                before = after
            }
            folds[s] = fold
        }
        cache.withLock { c in
            for p in missing { if let b = out[p] { c.insert(p, b) } }
            for (s, f) in folds { c.keep(f, for: s) }
        }
        return out
    }
}

/// A counting semaphore for async code: at most `limit` holders at once, the others wait in order.
final class AsyncSemaphore: Sendable {
    private struct State {
        var available: Int
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let state: Mutex<State>

    init(_ limit: Int) {
        state = Mutex(State(available: max(1, limit)))
    }

    func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        await acquire()
        defer { release() }
        return try await body()
    }

    func acquire() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.available > 0 {
                    s.available -= 1
                    return true
                }
                s.waiting.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiting.isEmpty {
                s.available += 1
                return nil
            }
            return s.waiting.removeFirst()
        }
        next?.resume()
    }
}
