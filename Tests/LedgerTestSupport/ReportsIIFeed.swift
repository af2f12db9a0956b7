import Foundation
import LedgerCore

/// Feeding the Reports II accumulators from a subscriber's facts, as `ReportStore` does from the tables.
public enum ReportsIIFeed {
    public static func services(_ facts: SubscriberFacts, key: String) -> [MRRMovementService] {
        facts.transactions.compactMap { t in
            guard let m = t.monthly, key.isEmpty || t.entitlements.contains(key) else { return nil }
            return MRRMovementService(currency: t.currency, occurredAt: t.occurredAt, start: t.serviceStart, end: t.serviceEnd, monthly: m)
        }
    }

    public static func movement(_ population: [SubscriberFacts], _ boundaries: [Timestamp], key: String, reporting: ReportingCurrency? = nil) throws
        -> [MRRMovementPeriod]
    {
        var acc = MRRMovementAccumulator(boundaries: boundaries, reporting: reporting)
        for facts in population {
            let runs = facts.runs.filter { $0.entitlement == key }
            try acc.add(services: services(facts, key: key), runs: runs, firstStart: runs.first?.start)
        }
        return try acc.periods()
    }

    /// MRR just before `t` per currency, as the MRR report computes it at `t − 1 µs` (rounded once per
    /// currency), and the subscribers it counts.
    public static func mrr(_ population: [SubscriberFacts], justBefore t: Timestamp, key: String) throws -> [String: (Int128, Int)] {
        let at = Timestamp(microseconds: t.microseconds - 1)
        var amounts: [String: [MonthlyAmount]] = [:]
        var subscribers: [String: Set<Int>] = [:]
        for (i, facts) in population.enumerated() {
            for s in services(facts, key: key) where s.start <= at && (s.end.map { at < $0 } ?? true) {
                amounts[s.currency, default: []].append(s.monthly)
                subscribers[s.currency, default: []].insert(i)
            }
        }
        return try amounts.mapValues { try MonthlyAmount.roundedSum($0) }.reduce(into: [:]) { r, kv in
            r[kv.key] = (kv.value, subscribers[kv.key]!.count)
        }
    }

    /// Converted MRR just before `t`, as the converted MRR report computes it (rounded once per rate).
    public static func convertedMRR(_ population: [SubscriberFacts], justBefore t: Timestamp, into target: String, _ rates: FXTable) throws -> Int128
    {
        let at = Timestamp(microseconds: t.microseconds - 1)
        var groups: [ConvertedMRR.Group] = []
        for facts in population {
            for s in services(facts, key: "") where s.start <= at && (s.end.map { at < $0 } ?? true) {
                groups.append(.init(currency: s.currency, day: FXDay(s.occurredAt), amount: s.monthly))
            }
        }
        return try ConvertedMRR.total(groups, into: target, rates: rates)
    }

    public static func identityHolds(_ f: MRRMovementFigures) -> Bool {
        f.mrrEnd == f[.start] + f[.new] + f[.reactivation] + f[.expansion] + f[.transferredIn] - f[.contraction] - f[.churned]
            - f[.transferredOut]
    }

    public static func ltv(
        _ population: [SubscriberFacts], from: Timestamp, to: Timestamp, months: Int, until: Timestamp, key: String,
        reporting: ReportingCurrency? = nil
    ) throws -> [LTVCohort] {
        var acc = LTVAccumulator(from: from, to: to, months: months, until: until, reporting: reporting)
        for facts in population {
            guard let first = facts.runs.first(where: { $0.entitlement == key })?.start else { continue }
            try acc.add(firstStart: first, transactions: facts.transactions.filter { key.isEmpty || $0.entitlements.contains(key) })
        }
        return acc.rows
    }

    public static func refunds(_ population: [SubscriberFacts], _ boundaries: [Timestamp], key: String, reporting: ReportingCurrency? = nil)
        throws -> [RefundPeriod]
    {
        var acc = RefundAccumulator(boundaries: boundaries, reporting: reporting)
        for facts in population {
            for t in facts.transactions where key.isEmpty || t.entitlements.contains(key) { try acc.add(t) }
        }
        return acc.periods
    }

    public static func conversion(_ population: [SubscriberFacts], _ boundaries: [Timestamp], days: [Int], key: String) -> [ConversionPeriod] {
        var acc = ConversionAccumulator(boundaries: boundaries, days: days)
        for facts in population {
            guard let seen = facts.firstSeen else { continue }
            let paid = facts.transactions.filter { $0.heldFrom == nil && (key.isEmpty || $0.entitlements.contains(key)) }.map(\.occurredAt).min()
            acc.add(firstSeen: seen, firstPaid: paid)
        }
        return acc.periods
    }
}

/// The same, split by dimensions: the grouped accumulators fed from each subscriber's facts as `ReportStore`
/// feeds them from the tables.
extension ReportsIIFeed {
    static func firstStarts(_ facts: SubscriberFacts) -> [String: Timestamp] {
        var firsts: [String: Timestamp] = [:]
        for r in facts.runs where firsts[r.entitlement] == nil { firsts[r.entitlement] = r.start }
        return firsts
    }

    public static func movement(
        _ population: [SubscriberFacts], _ boundaries: [Timestamp], _ dimensions: ReportDimensions, reporting: ReportingCurrency? = nil
    ) throws -> [(group: String?, period: MRRMovementPeriod)] {
        var acc = GroupedMRRMovementAccumulator(boundaries: boundaries, dimensions: dimensions, reporting: reporting)
        for facts in population { try acc.add(transactions: facts.transactions, runs: facts.runs, firstStarts: firstStarts(facts)) }
        return try acc.periods()
    }

    public static func ltv(
        _ population: [SubscriberFacts], from: Timestamp, to: Timestamp, months: Int, until: Timestamp, _ dimensions: ReportDimensions
    ) throws -> [(group: String?, cohort: LTVCohort)] {
        var acc = GroupedLTVAccumulator(from: from, to: to, months: months, until: until, dimensions: dimensions)
        for facts in population { try acc.add(firstStarts: firstStarts(facts), transactions: facts.transactions) }
        return acc.rows
    }

    public static func refunds(_ population: [SubscriberFacts], _ boundaries: [Timestamp], _ dimensions: ReportDimensions) throws
        -> [(group: String?, period: RefundPeriod)]
    {
        var acc = GroupedRefundAccumulator(boundaries: boundaries, dimensions: dimensions)
        for facts in population { for t in facts.transactions { try acc.add(t) } }
        return acc.periods
    }

    public static func conversion(_ population: [SubscriberFacts], _ boundaries: [Timestamp], days: [Int], _ dimensions: ReportDimensions)
        -> [(group: String?, period: ConversionPeriod)]
    {
        var acc = GroupedConversionAccumulator(boundaries: boundaries, days: days, dimensions: dimensions)
        for facts in population {
            guard let seen = facts.firstSeen else { continue }
            let trials = Dictionary(grouping: facts.trials, by: \.eventID).values.map { rows in
                RevenueTransaction(
                    eventID: rows[0].eventID, entitlements: rows.map(\.entitlement).sorted(), kind: .trial, currency: "", gross: 0, commission: 0,
                    occurredAt: rows[0].start, start: rows[0].start, end: nil, stop: nil, refunds: [], monthly: nil, country: rows[0].country,
                    store: rows[0].store, productID: rows[0].productID)
            }
            acc.add(firstSeen: seen, transactions: trials + facts.transactions)
        }
        return acc.periods
    }
}
