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
public final class LedgerCache: Sendable {
    /// What a load must hand back to `store`: the shard's invalidation count when the load began.
    public struct Ticket: Sendable {
        let shard: Int
        let epoch: UInt64
        let generation: UInt64
    }

    private struct Slot {
        var key: String
        var ledger: SubscriberLedger
        var cost: Int
        var referenced: Bool
    }

    private struct Shard {
        var index: [String: Int] = [:]
        var slots: [Slot?] = []
        var free: [Int] = []
        var hand = 0
        var bytes = 0
        var epoch: UInt64 = 0

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

    /// A cache of at most about `byteBudget` bytes; it starts disabled until `enable()`.
    public init(byteBudget: Int) {
        self.byteBudget = byteBudget
        self.shardBudget = max(1, byteBudget / Self.shardCount)
        self.shards = (0..<Self.shardCount).map { _ in ShardLock() }
    }

    public var isEnabled: Bool { enabled.load(ordering: .acquiring) }

    /// Starts serving and storing; called once invalidations are known to arrive.
    public func enable() {
        reset()
        enabled.store(true, ordering: .releasing)
    }

    /// Stops serving and storing and forgets everything: invalidations may be missed from now on.
    public func disable() {
        enabled.store(false, ordering: .releasing)
        reset()
    }

    /// Forgets every subscriber (a rebuild replaced the projection, or changes may have been missed).
    public func reset() {
        generation.wrappingAdd(1, ordering: .acquiringAndReleasing)
        for shard in shards {
            shard.withLock { s in
                let epoch = s.epoch &+ 1
                s = Shard()
                s.epoch = epoch
            }
        }
    }

    /// Forgets these subscribers: their events changed.
    public func invalidate<S: Sequence>(_ subscriberIDs: S) where S.Element == String {
        for id in subscriberIDs {
            shards[Self.shard(of: id)].withLock { s in
                s.epoch &+= 1
                if let position = s.index[id] { s.remove(at: position) }
            }
        }
    }

    /// The cached ledger, or nil (and a ticket for storing what the caller will load).
    public func lookup(_ subscriberID: String) -> (SubscriberLedger?, Ticket) {
        let shardIndex = Self.shard(of: subscriberID)
        let generation = generation.load(ordering: .acquiring)
        guard isEnabled else { return (nil, Ticket(shard: shardIndex, epoch: .max, generation: generation)) }
        let (hit, epoch) = shards[shardIndex].withLock { s -> (SubscriberLedger?, UInt64) in
            guard let position = s.index[subscriberID] else { return (nil, s.epoch) }
            s.slots[position]!.referenced = true
            return (s.slots[position]!.ledger, s.epoch)
        }
        if hit != nil { hits.wrappingAdd(1, ordering: .relaxed) } else { misses.wrappingAdd(1, ordering: .relaxed) }
        return (hit, Ticket(shard: shardIndex, epoch: epoch, generation: generation))
    }

    /// Keeps a ledger loaded after `lookup` missed, unless an invalidation or reset happened meanwhile.
    public func store(_ subscriberID: String, _ ledger: SubscriberLedger, ticket: Ticket) {
        guard isEnabled, ticket.epoch != .max else { return }
        let cost = Self.cost(of: ledger, key: subscriberID)
        guard cost <= shardBudget else { return }
        shards[ticket.shard].withLock { s in
            guard s.epoch == ticket.epoch, generation.load(ordering: .acquiring) == ticket.generation else { return }
            if let position = s.index[subscriberID] { s.remove(at: position) }
            s.makeRoom(for: cost, budget: shardBudget)
            let slot = Slot(key: subscriberID, ledger: ledger, cost: cost, referenced: false)
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
        bytes += ledger.autoRenew.isEmpty ? 0 : allocation(64 + ledger.autoRenew.count * 48)
        bytes += ledger.lapsed.isEmpty ? 0 : allocation(64 + ledger.lapsed.count * 32)
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
