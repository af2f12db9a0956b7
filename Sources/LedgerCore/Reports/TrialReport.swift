/// Trials started in one period and how many converted (docs/semantics.md section 5).
public struct TrialPeriod: Sendable, Hashable {
    public var start: Timestamp
    public var end: Timestamp
    public var started = 0
    public var converted = 0

    public var conversionRate: Double? { started == 0 ? nil : Double(converted) / Double(started) }
}

/// Counts trials into periods by their start.
public struct TrialAccumulator: Sendable {
    public internal(set) var periods: [TrialPeriod]

    public init(boundaries: [Timestamp]) {
        periods = zip(boundaries, boundaries.dropFirst()).map { TrialPeriod(start: $0, end: $1) }
    }

    /// Adds one trial (a trial transaction counts once, converted if any of its entitlements converted).
    public mutating func add(start: Timestamp, converted: Bool) {
        guard let i = periods.firstIndex(where: { $0.start <= start && start < $0.end }) else { return }
        periods[i].started += 1
        if converted { periods[i].converted += 1 }
    }
}
