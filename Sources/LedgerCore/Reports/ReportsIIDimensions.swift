/// Reports II split by a dimension (docs/reports.md, "Dimensions"): MRR movement, realized LTV, refunds and
/// conversion take the same `ReportDimensions` as the other reports. Each keeps one plain accumulator per group,
/// so every identity of a report holds within each group, and the store feeds them one subscriber (or one
/// transaction) at a time as it feeds the plain ones.
extension ReportDimensions {
    /// At most one `entitlement=` and nothing else (the reports' entitlement-only form).
    public static func only(_ entitlement: String?) -> ReportDimensions { ReportDimensions(entitlements: entitlement.map { [$0] } ?? []) }

    /// The entitlement key whose paid runs a group's subscribers are read with: by entitlement, the group's own;
    /// with exactly one `entitlement=`, that one; otherwise the runs over all entitlements together (`""`).
    public func runKey(group: String?) -> String {
        if groupBy == .entitlement { return group ?? "" }
        return entitlements.count == 1 ? entitlements.first! : ""
    }

    /// Whether the report reads the paid runs of entitlement key `key`: by entitlement every entitlement's (those
    /// asked for, if any), otherwise only `runKey`'s.
    public func readsRunKey(_ key: String) -> Bool {
        guard groupBy == .entitlement else { return key == runKey(group: nil) }
        return !key.isEmpty && (entitlements.isEmpty || entitlements.contains(key))
    }

    /// Whether a subscriber counted through no known transaction belongs to the report: only when nothing is
    /// filtered (and then in the ungrouped row, or the null group).
    var passesUnknown: Bool { stores.isEmpty && countries.isEmpty && productIDs.isEmpty && entitlements.isEmpty }

    /// Whether the transaction is within the report's entitlement scope for run key `key`: it grants the key, or
    /// (key `""`) one of the `entitlement=` values when there are any.
    func inScope(_ t: RevenueTransaction, key: String) -> Bool {
        key.isEmpty ? (entitlements.isEmpty || t.entitlements.contains(where: entitlements.contains)) : t.entitlements.contains(key)
    }

    /// Sorted group keys, null last; without grouping the single ungrouped row.
    func orderedGroups<V>(_ groups: [String?: V]) -> [String?] {
        groupBy == nil ? [nil] : groups.keys.sorted(by: Self.groupOrder)
    }
}

/// MRR movement per group. A subscriber's MRR in a group just before a boundary is that of their transactions in
/// the group covering the instant (a transaction's own store, country and product; by entitlement, those granting
/// the group's entitlement), as the MRR report groups it, so each group's `mrr_start`/`mrr_end` equal the grouped
/// MRR report's and the movement identity holds within every group. A subscriber who moves between groups (from
/// the App Store to the web, from one product to another) churns from one group and is new or reactivated in
/// the other; the ungrouped report sees expansion, contraction or nothing: groups add up to the whole for
/// `mrr_start` and `mrr_end`, not part by part.
public struct GroupedMRRMovementAccumulator: Sendable {
    let template: MRRMovementAccumulator
    public let dimensions: ReportDimensions
    var groups: [String?: MRRMovementAccumulator] = [:]

    public init(boundaries: [Timestamp], dimensions: ReportDimensions, reporting: ReportingCurrency? = nil) {
        template = MRRMovementAccumulator(boundaries: boundaries, reporting: reporting)
        self.dimensions = dimensions
    }

    /// Adds one subscriber: their paid transactions with a monthly amount touching the span (with dimensions),
    /// their paid runs touching it (of every key the report reads, `runKey`), and the start of their first-ever paid
    /// run per key.
    public mutating func add(transactions: [RevenueTransaction], runs: [PaidRun], firstStarts: [String: Timestamp]) throws {
        var services: [String?: [MRRMovementService]] = [:]
        for t in transactions where t.monthly != nil && dimensions.matches(t) {
            let s = MRRMovementService(currency: t.currency, occurredAt: t.occurredAt, start: t.serviceStart, end: t.serviceEnd, monthly: t.monthly!)
            for g in dimensions.groups(of: t) { services[g, default: []].append(s) }
        }
        for (g, list) in services {
            let key = dimensions.runKey(group: g)
            var acc = groups.removeValue(forKey: g) ?? template
            defer { groups[g] = acc }
            try acc.add(services: list, runs: runs.filter { $0.entitlement == key }, firstStart: firstStarts[key])
        }
    }

    public func periods() throws -> [(group: String?, period: MRRMovementPeriod)] {
        try dimensions.orderedGroups(groups).flatMap { g in try (groups[g] ?? template).periods().map { (g, $0) } }
    }
}

/// Realized LTV per group. A cohort member takes the dimensions of the first transaction of their first paid run
/// (the latest whose service started by the run's start), as retention's month 0 does, and all their transactions
/// of the entitlement scope count in that group: LTV is a customer's figure, so a member who started on the App
/// Store and moved to the web keeps their whole value in the App Store's group (sizes and money of the groups add
/// up to the whole). By entitlement each entitlement's own runs and transactions make the group.
public struct GroupedLTVAccumulator: Sendable {
    let template: LTVAccumulator
    public let dimensions: ReportDimensions
    var groups: [String?: LTVAccumulator] = [:]

    public init(from: Timestamp, to: Timestamp, months: Int, until: Timestamp, dimensions: ReportDimensions, reporting: ReportingCurrency? = nil) {
        template = LTVAccumulator(from: from, to: to, months: months, until: until, reporting: reporting)
        self.dimensions = dimensions
    }

    /// Adds one subscriber: the start of their first paid run per key the report reads (those in its cohorts), and
    /// the paid transactions they hold (with their entitlements and dimensions).
    public mutating func add(firstStarts: [String: Timestamp], transactions: [RevenueTransaction]) throws {
        for (key, first) in firstStarts.sorted(by: { $0.key < $1.key }) where dimensions.readsRunKey(key) {
            let scope = transactions.filter { dimensions.inScope($0, key: key) }
            let opening =
                scope.filter { $0.serviceStart <= first }.max { ($0.serviceStart, $0.occurredAt) < ($1.serviceStart, $1.occurredAt) }
                ?? scope.min { ($0.serviceStart, $0.occurredAt) < ($1.serviceStart, $1.occurredAt) }
            guard let opening, dimensions.matches(opening) else { continue }
            let g: String? =
                switch dimensions.groupBy {
                case nil: nil
                case .entitlement: key
                case let d?: ReportDimensions.values(of: opening, d).first ?? nil
                }
            var acc = groups.removeValue(forKey: g) ?? template
            defer { groups[g] = acc }
            try acc.add(firstStart: first, transactions: scope)
        }
    }

    public var rows: [(group: String?, cohort: LTVCohort)] {
        dimensions.orderedGroups(groups).flatMap { g in (groups[g] ?? template).rows.map { (g, $0) } }
    }
}

/// Refunds per group: a paid transaction and its refunds count in the transaction's own groups (its store,
/// country, product; by entitlement each entitlement it grants), so the groups add up to the whole except by
/// entitlement.
public struct GroupedRefundAccumulator: Sendable {
    let template: RefundAccumulator
    public let dimensions: ReportDimensions
    var groups: [String?: RefundAccumulator] = [:]

    public init(boundaries: [Timestamp], dimensions: ReportDimensions, reporting: ReportingCurrency? = nil) {
        template = RefundAccumulator(boundaries: boundaries, reporting: reporting)
        self.dimensions = dimensions
    }

    public mutating func add(_ t: RevenueTransaction) throws {
        guard dimensions.matches(t) else { return }
        for g in dimensions.groups(of: t) {
            var acc = groups.removeValue(forKey: g) ?? template
            defer { groups[g] = acc }
            try acc.add(t)
        }
    }

    public var periods: [(group: String?, period: RefundPeriod)] {
        dimensions.orderedGroups(groups).flatMap { g in (groups[g] ?? template).periods.map { (g, $0) } }
    }
}

/// Conversion to paying per group. A subscriber first seen takes the store, country and product of their first
/// transaction, a trial or a paid one (the earliest to start; at one instant the trial): what they were first seen
/// trying or buying. One with neither (only credits or notices) has none: counted only without those filters, in
/// the null group. The entitlement is the conversion's scope, not the subscriber's: with `entitlement=` everyone
/// first seen counts, converted within `d` days when a paid transaction they billed granting one of the values
/// occurred within `d` days of first sight (as `entitlement=` alone always meant); by entitlement a subscriber
/// counts in each entitlement any of their transactions grants (none: the null group), converted to that one.
/// By store, country or product each subscriber counts in one group, so those groups add up to the whole.
public struct GroupedConversionAccumulator: Sendable {
    let template: ConversionAccumulator
    public let dimensions: ReportDimensions
    var groups: [String?: ConversionAccumulator] = [:]

    public init(boundaries: [Timestamp], days: [Int], dimensions: ReportDimensions) {
        template = ConversionAccumulator(boundaries: boundaries, days: days)
        self.dimensions = dimensions
    }

    /// Adds one subscriber first seen at `firstSeen`, with their trials (kind `.trial`, `start` the trial's) and the
    /// paid transactions they hold (a transferred copy, `heldFrom`, was not billed by them).
    public mutating func add(firstSeen: Timestamp, transactions: [RevenueTransaction]) {
        let opening = transactions.min { a, b in
            (a.serviceStart, a.kind == .trial ? 0 : 1, a.occurredAt) < (b.serviceStart, b.kind == .trial ? 0 : 1, b.occurredAt)
        }
        var subscriberFilters = dimensions
        subscriberFilters.entitlements = []
        if let opening {
            guard subscriberFilters.matches(opening) else { return }
        } else {
            guard subscriberFilters.passesUnknown else { return }
        }
        let paid = transactions.filter { $0.kind != .trial && $0.heldFrom == nil }
        let counted: [String?]
        switch dimensions.groupBy {
        case nil: counted = [nil]
        case .entitlement:
            let held = Set(transactions.flatMap(\.entitlements)).filter { dimensions.entitlements.isEmpty || dimensions.entitlements.contains($0) }
            counted = held.isEmpty ? [nil] : held.sorted()
        case let d?: counted = [opening.flatMap { ReportDimensions.values(of: $0, d).first ?? nil }]
        }
        for g in counted {
            let key = dimensions.runKey(group: g)
            let firstPaid = paid.filter { dimensions.inScope($0, key: key) }.map(\.occurredAt).min()
            var acc = groups.removeValue(forKey: g) ?? template
            acc.add(firstSeen: firstSeen, firstPaid: firstPaid)
            groups[g] = acc
        }
    }

    public var periods: [(group: String?, period: ConversionPeriod)] {
        dimensions.orderedGroups(groups).flatMap { g in (groups[g] ?? template).periods.map { (g, $0) } }
    }
}
