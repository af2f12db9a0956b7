/// A report dimension (ledger-semantics section 5, "Dimensions"): what a report may be filtered and grouped by.
public enum ReportDimension: String, Sendable, Hashable, CaseIterable {
    /// The event's `source` (`apple`, `google`, `stripe`, `web`, …).
    case store
    /// The buyer's ISO 3166-1 alpha-2 country; unknown where the store did not say it (the group's value is null).
    case country
    case productID = "product_id"
    case entitlement
}

/// The filters and grouping of one report: each filter is "any of" its values (an empty set does not filter),
/// and `groupBy` splits the rows by one dimension. Parsed once at the HTTP edge (`ReportDimensionsQuery` in
/// LedgerServer) and handed to the stores, so every report reads the same parameters the same way.
public struct ReportDimensions: Sendable, Hashable {
    public var stores: Set<String>
    public var countries: Set<String>
    public var productIDs: Set<String>
    public var entitlements: Set<String>
    public var groupBy: ReportDimension?

    public init(
        stores: Set<String> = [], countries: Set<String> = [], productIDs: Set<String> = [], entitlements: Set<String> = [],
        groupBy: ReportDimension? = nil
    ) {
        self.stores = stores
        self.countries = countries
        self.productIDs = productIDs
        self.entitlements = entitlements
        self.groupBy = groupBy
    }

    /// No filter and no grouping: the report as it always was.
    public static let none = ReportDimensions()

    /// At most one `entitlement=` and nothing else: what the rollups answer (they are kept per entitlement key).
    public var rollupEntitlement: String?? {
        guard stores.isEmpty, countries.isEmpty, productIDs.isEmpty, groupBy == nil, entitlements.count <= 1 else { return nil }
        return .some(entitlements.first)
    }

    /// The values of `dimension` a transaction has: one for store, country and product (nil when not known: no
    /// country said, or facts from before the dimensions were kept); one per entitlement it grants.
    public static func values(of t: RevenueTransaction, _ dimension: ReportDimension) -> [String?] {
        switch dimension {
        case .store: [t.store.isEmpty ? nil : t.store]
        case .country: [t.country]
        case .productID: [t.productID.isEmpty ? nil : t.productID]
        case .entitlement: t.entitlements.map { $0 }
        }
    }

    /// Group values in order, the unknown (null) last.
    public static func groupOrder(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, _): false
        case (_, nil): true
        case (let x?, let y?): x < y
        }
    }

    /// The values `dimension` is filtered on (empty: not filtered).
    public func filter(_ dimension: ReportDimension) -> Set<String> {
        switch dimension {
        case .store: stores
        case .country: countries
        case .productID: productIDs
        case .entitlement: entitlements
        }
    }

    /// Whether the transaction passes every filter.
    public func matches(_ t: RevenueTransaction) -> Bool {
        (stores.isEmpty || stores.contains(t.store)) && (countries.isEmpty || t.country.map(countries.contains) == true)
            && (productIDs.isEmpty || productIDs.contains(t.productID))
            && (entitlements.isEmpty || t.entitlements.contains(where: entitlements.contains))
    }

    /// The groups a transaction that passes the filters counts in: `[nil]` without grouping; by entitlement,
    /// each entitlement it grants (within the filter, when there is one). A transaction granting two
    /// entitlements counts in both groups, as it counts in each entitlement's report.
    public func groups(of t: RevenueTransaction) -> [String?] {
        guard let groupBy else { return [nil] }
        let values = Self.values(of: t, groupBy)
        guard groupBy == .entitlement, !entitlements.isEmpty else { return values }
        return values.filter { $0.map(entitlements.contains) ?? false }
    }
}

/// Revenue rows split by a dimension's value: one `RevenueAccumulator` per group.
public struct GroupedRevenueAccumulator: Sendable {
    let boundaries: [Timestamp]
    let dimensions: ReportDimensions
    var groups: [String?: RevenueAccumulator] = [:]
    /// Every group answers a row for this currency (the reporting currency) even without money in it.
    let include: String?

    public init(boundaries: [Timestamp], dimensions: ReportDimensions, include currency: String? = nil) {
        self.boundaries = boundaries
        self.dimensions = dimensions
        self.include = currency
    }

    /// Adds a transaction to each of its groups if it passes the filters, converted into `currency` by `factor`.
    public mutating func add(_ t: RevenueTransaction, currency: String? = nil, factor: FXFactor = .one) throws(ReportOverflow) {
        guard dimensions.matches(t) else { return }
        for g in dimensions.groups(of: t) {
            var acc = groups.removeValue(forKey: g) ?? RevenueAccumulator(boundaries: boundaries)
            if let include { acc.include(currency: include) }
            defer { groups[g] = acc }
            try acc.add(t, currency: currency ?? t.currency, factor: factor)
        }
    }

    /// Rows ordered by group (null last), then period and currency.
    public var periods: [(group: String?, period: RevenuePeriod)] {
        if groups.isEmpty, dimensions.groupBy == nil {
            var empty = RevenueAccumulator(boundaries: boundaries)
            if let include { empty.include(currency: include) }
            return empty.periods.map { (nil, $0) }
        }
        let keys = groups.keys.sorted(by: ReportDimensions.groupOrder)
        return keys.flatMap { k in groups[k]!.periods.map { (k, $0) } }
    }
}

/// Where a subscriber's paid runs count at an instant (ledger-semantics section 5, "Dimensions"): the run active
/// just before it, that run's transaction whose service started last before it (so grace after a transaction
/// keeps that transaction's dimensions), and the groups that transaction counts in under the filters.
struct RunDimensions {
    let filters: ReportDimensions
    let runs: [PaidRun]
    /// `services[i]`: the transactions overlapping `runs[i]`, `start` their service's start.
    let services: [[RevenueTransaction]]
    /// Runs per entitlement (`group_by=entitlement`): the run's entitlement is the group.
    let group: String?

    init(dimensions: ReportDimensions, runs: [PaidRun], services: [[RevenueTransaction]], group: String?) {
        var filters = dimensions
        if group != nil { filters.entitlements = [] }
        (self.filters, self.runs, self.services, self.group) = (filters, runs, services, group)
    }

    func active(justBefore t: Timestamp) -> Int? { runs.lastIndex { $0.isActive(justBefore: t) } }

    /// The transaction of run `i` whose service started last before `t` (else the run's first).
    func service(_ i: Int, before t: Timestamp) -> RevenueTransaction? {
        services[i].filter { $0.start < t }.max { $0.start < $1.start } ?? services[i].min { $0.start < $1.start }
    }

    /// The groups a subscriber counted through transaction `t` is in (none when a filter fails).
    func cells(_ t: RevenueTransaction?) -> [String?] {
        guard let t else {
            // A run without a known transaction passes no filter but belongs to the whole.
            let unfiltered = filters.stores.isEmpty && filters.countries.isEmpty && filters.productIDs.isEmpty && filters.entitlements.isEmpty
            return unfiltered ? [group] : []
        }
        guard filters.matches(t) else { return [] }
        if let group { return [group] }
        return filters.groups(of: t)
    }
}

/// Churn split by a dimension (ledger-semantics section 5, "Dimensions"): a subscriber counted at an instant
/// takes the dimensions of the transaction covering it there (of its paid run active just before the instant,
/// the latest whose service started before it: grace after a transaction keeps its dimensions); a churned one
/// those of the last transaction of the run that ended. A subscriber whose transaction fails a filter at an
/// instant is not counted there. Grouped rows of one instant add up to the ungrouped row; the churn identity
/// holds within a group only where no subscriber changes group (moving from one store to another is leaving
/// one group and joining another without churning or starting: the identity holds for the whole).
public struct GroupedChurnAccumulator: Sendable {
    let boundaries: [Timestamp]
    let dimensions: ReportDimensions
    var groups: [String?: [ChurnPeriod]] = [:]

    public init(boundaries: [Timestamp], dimensions: ReportDimensions) {
        self.boundaries = boundaries
        self.dimensions = dimensions
    }

    /// Adds one subscriber's runs of one entitlement key. `services[i]` are the transactions overlapping
    /// `runs[i]`, their `start` the start of their service, each with its dimensions. With `group` (runs per
    /// entitlement, `group_by=entitlement`) the subscriber counts in that group whenever the other filters pass.
    public mutating func add(runs: [PaidRun], firstStart: Timestamp, services: [[RevenueTransaction]], group fixed: String? = nil) {
        guard !runs.isEmpty, boundaries.count > 1 else { return }
        let lookup = RunDimensions(dimensions: dimensions, runs: runs, services: services, group: fixed)
        let empty = zip(boundaries, boundaries.dropFirst()).map { ChurnPeriod(start: $0, end: $1) }
        func bump(_ g: String?, _ i: Int, _ change: (inout ChurnPeriod) -> Void) {
            var periods = groups.removeValue(forKey: g) ?? empty
            change(&periods[i])
            groups[g] = periods
        }
        var before = lookup.active(justBefore: boundaries[0])
        for i in 0..<(boundaries.count - 1) {
            let (a, b) = (boundaries[i], boundaries[i + 1])
            let after = lookup.active(justBefore: b)
            if let r = before { for g in lookup.cells(lookup.service(r, before: a)) { bump(g, i) { $0.activeStart += 1 } } }
            if let r = after { for g in lookup.cells(lookup.service(r, before: b)) { bump(g, i) { $0.activeEnd += 1 } } }
            if before != nil && after == nil {
                let ended = runs.indices.filter { runs[$0].end.map { $0 >= a && $0 < b } ?? false }.max { runs[$0].end! < runs[$1].end! }
                let lapse = ended.flatMap { runs[$0].lapse }
                for g in lookup.cells(ended.flatMap { lookup.service($0, before: runs[$0].end!) } ?? lookup.service(before!, before: a)) {
                    bump(g, i) { p in
                        if lapse == .transferred { p.transferredOut += 1 } else { p.churned[lapse ?? .other, default: 0] += 1 }
                    }
                }
            } else if before == nil, let r = after {
                for g in lookup.cells(lookup.service(r, before: b)) {
                    bump(g, i) { p in
                        if runs[r].transferredIn {
                            p.transferredIn += 1
                        } else if firstStart >= a {
                            p.new += 1
                        } else {
                            p.reactivated += 1
                        }
                    }
                }
            }
            before = after
        }
    }

    /// Rows ordered by group (null last), then period; without grouping, one row per period even when empty.
    public var periods: [(group: String?, period: ChurnPeriod)] {
        if dimensions.groupBy == nil {
            let periods = groups[String?.none] ?? zip(boundaries, boundaries.dropFirst()).map { ChurnPeriod(start: $0, end: $1) }
            return periods.map { (nil, $0) }
        }
        let keys = groups.keys.sorted(by: ReportDimensions.groupOrder)
        return keys.flatMap { k in groups[k]!.map { (k, $0) } }
    }
}

/// Trials split by a dimension: a trial takes the dimensions of its own transaction (store, country, product);
/// it counts once, converted if any of its entitlements (within an `entitlement=` filter) converted; by
/// entitlement it counts in each entitlement's group with that entitlement's conversion, as in each
/// entitlement's own report.
public struct GroupedTrialAccumulator: Sendable {
    let boundaries: [Timestamp]
    let dimensions: ReportDimensions
    var groups: [String?: TrialAccumulator] = [:]

    public init(boundaries: [Timestamp], dimensions: ReportDimensions) {
        self.boundaries = boundaries
        self.dimensions = dimensions
    }

    /// Adds one trial transaction: its rows, one per entitlement (same event, start and dimensions).
    public mutating func add(_ rows: [TrialFact]) {
        guard let first = rows.first else { return }
        let t = RevenueTransaction(
            eventID: first.eventID, entitlements: rows.map(\.entitlement), kind: .trial, currency: "", gross: 0, commission: 0,
            occurredAt: first.start, start: first.start, end: nil, stop: nil, refunds: [], monthly: nil, country: first.country,
            store: first.store, productID: first.productID)
        guard dimensions.matches(t) else { return }
        func count(_ group: String?, converted: Bool) {
            var acc = groups.removeValue(forKey: group) ?? TrialAccumulator(boundaries: boundaries)
            acc.add(start: first.start, converted: converted)
            groups[group] = acc
        }
        let counted = dimensions.entitlements.isEmpty ? rows : rows.filter { dimensions.entitlements.contains($0.entitlement) }
        if dimensions.groupBy == .entitlement {
            for row in counted { count(row.entitlement, converted: row.converted) }
        } else {
            for g in dimensions.groups(of: t) { count(g, converted: counted.contains(where: \.converted)) }
        }
    }

    /// Rows ordered by group (null last), then period; without grouping, one row per period even when empty.
    public var periods: [(group: String?, period: TrialPeriod)] {
        if dimensions.groupBy == nil {
            return (groups[String?.none] ?? TrialAccumulator(boundaries: boundaries)).periods.map { (nil, $0) }
        }
        return groups.keys.sorted(by: ReportDimensions.groupOrder).flatMap { k in groups[k]!.periods.map { (k, $0) } }
    }
}

/// Retention split by a dimension: a cohort member counts in month 0 (the cohort's size) with the dimensions of
/// the first transaction of their first paid run, and in month k with those of the transaction covering them
/// just before `cohort start + k months` (ledger-semantics section 5: a subscriber counted at an instant takes
/// the dimensions of the transaction covering it there). A group's ratios are of the group's own cohort size.
public struct GroupedRetentionAccumulator: Sendable {
    let template: RetentionAccumulator
    let dimensions: ReportDimensions
    var groups: [String?: RetentionAccumulator] = [:]

    public init(from: Timestamp, to: Timestamp, until: Timestamp, dimensions: ReportDimensions) {
        template = RetentionAccumulator(from: from, to: to, until: until)
        self.dimensions = dimensions
    }

    /// Adds one subscriber's paid runs of one entitlement key (all of them, sorted by start), with the
    /// transactions overlapping each run (`services`, as for churn).
    public mutating func add(runs: [PaidRun], services: [[RevenueTransaction]], group fixed: String? = nil) {
        guard let first = runs.first?.start else { return }
        let month = ReportCalendar.monthStart(first)
        guard let c = template.cohorts.firstIndex(where: { $0.start == month }) else { return }
        let lookup = RunDimensions(dimensions: dimensions, runs: runs, services: services, group: fixed)
        for g in lookup.cells(services[0].min { $0.start < $1.start }) {
            var acc = groups.removeValue(forKey: g) ?? template
            defer { groups[g] = acc }
            acc.cohorts[c].size += 1
            acc.cohorts[c].retained[0] += 1
        }
        for k in template.cohorts[c].retained.indices.dropFirst() {
            let t = ReportCalendar.addingMonths(k, to: month)
            guard let r = lookup.active(justBefore: t) else { continue }
            for g in lookup.cells(lookup.service(r, before: t)) {
                var acc = groups.removeValue(forKey: g) ?? template
                defer { groups[g] = acc }
                acc.cohorts[c].retained[k] += 1
            }
        }
    }

    /// Cohorts per group (null last); without grouping, every cohort even when empty.
    public var cohorts: [(group: String?, cohort: RetentionCohort)] {
        if dimensions.groupBy == nil { return (groups[String?.none] ?? template).cohorts.map { (nil, $0) } }
        return groups.keys.sorted(by: ReportDimensions.groupOrder).flatMap { k in groups[k]!.cohorts.map { (k, $0) } }
    }
}
