import Foundation
import LedgerCore
import Testing

@testable import LedgerStore

/// The positions the entitlement cache keeps (issue 19): an entry answers a read only if it reflects the
/// read's `min_position`, and with replicas a load older than the last change heard of is not kept.
@Suite("Entitlement cache: positions, min_position and replicas")
struct LedgerCachePositionTests {
    static let ledger = LedgerCacheTests.ledger(windows: 1)

    @Test("an entry reflects the larger of its load's position and the position every change was heard up to")
    func reflects() {
        let cache = LedgerCache(byteBudget: 1 << 20)
        cache.enable(heard: 10)
        let (_, ticket) = cache.lookup("s1", atLeast: 0)
        cache.store("s1", Self.ledger, position: 12, ticket: ticket)
        #expect(cache.lookup("s1", atLeast: 12).hit?.position == 12)
        #expect(cache.lookup("s1", atLeast: 13).hit == nil)
        cache.advance(heard: 20)
        #expect(cache.lookup("s1", atLeast: 20).hit?.position == 20)
        #expect(cache.lookup("s1", atLeast: 21).hit == nil)
        cache.advance(heard: 15)
        #expect(cache.heard == 20)
    }

    @Test("without replicas, a load is kept whatever the changes heard of")
    func noTracking() {
        let cache = LedgerCache(byteBudget: 1 << 20)
        cache.enable(heard: 0)
        cache.invalidate(["s1": 50])
        let (_, ticket) = cache.lookup("s1", atLeast: 0)
        #expect(ticket.floor == 0)
        cache.store("s1", Self.ledger, position: 5, ticket: ticket)
        #expect(cache.lookup("s1", atLeast: 0).hit != nil)
    }

    @Test("with replicas, a load older than the subscriber's last change heard of is not kept, until replicas pass it")
    func replicaFloor() {
        let cache = LedgerCache(byteBudget: 1 << 20, tracksRecentChanges: true)
        cache.enable(heard: 0)
        cache.invalidate(["s1": 50])
        let (_, stale) = cache.lookup("s1", atLeast: 0)
        #expect(stale.floor == 50)
        // A replica at 40 answered the read: not kept, it would never be invalidated again.
        cache.store("s1", Self.ledger, position: 40, ticket: stale)
        #expect(cache.lookup("s1", atLeast: 0).hit == nil)
        let (_, fresh) = cache.lookup("s1", atLeast: 0)
        cache.store("s1", Self.ledger, position: 50, ticket: fresh)
        #expect(cache.lookup("s1", atLeast: 0).hit?.position == 50)
        // Another subscriber is not held back.
        #expect(cache.lookup("s2", atLeast: 0).1.floor == 0)
        // Once every replica has passed 50, nothing needs remembering.
        cache.forgetChanges(upTo: 49)
        #expect(cache.lookup("s1", atLeast: 0).1.floor == 50)
        cache.forgetChanges(upTo: 50)
        #expect(cache.lookup("s1", atLeast: 0).1.floor == 0)
    }

    @Test("a reset after unread changes, or a re-enable after deafness, holds every load to that position")
    func resetFloor() {
        let cache = LedgerCache(byteBudget: 1 << 20, tracksRecentChanges: true)
        cache.enable(heard: 0)
        cache.reset(changedUpTo: 70)
        #expect(cache.lookup("any", atLeast: 0).1.floor == 70)
        cache.forgetChanges(upTo: 70)
        #expect(cache.lookup("any", atLeast: 0).1.floor == 0)
        cache.disable()
        cache.enable(heard: 90)
        #expect(cache.lookup("any", atLeast: 0).1.floor == 90)
        #expect(cache.heard == 90)
    }

    @Test("remembered changes stay bounded: an overflowing shard keeps one floor for all")
    func bounded() {
        let cache = LedgerCache(byteBudget: 1 << 20, tracksRecentChanges: true)
        cache.enable(heard: 0)
        let count = LedgerCache.recentPerShard * 64 * 2
        for i in 0..<count { cache.invalidate(["s\(i)": Int64(i + 1)]) }
        // Whatever was forgotten individually is covered by its shard's floor.
        for i in stride(from: 0, to: count, by: 997) {
            #expect(cache.lookup("s\(i)", atLeast: 0).1.floor >= Int64(i + 1))
        }
    }
}
