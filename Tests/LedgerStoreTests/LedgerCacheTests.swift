import Foundation
import LedgerCore
import Testing

@testable import LedgerStore

@Suite("Entitlement cache: bounded, and never keeps what an invalidation raced with")
struct LedgerCacheTests {
    static func ledger(windows count: Int, product: String = "com.example.pro.monthly") -> SubscriberLedger {
        let windows = (0..<count).map { i in
            Window(
                entitlement: "pro", start: Timestamp(microseconds: Int64(i) * 1_000_000), grantedEnd: nil, kind: .paid,
                productID: product, transactionID: "transaction-\(i)-with-a-long-id", sourceEventID: UUID(),
                sourcePosition: Int64(i + 1), environment: .production, cuts: [])
        }
        return SubscriberLedger(windows: windows, renewing: ["pro": [Timestamp(microseconds: 0)]], unmatchedRefunds: [])
    }

    @Test("disabled, it neither answers nor stores")
    func disabled() {
        let cache = LedgerCache(byteBudget: 1 << 20)
        let (miss, ticket) = cache.lookup("s1")
        #expect(miss == nil)
        cache.store("s1", Self.ledger(windows: 1), ticket: ticket)
        cache.enable()
        #expect(cache.lookup("s1").0 == nil)
    }

    @Test("enabled, a stored ledger answers the next lookup until its subscriber is invalidated")
    func storeAndInvalidate() {
        let cache = LedgerCache(byteBudget: 1 << 20)
        cache.enable()
        let ledger = Self.ledger(windows: 2)
        let (miss, ticket) = cache.lookup("s1")
        #expect(miss == nil)
        cache.store("s1", ledger, ticket: ticket)
        #expect(cache.lookup("s1").0 == ledger)
        cache.invalidate(["s2"])
        #expect(cache.lookup("s1").0 == ledger)
        cache.invalidate(["s1"])
        #expect(cache.lookup("s1").0 == nil)
        let stats = cache.statistics
        #expect(stats.hits == 2 && stats.misses == 2 && stats.subscribers == 0 && stats.bytes == 0)
    }

    @Test("a load that an invalidation, a reset or a disable overtook is not stored")
    func racingLoadsAreDropped() {
        let cache = LedgerCache(byteBudget: 1 << 20)
        cache.enable()
        let (_, invalidated) = cache.lookup("s1")
        cache.invalidate(["s1"])
        cache.store("s1", Self.ledger(windows: 1), ticket: invalidated)
        #expect(cache.lookup("s1").0 == nil)

        let (_, reset) = cache.lookup("s2")
        cache.reset()
        cache.store("s2", Self.ledger(windows: 1), ticket: reset)
        #expect(cache.lookup("s2").0 == nil)

        let (_, flapped) = cache.lookup("s3")
        cache.disable()
        cache.enable()
        cache.store("s3", Self.ledger(windows: 1), ticket: flapped)
        #expect(cache.lookup("s3").0 == nil)

        let (_, fresh) = cache.lookup("s3")
        cache.store("s3", Self.ledger(windows: 1), ticket: fresh)
        #expect(cache.lookup("s3").0 != nil)
    }

    @Test("the estimated bytes stay within the budget; recently read subscribers are evicted last")
    func bounded() {
        let budget = 1024 * 1024
        let cache = LedgerCache(byteBudget: budget)
        cache.enable()
        let one = LedgerCache.cost(of: Self.ledger(windows: 6), key: "subscriber-00000")
        #expect(one > 6 * MemoryLayout<Window>.stride)
        for i in 0..<5_000 {
            let id = "subscriber-\(i)"
            let (_, ticket) = cache.lookup(id)
            cache.store(id, Self.ledger(windows: 6), ticket: ticket)
            // Subscriber 0 is read again after every store: it keeps its place.
            _ = cache.lookup("subscriber-0")
        }
        let stats = cache.statistics
        #expect(stats.bytes <= budget)
        #expect(stats.subscribers > budget / one / 2)
        #expect(stats.subscribers < 5_000)
        #expect(cache.lookup("subscriber-0").0 != nil)
    }

    @Test("a ledger larger than its shard's share is not kept")
    func oversized() {
        let cache = LedgerCache(byteBudget: 64 * 1024)
        cache.enable()
        let (_, ticket) = cache.lookup("big")
        cache.store("big", Self.ledger(windows: 200), ticket: ticket)
        #expect(cache.lookup("big").0 == nil)
        #expect(cache.statistics.bytes == 0)
    }
}
