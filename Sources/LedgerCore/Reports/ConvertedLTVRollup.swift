/// Realized LTV already converted into one reporting currency, as cells by cohort, key, dimensions and month (schema
/// 0038, docs/reports.md "LTV in a reporting currency from cells").
///
/// `LTVAccumulator` converts each transaction's cumulative gross, tax, commission and refunds at each month's end
/// at the rate of its `occurred_at` date, and rounds each. The rounding is per transaction, so no sum of cells in
/// the transactions' own currencies gives it; but it is a sum over transactions, so cells holding each
/// transaction's converted month-to-month change add up to the accumulator's figures exactly. `members` counts a
/// member once per key, whatever currencies they paid in (the converted cohort size).
public struct ConvertedLTVRollup: Sendable {
    public struct Key: Sendable, Hashable {
        public var cohort: Int64
        public var entitlement: String
        public var dimensions: ReportRollup.CellDimensions
        public var month: Int64
    }

    /// A cohort's transactions of a currency that has no rate on their date: a report of the cohort reads the
    /// facts (which refuse with the currency and date when the transaction counts in a month shown).
    public struct MissingKey: Sendable, Hashable {
        public var cohort: Int64
        public var currency: String
    }

    public var cells: [Key: ReportRollup.LTVCell] = [:]
    public var missing: [MissingKey: Int64] = [:]

    public init() {}

    /// Adds (sign 1) or takes off (−1) a subscriber's memberships (`ReportRollup.ltvMembers`) converted with `rates`.
    public mutating func add(_ members: [ReportRollup.LTVMember], sign: Int64, rates: inout ReportingCurrency) throws(ReportOverflow) {
        for m in members {
            let cohort = m.cohort.microseconds
            let last = ReportCalendar.addingMonths(ReportRollup.maxLTVMonths - 1, to: m.cohort).microseconds
            func add(_ month: Int64, _ cell: ReportRollup.LTVCell) {
                guard month <= last else { return }
                let key = Key(cohort: cohort, entitlement: m.entitlement, dimensions: m.dimensions, month: month)
                cells[key, default: .init()].add(cell, sign: sign)
            }
            func month(_ at: Timestamp) -> Int64 { max(ReportCalendar.monthStart(at).microseconds, cohort) }
            add(cohort, ReportRollup.LTVCell(members: 1))
            for t in m.transactions {
                let factor: FXFactor
                do {
                    factor = try rates.factor(from: t.currency, occurred: t.occurredAt)
                } catch {
                    missing[MissingKey(cohort: cohort, currency: t.currency), default: 0] &+= sign
                    continue
                }
                let billed = t.heldFrom == nil
                let gross = billed ? try factor.apply(Int128(t.gross)) : 0
                let proceeds = billed ? gross - (try factor.apply(Int128(t.tax))) - (try factor.apply(Int128(t.commission))) : 0
                let sale = month(t.occurredAt)
                var refunded: [Int64: Int128] = [:]
                for r in t.refunds { refunded[month(r.at), default: 0] += Int128(r.amount) }
                // The figures at each month's end where they change, then each month's difference from the last.
                var (cumulative, before): (Int128, (gross: Int128, proceeds: Int128)) = (0, (0, 0))
                for m in Set(refunded.keys).union([sale]).sorted() {
                    cumulative += refunded[m] ?? 0
                    let refunds = try factor.apply(cumulative)
                    let now = (gross: (m >= sale ? gross : 0) - refunds, proceeds: (m >= sale ? proceeds : 0) - refunds)
                    add(m, ReportRollup.LTVCell(gross: now.gross - before.gross, proceeds: now.proceeds - before.proceeds))
                    before = now
                }
            }
        }
    }

    /// The report's rows from the cells of its cohorts (`cells`: summed per cohort, group and month), as
    /// `GroupedLTVAccumulator` gives them converted: every group with a member, each with a row for every cohort
    /// (size 0 when nobody paid).
    public static func cohorts(
        from: Timestamp, to: Timestamp, months: Int, until: Timestamp, dimensions: ReportDimensions, currency: String,
        cells: [(cohort: Int64, group: String?, month: Int64, cell: ReportRollup.LTVCell)]
    ) -> [(group: String?, cohort: LTVCohort)] {
        let shape = LTVAccumulator(from: from, to: to, months: months, until: until)
        let index = Dictionary(shape.starts.enumerated().map { ($1.microseconds, $0) }) { a, _ in a }
        var groups: [String?: [Int: LTVCohort]] = [:]
        func empty(_ c: Int) -> LTVCohort {
            LTVCohort(
                start: shape.starts[c], currency: currency, gross: Array(repeating: 0, count: shape.shown[c]),
                proceeds: Array(repeating: 0, count: shape.shown[c]))
        }
        // Month k of a cohort sums its cells up to the start of its month k.
        let cutoffs = shape.starts.indices.map { c in (0..<shape.shown[c]).map { ReportCalendar.addingMonths($0, to: shape.starts[c]).microseconds } }
        var sizes: [String?: Int64] = [:]
        for (cohort, group, month, cell) in cells {
            guard let c = index[cohort] else { continue }
            // A member makes their group, yet a cohort with no month shown counts nobody (as the accumulator).
            sizes[group, default: 0] &+= cell.members
            var row = groups[group]?[c] ?? empty(c)
            guard shape.shown[c] > 0 else {
                groups[group, default: [:]][c] = row
                continue
            }
            row.size += Int(truncatingIfNeeded: cell.members)
            if let first = cutoffs[c].firstIndex(where: { month <= $0 }) {
                for k in first..<cutoffs[c].count {
                    row.gross[k] += cell.gross
                    row.proceeds[k] += cell.proceeds
                }
            }
            groups[group, default: [:]][c] = row
        }
        let present = groups.filter { (sizes[$0.key] ?? 0) > 0 }
        return dimensions.orderedGroups(present).flatMap { g in
            shape.starts.indices.map { c in (g, present[g]?[c] ?? empty(c)) }
        }
    }

    /// Without the cells that came to nothing.
    public func pruned() -> Self {
        var out = Self()
        out.cells = cells.filter { $0.value != .init() }
        out.missing = missing.filter { $0.value != 0 }
        return out
    }
}
