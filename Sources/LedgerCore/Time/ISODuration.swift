/// An ISO 8601 duration (`P1M`, `P1Y`, `P7D`, `P1W`, `PT36H`), added with UTC calendar arithmetic.
public struct ISODuration: Sendable, Hashable, CustomStringConvertible {
    public var months: Int
    public var days: Int
    public var seconds: Int
    public let text: String

    /// Parses `PnYnMnWnDTnHnMnS` (integers only, at least one part, not all zero).
    public init?(_ text: String) {
        if let simple = Self.single(text) {
            self = simple
            return
        }
        var rest = Substring(text)
        guard rest.first == "P" else { return nil }
        rest = rest.dropFirst()
        var months = 0
        var days = 0
        var seconds = 0
        var inTime = false
        var sawPart = false
        var lastDateUnit = 0
        var lastTimeUnit = 0
        while let c = rest.first {
            if c == "T" {
                guard !inTime else { return nil }
                inTime = true
                rest = rest.dropFirst()
                continue
            }
            let digits = rest.prefix(while: { $0.isASCII && $0.isNumber })
            guard !digits.isEmpty, digits.count <= 6, let n = Int(digits) else { return nil }
            rest = rest.dropFirst(digits.count)
            guard let unit = rest.first else { return nil }
            rest = rest.dropFirst()
            sawPart = true
            if inTime {
                let order: [Character: Int] = ["H": 1, "M": 2, "S": 3]
                guard let o = order[unit], o > lastTimeUnit else { return nil }
                lastTimeUnit = o
                seconds += n * (unit == "H" ? 3600 : unit == "M" ? 60 : 1)
            } else {
                let order: [Character: Int] = ["Y": 1, "M": 2, "W": 3, "D": 4]
                guard let o = order[unit], o > lastDateUnit else { return nil }
                lastDateUnit = o
                switch unit {
                case "Y": months += 12 * n
                case "M": months += n
                case "W": days += 7 * n
                default: days += n
                }
            }
        }
        guard sawPart, !(inTime && lastTimeUnit == 0), months + days + seconds > 0 else { return nil }
        self.months = months
        self.days = days
        self.seconds = seconds
        self.text = text
    }

    /// The common one-part date forms (`P1M`, `P1Y`, `P3M`, `P1W`, `P7D`) read byte by byte; anything else
    /// goes to the general parser (the fold and the report facts parse a period per transaction).
    private static func single(_ text: String) -> ISODuration? {
        var n = 0
        var digits = 0
        var unit: UInt8 = 0
        for (i, byte) in text.utf8.enumerated() {
            if i == 0 {
                guard byte == UInt8(ascii: "P") else { return nil }
            } else if unit != 0 {
                return nil
            } else if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                digits += 1
                guard digits <= 6 else { return nil }
                n = n * 10 + Int(byte - UInt8(ascii: "0"))
            } else {
                guard digits > 0 else { return nil }
                unit = byte
            }
        }
        guard n > 0 else { return nil }
        switch unit {
        case UInt8(ascii: "Y"): return ISODuration(months: 12 * n, days: 0, seconds: 0, text: text)
        case UInt8(ascii: "M"): return ISODuration(months: n, days: 0, seconds: 0, text: text)
        case UInt8(ascii: "W"): return ISODuration(months: 0, days: 7 * n, seconds: 0, text: text)
        case UInt8(ascii: "D"): return ISODuration(months: 0, days: n, seconds: 0, text: text)
        default: return nil
        }
    }

    private init(months: Int, days: Int, seconds: Int, text: String) {
        self.months = months
        self.days = days
        self.seconds = seconds
        self.text = text
    }

    public var description: String { text }

    /// `t + self`: months first (the day clamped to the month's length, so `P1M` from 31 Jan is 28/29 Feb),
    /// then days, then seconds. A result past `Timestamp.maximum` saturates there (`P999999Y` would otherwise
    /// overflow the microsecond count and trap).
    public func added(to t: Timestamp) -> Timestamp {
        var c = t.civil
        if months != 0 {
            let total = c.year * 12 + (c.month - 1) + months
            c.year = total / 12
            c.month = total % 12 + 1
            guard c.year <= 9999 else { return .maximum }
            c.day = min(c.day, CivilDateTime.daysInMonth(year: c.year, month: c.month))
        }
        let base = Timestamp(civil: c)
        let (sum, overflow) = base.microseconds.addingReportingOverflow(
            (Int64(days) * 86_400 + Int64(seconds)) * 1_000_000)
        return overflow ? .maximum : Timestamp(microseconds: min(sum, Timestamp.maximum.microseconds))
    }
}
