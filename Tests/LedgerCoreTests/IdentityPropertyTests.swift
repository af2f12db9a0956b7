import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

/// Money follows the transaction, access follows the owner (docs/identity.md): random histories of
/// purchases, renewals, refunds and transfers over a few subscribers, each against the same history with no
/// transfer at all.
@Suite("Identity: transfers move access, never money")
struct IdentityPropertyTests {
    /// Streams of several subscribers, appended in one global position order.
    struct Ledger {
        var streams: [String: [RecordedEvent]] = [:]
        var position: Int64 = 0

        mutating func append(_ subscriber: String, _ type: EventType, at: Timestamp, _ data: [String: JSONValue]) -> RecordedEvent {
            position += 1
            let version = Int64((streams[subscriber]?.count ?? 0) + 1)
            let e = RecordedEvent(
                eventID: UUID(), subscriberID: subscriber, version: version, position: position, type: type, occurredAt: at,
                recordedAt: Timestamp(microseconds: position), source: "apple", environment: .production, idempotencyKey: "k\(position)",
                data: data, metadata: [:], prevHash: RecordedEvent.genesisHash)
            streams[subscriber, default: []].append(e)
            return e
        }

        func owner(of purchase: String) -> String? {
            streams.keys.sorted().first { s in PurchaseOwnership.owned(streams[s]!).contains { $0.purchaseID == purchase } }
        }

        /// The transfer pair, built as `IdentityStore` builds it.
        mutating func transfer(_ purchase: String, to: String, at t: Timestamp) {
            guard let from = owner(of: purchase), from != to, let events = streams[from],
                let owned = PurchaseOwnership.owned(events).first(where: { $0.purchaseID == purchase })
            else { return }
            let ledger = Fold.fold(events)
            let windows = PurchaseOwnership.windowsToTransfer(owned, events: events, ledger: ledger, at: t)
            let carried = PurchaseOwnership.carriedTransactions(owned, events: events, facts: SubscriberFacts.derive(events: events, ledger: ledger))
            _ = append(
                from, .transferOut, at: t, ["store": "apple", "purchase_id": .string(purchase), "to_subscriber": .string(to), "reason": "support"])
            _ = append(
                to, .transferIn, at: t,
                [
                    "store": "apple", "purchase_id": .string(purchase), "from_subscriber": .string(from), "reason": "support",
                    "windows": .array(windows.map(\.json)), "transactions": .array(carried.map(\.json)),
                ])
        }

        var facts: [SubscriberFacts] {
            streams.values.map { SubscriberFacts.derive(events: $0, ledger: Fold.fold($0)) }
        }
    }

    static let day: Int64 = 86_400_000_000
    static let start = Timestamp(microseconds: 1_767_225_600_000_000)  // 2026-01-01

    static func at(_ days: Int64) -> Timestamp { Timestamp(microseconds: start.microseconds + days * day) }

    static func transaction(_ id: String, purchase: String, from: Int64, days: Int64, price: Int64) -> [String: JSONValue] {
        [
            "product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": .string(id), "original_transaction_id": .string(purchase),
            "kind": "auto_renewable", "offer": "none", "period_start": .string(at(from).rfc3339),
            "period_end": .string(at(from + days).rfc3339), "period": "P1M", "price_minor": .number(JSONNumber(price)), "currency": "USD",
            "commission_rate": "0.15",
        ]
    }

    static func revenue(_ facts: [SubscriberFacts], boundaries: [Timestamp]) -> [RevenuePeriod] {
        var acc = RevenueAccumulator(boundaries: boundaries)
        for f in facts { for t in f.transactions { acc.add(t) } }
        return acc.periods
    }

    /// A random history of purchases, renewals, refunds and transfers over three subscribers (`moved`), the
    /// same history without its transfers (`still`), the transactions of each purchase, and the last day used.
    static func history(seed: Int) -> (moved: Ledger, still: Ledger, transactions: [String: [String]], clock: Int64) {
        var random = SplitMix64(seed: UInt64(seed) &* 7919 &+ 17)
        var moved = Ledger()
        var still = Ledger()
        let subscribers = ["s0", "s1", "s2"]
        let purchases = ["p0", "p1"]
        var next: [String: Int64] = [:]  // each purchase's next period start
        var transactions: [String: [String]] = [:]
        var clock: Int64 = 0
        for step in 0..<24 {
            clock += Int64(random.int(0...8))
            let purchase = purchases[random.int(0...purchases.count - 1)]
            switch random.int(0...9) {
            case 0...4:
                // A purchase or a renewal of 30 days, at its period's start, recorded now.
                let from = max(next[purchase] ?? clock, clock - 5)
                let id = "\(purchase)-t\(step)"
                let price = Int64(500 + random.int(0...1_999))
                let data = Self.transaction(id, purchase: purchase, from: from, days: 30, price: price)
                let type: EventType = transactions[purchase] == nil ? .purchase : .renewal
                let first = moved.owner(of: purchase) ?? subscribers[random.int(0...subscribers.count - 1)]
                _ = moved.append(first, type, at: Self.at(from), data)
                _ = still.append(still.owner(of: purchase) ?? first, type, at: Self.at(from), data)
                next[purchase] = from + 30
                transactions[purchase, default: []].append(id)
            case 5...6:
                // A refund (full or partial) of one of the purchase's transactions, now.
                guard let list = transactions[purchase], let owner = moved.owner(of: purchase), let stillOwner = still.owner(of: purchase) else {
                    continue
                }
                let id = list[random.int(0...list.count - 1)]
                let cut = random.int(0...1) == 0
                let data: [String: JSONValue] = [
                    "transaction_id": .string(id), "amount_minor": .number(JSONNumber(Int64(100 + random.int(0...399)))), "currency": "USD",
                    "reason": "refund", "cut": .bool(cut),
                ]
                _ = moved.append(owner, .refund, at: Self.at(clock), data)
                _ = still.append(stillOwner, .refund, at: Self.at(clock), data)
            default:
                // A transfer to another subscriber, now (the history without transfers has none).
                moved.transfer(purchase, to: subscribers[random.int(0...subscribers.count - 1)], at: Self.at(clock))
            }
        }
        return (moved, still, transactions, clock)
    }

    @Test(
        "revenue per period equals the history without transfers; each purchase is held by at most one subscriber at any instant", arguments: 0..<60)
    func moneyFollowsTheTransaction(seed: Int) {
        let (moved, still, transactions, clock) = Self.history(seed: seed)
        let boundaries = (0..<12).map { Self.at(Int64($0) * 15) }
        let withTransfers = Self.revenue(moved.facts, boundaries: boundaries)
        let without = Self.revenue(still.facts, boundaries: boundaries)
        #expect(withTransfers.count == without.count, "seed \(seed)")
        for (a, b) in zip(withTransfers, without) {
            #expect(a.figures.billings == b.figures.billings && a.figures.recognized == b.figures.recognized, "seed \(seed) \(a.start)")
            #expect(
                a.figures.refunds == b.figures.refunds && a.figures.refundedUnrecognized == b.figures.refundedUnrecognized, "seed \(seed) \(a.start)")
            #expect(a.deferredStart == b.deferredStart && a.deferredEnd == b.deferredEnd, "seed \(seed) \(a.start)")
            #expect(a.figures.handover == 0, "seed \(seed): the handovers of a period cancel out")
        }
        // Access: at every day, each transaction's windows are active on at most one subscriber.
        let ledgers = moved.streams.mapValues { Fold.fold($0) }
        for day in stride(from: Int64(0), through: clock + 40, by: 1) {
            let t = Self.at(day)
            for ids in transactions.values {
                for id in ids {
                    let holders = ledgers.filter { $0.value.windows.contains { $0.transactionID == id && $0.covers(t) } }.count
                    #expect(holders <= 1, "seed \(seed): \(id) held by \(holders) subscribers at \(t)")
                }
            }
        }
    }
}

@Suite("Identity: what each side of a transfer is told")
struct IdentityWebhookTests {
    @Test("a transfer's two events each carry what moved: the side it leaves loses the entitlement, the side it reaches gains it")
    func eachSideHearsOfIt() throws {
        var ledger = IdentityPropertyTests.Ledger()
        _ = ledger.append(
            "a", .purchase, at: IdentityPropertyTests.at(0),
            IdentityPropertyTests.transaction("t1", purchase: "p", from: 0, days: 30, price: 999))
        let beforeA = Fold.fold(ledger.streams["a"]!)
        ledger.transfer("p", to: "b", at: IdentityPropertyTests.at(10))
        let out = try #require(ledger.streams["a"]?.last)
        let arrived = try #require(ledger.streams["b"]?.last)
        let lost = WebhookMessage.payload(
            event: out, after: Fold.fold(ledger.streams["a"]!),
            changes: EntitlementChange.between(beforeA, Fold.fold(ledger.streams["a"]!), at: out.occurredAt))
        let gained = WebhookMessage.payload(
            event: arrived, after: Fold.fold(ledger.streams["b"]!),
            changes: EntitlementChange.between(.empty, Fold.fold(ledger.streams["b"]!), at: arrived.occurredAt))
        #expect(lost.objectValue?["type"] == "ledger.transfer_out")
        #expect(gained.objectValue?["type"] == "ledger.transfer_in")
        let lostKinds = lost.objectValue?["data"]?.objectValue?["changes"]?.arrayValue?.first?.objectValue?["changes"]
        let gainedKinds = gained.objectValue?["data"]?.objectValue?["changes"]?.arrayValue?.first?.objectValue?["changes"]
        #expect(lostKinds?.arrayValue?.contains("revoked") == true)
        #expect(gainedKinds?.arrayValue?.contains("granted") == true)
        // What moved is named in the event: the purchase, the other side, the windows.
        #expect(gained.objectValue?["data"]?.objectValue?["event"]?.objectValue?["data"]?.objectValue?["from_subscriber"] == "a")
        #expect(lost.objectValue?["data"]?.objectValue?["event"]?.objectValue?["data"]?.objectValue?["to_subscriber"] == "b")
    }
}
