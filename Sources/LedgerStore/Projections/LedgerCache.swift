import Foundation
import LedgerCore
import Synchronization

/// Subscribers' projected ledgers kept in memory, so an entitlement read needs no database round trip.
///
/// Bounded by an estimate of the bytes it holds (`byteBudget`), split over shards with CLOCK eviction, so
/// the server's memory stays flat whatever the ledger's size. Correctness comes from invalidation, never
/// from a TTL: this process's appends invalidate their subscribers before they answer, other processes'
/// appends arrive through `ProjectionChanges` (LISTEN), and while that listener is not connected the cache
/// is disabled (every read goes to PostgreSQL). A read that raced with an invalidation does not store what
/// it read: each shard counts its invalidations, and a load stores only if the count did not move.
///
/// Every entry knows the ledger position it was read at, and the cache knows the position up to which it
/// has heard of every change (`heard`), so an entry answers a read that needs position `p` only if it
/// reflects at least `p` (docs/scaling.md, read-your-writes). With read replicas, a load may come from a
/// replica that is behind a change this server already heard of (NOTIFY is not delivered on standbys), so
/// each shard also remembers the last change heard per subscriber (`recent`) until every replica has passed
/// it, and a load older than that is neither stored nor, by the reader, accepted.
public final class LedgerCache: Sendable {
    /// What a load must hand back to `store`: the shard's invalidation count when the load began, and the
    /// position the load must reflect (the last change heard of for its subscriber).
    public struct Ticket: Sendable {
        let shard: Int
        let epoch: UInt64
        let generation: UInt64
        /// The loaded ledger must reflect at least this position to be stored (and to be answered).
        public let floor: Int64
    }

    private struct Slot {
        var key: String
        var ledger: SubscriberLedger
        var cost: Int
        var referenced: Bool
        /// The ledger position the ledger was read at (it reflects every event up to at least this one).
        var position: Int64
    }

    private struct Shard {
        var index: [String: Int] = [:]
        var slots: [Slot?] = []
        var free: [Int] = []
        var hand = 0
        var bytes = 0
        var epoch: UInt64 = 0
        /// The last change heard of per subscriber, kept while some replica may still be behind it.
        var recent: [String: Int64] = [:]
        /// Changes forgotten from `recent` (when it overflowed) were at most at this position.
        var recentFloor: Int64 = 0

        mutating func remove(at position: Int) {
            guard let slot = slots[position] else { return }
            index[slot.key] = nil
            bytes -= slot.cost
            slots[position] = nil
            free.append(position)
        }

        /// Evicts unreferenced slots (giving referenced ones a second chance) until `cost` more bytes fit.
        mutating func makeRoom(for cost: Int, budget: Int) {
            var steps = 0
            while bytes + cost > budget, index.count > 0, steps < 2 * slots.count + 1 {
                if hand >= slots.count { hand = 0 }
                if let slot = slots[hand] {
                    if slot.referenced { slots[hand]!.referenced = false } else { remove(at: hand) }
                }
                hand += 1
                steps += 1
            }
        }
    }

    private final class ShardLock: Sendable {
        private let shard = Mutex(Shard())
        func withLock<T>(_ body: (inout Shard) -> T) -> T { shard.withLock { body(&$0) } }
    }

    private static let shardCount = 64
    /// Approximate bytes of the whole cache at most.
    public let byteBudget: Int
    private let shardBudget: Int
    private let shards: [ShardLock]
    /// Bumped by `reset` and by every enable/disable: a load that spans one stores nothing.
    private let generation = Atomic<UInt64>(0)
    private let enabled = Atomic<Bool>(false)
    private let hits = Atomic<Int>(0)
    private let misses = Atomic<Int>(0)
    /// Every change up to this position has been applied (invalidated) by the change listener.
    private let heardPosition = Atomic<Int64>(0)
    /// Whether loads may come from replicas, so that `recent` must be kept (see the type's doc).
    public let tracksRecentChanges: Bool
    /// Subscribers remembered in `recent` per shard at most; beyond, the shard keeps one floor for all.
    static let recentPerShard = 4096

    /// A cache of at most about `byteBudget` bytes; it starts disabled until `enable()`. `tracksRecentChanges`
    /// when reads may be served by replicas.
    public init(byteBudget: Int, tracksRecentChanges: Bool = false) {
        self.byteBudget = byteBudget
        self.tracksRecentChanges = tracksRecentChanges
        self.shardBudget = max(1, byteBudget / Self.shardCount)
        self.shards = (0..<Self.shardCount).map { _ in ShardLock() }
    }

    public var isEnabled: Bool { enabled.load(ordering: .acquiring) }

    /// The position up to which every change has been heard of and invalidated.
    public var heard: Int64 { heardPosition.load(ordering: .acquiring) }

    /// Starts serving and storing; called once invalidations are known to arrive for every change after `position`.
    public func enable(heard position: Int64 = 0) {
        // Changes up to `position` may have gone unheard while disabled: no load older than it is kept.
        reset(changedUpTo: position)
        heardPosition.store(position, ordering: .releasing)
        enabled.store(true, ordering: .releasing)
    }

    /// Every change up to `position` has been invalidated (called by the listener after it did so).
    public func advance(heard position: Int64) {
        var current = heardPosition.load(ordering: .acquiring)
        while current < position {
            let (exchanged, original) = heardPosition.compareExchange(
                expected: current, desired: position, ordering: .acquiringAndReleasing)
            if exchanged { return }
            current = original
        }
    }

    /// Stops serving and storing and forgets everything: invalidations may be missed from now on.
    public func disable() {
        enabled.store(false, ordering: .releasing)
        reset()
    }

    /// Forgets every subscriber after changes up to `position` that were not read one by one (a bulk
    /// import, a rebuild): with replicas, no load older than that is kept.
    public func reset(changedUpTo position: Int64) {
        // Floors first: a load that began before the reset is dropped by it, one after it sees the floor.
        if tracksRecentChanges {
            for shard in shards { shard.withLock { $0.recentFloor = max($0.recentFloor, position) } }
        }
        reset()
    }

    /// Forgets every subscriber (a rebuild replaced the projection, or changes may have been missed).
    public func reset() {
        generation.wrappingAdd(1, ordering: .acquiringAndReleasing)
        for shard in shards {
            shard.withLock { s in
                let (epoch, recent, floor) = (s.epoch &+ 1, s.recent, s.recentFloor)
                s = Shard()
                // Replicas are no nearer to the changes heard of: keep those.
                (s.epoch, s.recent, s.recentFloor) = (epoch, recent, floor)
            }
        }
    }

    /// Forgets these subscribers, each changed at the given position (0 when unknown).
    public func invalidate(_ changes: [String: Int64]) {
        invalidate(changes: changes.lazy.map { ($0.key, $0.value) })
    }

    /// Forgets these subscribers: their events changed.
    public func invalidate<S: Sequence>(_ subscriberIDs: S) where S.Element == String {
        invalidate(changes: subscriberIDs.lazy.map { ($0, Int64(0)) })
    }

    /// Forgets these subscribers, each changed at a position (0 when unknown), and remembers the positions
    /// while replicas may be behind them.
    public func invalidate<S: Sequence>(changes: S) where S.Element == (String, Int64) {
        let track = tracksRecentChanges
        for (id, changedAt) in changes {
            shards[Self.shard(of: id)].withLock { s in
                s.epoch &+= 1
                if let position = s.index[id] { s.remove(at: position) }
                guard track, changedAt > 0 else { return }
                if changedAt > s.recent[id] ?? 0 { s.recent[id] = changedAt }
                if s.recent.count > Self.recentPerShard {
                    s.recentFloor = max(s.recentFloor, s.recent.values.max() ?? 0)
                    s.recent = [:]
                }
            }
        }
    }

    /// Forgets remembered changes at or below `position`: every replica has passed them.
    public func forgetChanges(upTo position: Int64) {
        guard tracksRecentChanges else { return }
        for shard in shards {
            shard.withLock { s in
                if s.recentFloor <= position { s.recentFloor = 0 }
                guard !s.recent.isEmpty else { return }
                s.recent = s.recent.filter { $0.value > position }
            }
        }
    }

    /// The cached ledger, or nil (and a ticket for storing what the caller will load).
    public func lookup(_ subscriberID: String) -> (SubscriberLedger?, Ticket) {
        let (hit, ticket) = lookup(subscriberID, atLeast: 0)
        return (hit?.ledger, ticket)
    }

    /// The cached ledger if it reflects at least position `minimum`, with the position it reflects; or nil
    /// and a ticket for storing what the caller will load (the ticket's `floor` is the least position that
    /// load must reflect).
    public func lookup(_ subscriberID: String, atLeast minimum: Int64) -> (hit: (ledger: SubscriberLedger, position: Int64)?, Ticket) {
        let shardIndex = Self.shard(of: subscriberID)
        let generation = generation.load(ordering: .acquiring)
        // Read before the shard: every invalidation of a change up to `heard` happened before it was published.
        let heard = heardPosition.load(ordering: .acquiring)
        let enabled = isEnabled
        let (hit, epoch, floor) = shards[shardIndex].withLock { s -> ((ledger: SubscriberLedger, position: Int64)?, UInt64, Int64) in
            let floor = max(s.recentFloor, s.recent[subscriberID] ?? 0)
            guard enabled, let position = s.index[subscriberID] else { return (nil, s.epoch, floor) }
            let reflects = max(s.slots[position]!.position, heard)
            guard reflects >= minimum else { return (nil, s.epoch, floor) }
            s.slots[position]!.referenced = true
            return ((s.slots[position]!.ledger, reflects), s.epoch, floor)
        }
        guard enabled else { return (nil, Ticket(shard: shardIndex, epoch: .max, generation: generation, floor: floor)) }
        if hit != nil { hits.wrappingAdd(1, ordering: .relaxed) } else { misses.wrappingAdd(1, ordering: .relaxed) }
        return (hit, Ticket(shard: shardIndex, epoch: epoch, generation: generation, floor: floor))
    }

    /// Keeps a ledger loaded after `lookup` missed, unless an invalidation or reset happened meanwhile or
    /// the load reflects less than the ticket's floor. `position`: the position the load reflects.
    public func store(_ subscriberID: String, _ ledger: SubscriberLedger, position loadedAt: Int64 = .max, ticket: Ticket) {
        guard isEnabled, ticket.epoch != .max, loadedAt >= ticket.floor else { return }
        let cost = Self.cost(of: ledger, key: subscriberID)
        guard cost <= shardBudget else { return }
        shards[ticket.shard].withLock { s in
            guard s.epoch == ticket.epoch, generation.load(ordering: .acquiring) == ticket.generation else { return }
            if let position = s.index[subscriberID] { s.remove(at: position) }
            s.makeRoom(for: cost, budget: shardBudget)
            let slot = Slot(key: subscriberID, ledger: ledger, cost: cost, referenced: false, position: loadedAt == .max ? 0 : loadedAt)
            let position: Int
            if let reused = s.free.popLast() {
                s.slots[reused] = slot
                position = reused
            } else {
                s.slots.append(slot)
                position = s.slots.count - 1
            }
            s.index[subscriberID] = position
            s.bytes += cost
        }
    }

    /// Subscribers held, estimated bytes, and lookups answered from memory or not since start.
    public var statistics: (subscribers: Int, bytes: Int, hits: Int, misses: Int) {
        var subscribers = 0
        var bytes = 0
        for shard in shards {
            shard.withLock { s in
                subscribers += s.index.count
                bytes += s.bytes
            }
        }
        return (subscribers, bytes, hits.load(ordering: .relaxed), misses.load(ordering: .relaxed))
    }

    static func shard(of subscriberID: String) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in subscriberID.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return Int(hash % UInt64(shardCount))
    }

    /// An estimate of the heap a cached ledger holds: the slot, the key, the windows and their strings, each
    /// allocation with malloc's 16-byte header (checked against the server's RSS: within a few percent for
    /// the bench's 106,000 subscribers).
    static func cost(of ledger: SubscriberLedger, key: String) -> Int {
        // The slot and its index entry, with the spare capacity their array and dictionary keep on average.
        var bytes = 160 + heap(key) + 2 * MemoryLayout<Slot>.stride
        bytes += allocation(32 + ledger.windows.count * MemoryLayout<Window>.stride)
        for window in ledger.windows {
            bytes += heap(window.entitlement) + heap(window.productID) + heap(window.transactionID)
            if !window.cuts.isEmpty { bytes += allocation(32 + window.cuts.count * MemoryLayout<Window.Cut>.stride) }
        }
        bytes += ledger.renewing.isEmpty ? 0 : allocation(64 + ledger.renewing.count * 48)
        for (entitlement, toggles) in ledger.renewing {
            bytes += heap(entitlement) + allocation(32 + toggles.count * MemoryLayout<Timestamp>.stride)
        }
        bytes += ledger.unmatchedRefunds.isEmpty ? 0 : allocation(32 + ledger.unmatchedRefunds.count * 16)
        return bytes
    }

    /// Heap bytes of a string: none when Swift stores it inline (up to 15 UTF-8 bytes).
    private static func heap(_ string: String?) -> Int {
        guard let count = string?.utf8.count, count > 15 else { return 0 }
        return allocation(32 + count)
    }

    /// One malloc'd block: the size rounded up to 16 bytes, plus its header.
    private static func allocation(_ size: Int) -> Int { (size + 15) / 16 * 16 + 16 }
}
