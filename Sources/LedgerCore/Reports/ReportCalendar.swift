/// The period grid reports are computed on: calendar-aligned UTC days, ISO weeks (Monday) or months.
public enum ReportInterval: String, Sendable, Hashable, CaseIterable {
    case day, week, month

    /// The start of the period containing `t`.
    public func periodStart(containing t: Timestamp) -> Timestamp {
        // Days and weeks by arithmetic on the day number (the rollups ask this for every run and trial);
        // months through the calendar.
        let days = t.microseconds.floorDivided(by: 86_400_000_000).quotient
        switch self {
        case .day:
            return Timestamp(microseconds: days * 86_400_000_000)
        case .week:
            let weekday = (days + 3).floorDivided(by: 7).remainder  // 1970-01-01 was a Thursday: Monday = 0
            return Timestamp(microseconds: (days - weekday) * 86_400_000_000)
        case .month:
            var c = t.civil
            (c.day, c.hour, c.minute, c.second, c.microsecond) = (1, 0, 0, 0, 0)
            return Timestamp(civil: c)
        }
    }

    /// The start of the period after the one that starts at `start`.
    public func next(after start: Timestamp) -> Timestamp {
        switch self {
        case .day: Timestamp(microseconds: start.microseconds + 86_400_000_000)
        case .week: Timestamp(microseconds: start.microseconds + 7 * 86_400_000_000)
        case .month: ReportCalendar.addingMonths(1, to: start)
        }
    }
}

/// Period boundaries for a report over `[from, to)`.
public enum ReportCalendar {
    /// Boundaries `b0 < b1 < … < bN` of the calendar periods that cover `[from, to)`: `b0` is the start of the
    /// period containing `from`, `bN` the first boundary at or after `to`. Empty when `to <= from`.
    public static func boundaries(from: Timestamp, to: Timestamp, interval: ReportInterval) -> [Timestamp] {
        guard from < to else { return [] }
        var bounds = [interval.periodStart(containing: from)]
        while bounds[bounds.count - 1] < to { bounds.append(interval.next(after: bounds[bounds.count - 1])) }
        return bounds
    }

    /// How many periods `boundaries(from:to:interval:)` would give, without building them (for limits).
    public static func periodCount(from: Timestamp, to: Timestamp, interval: ReportInterval) -> Int {
        guard from < to else { return 0 }
        let start = interval.periodStart(containing: from)
        let span = to.microseconds - start.microseconds
        switch interval {
        case .day: return Int((span + 86_400_000_000 - 1) / 86_400_000_000)
        case .week: return Int((span + 7 * 86_400_000_000 - 1) / (7 * 86_400_000_000))
        case .month:
            let a = start.civil
            let b = to.civil
            let months = (b.year - a.year) * 12 + (b.month - a.month)
            return addingMonths(months, to: start) < to ? months + 1 : months
        }
    }

    /// The first instant of `t`'s month plus `months` months.
    public static func addingMonths(_ months: Int, to t: Timestamp) -> Timestamp {
        let c = t.civil
        let total = c.year * 12 + (c.month - 1) + months
        return Timestamp(civil: CivilDateTime(year: total / 12, month: total % 12 + 1, day: 1))
    }

    /// The month containing `t`, as its first instant.
    public static func monthStart(_ t: Timestamp) -> Timestamp { ReportInterval.month.periodStart(containing: t) }
}

extension Array where Element == Timestamp {
    /// For ascending boundaries: the index of the first one after `t` (`count` if none), by binary search.
    public func firstIndex(after t: Timestamp) -> Int {
        var (lo, hi) = (0, count)
        while lo < hi {
            let mid = (lo + hi) / 2
            if self[mid] > t { hi = mid } else { lo = mid + 1 }
        }
        return lo
    }

    /// For ascending boundaries: the period `[self[i], self[i + 1])` containing `t`, nil outside them all.
    public func period(containing t: Timestamp) -> Int? {
        guard let first, let last, t >= first, t < last else { return nil }
        return firstIndex(after: t) - 1
    }
}
