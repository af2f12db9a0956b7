/// Revenue cells per UTC day, entitlement key and currency (`ReportRollup.revenueDays`), stored in chunks of
/// 64 consecutive days.
///
/// A rebuild adds about thirty days per monthly transaction and entitlement key: one dictionary look-up per
/// chunk instead of one per day and key kept the day cells from adding half again to the rebuild's CPU.
/// Chunks, not one array per key, so that memory follows the days in use, however far apart.
public struct RevenueDayCells: Sendable {
    struct ChunkKey: Hashable {
        var entitlement: String
        var currency: String
        var chunk: Int64
    }

    static let chunkDays: Int64 = 64
    static let dayMicroseconds: Int64 = 86_400_000_000
    var chunks: [ChunkKey: [ReportRollup.RevenueCell]] = [:]

    public init() {}

    /// The cells that are not zero, keyed by their day's start.
    public var cells: [(key: ReportRollup.RevenueKey, cell: ReportRollup.RevenueCell)] {
        var out: [(key: ReportRollup.RevenueKey, cell: ReportRollup.RevenueCell)] = []
        for (k, list) in chunks {
            for (i, cell) in list.enumerated() where cell != ReportRollup.RevenueCell() {
                let day = (k.chunk &* Self.chunkDays &+ Int64(i)) &* Self.dayMicroseconds
                out.append((ReportRollup.RevenueKey(period: day, entitlement: k.entitlement, currency: k.currency), cell))
            }
        }
        return out
    }

    /// The day (days since the Unix epoch, rounded down) of a day's start in microseconds.
    static func day(_ microseconds: Int64) -> Int64 {
        microseconds >= 0 ? microseconds / dayMicroseconds : (microseconds &+ 1) / dayMicroseconds &- 1
    }

    /// Adds `changes[i]` to day `first + i` and one moving transaction (`transactions`) to each of those days,
    /// and `settledDeferred` to the last one.
    mutating func add(
        entitlement: String, currency: String, first: Int64, changes: [RevenueFigures], transactions: Int64,
        settledDeferred: Int128
    ) {
        guard !changes.isEmpty else { return }
        var i = 0
        while i < changes.count {
            let day = first &+ Int64(i)
            let chunk = day >= 0 ? day / Self.chunkDays : (day &+ 1) / Self.chunkDays &- 1
            let offset = Int(day &- chunk &* Self.chunkDays)
            let key = ChunkKey(entitlement: entitlement, currency: currency, chunk: chunk)
            var list = chunks.removeValue(forKey: key) ?? Array(repeating: ReportRollup.RevenueCell(), count: Int(Self.chunkDays))
            var o = offset
            while o < list.count && i < changes.count {
                list[o].transactions &+= transactions
                list[o].figures += changes[i]
                if i == changes.count - 1 { list[o].settledDeferred += settledDeferred }
                o += 1
                i += 1
            }
            chunks[key] = list
        }
    }

    mutating func add(_ other: RevenueDayCells) {
        for (k, list) in other.chunks {
            guard var mine = chunks.removeValue(forKey: k) else {
                chunks[k] = list
                continue
            }
            for i in mine.indices {
                mine[i].transactions &+= list[i].transactions
                mine[i].figures += list[i].figures
                mine[i].settledDeferred += list[i].settledDeferred
            }
            chunks[k] = mine
        }
    }

    /// Drops the chunks whose cells all sum to zero.
    mutating func prune() {
        chunks = chunks.filter { $0.value.contains { $0 != ReportRollup.RevenueCell() } }
    }
}

extension RevenueDayCells: Hashable {
    /// Equal when the non-zero cells are (however they are chunked).
    public static func == (a: RevenueDayCells, b: RevenueDayCells) -> Bool {
        let x = a.cells
        let y = b.cells
        guard x.count == y.count else { return false }
        let mine = Dictionary(uniqueKeysWithValues: x.map { ($0.key, $0.cell) })
        return y.allSatisfy { mine[$0.key] == $0.cell }
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(cells.count) }
}
