/// A UTC instant with microsecond resolution, PostgreSQL's `timestamptz` resolution.
///
/// Kept as an integer so that what the ledger hashes, stores and reads back is exactly the same value
/// (Foundation's `Date` is a `Double`).
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Microseconds since 1970-01-01T00:00:00Z.
    public var microseconds: Int64

    /// The accepted range: years 0001 through 9999.
    public static let minimum = Timestamp(civil: CivilDateTime(year: 1, month: 1, day: 1))
    public static let maximum = Timestamp(microseconds: Timestamp(civil: CivilDateTime(year: 10000, month: 1, day: 1)).microseconds - 1)

    public init(microseconds: Int64) {
        self.microseconds = microseconds
    }

    public init(civil: CivilDateTime) {
        let days = Int64(CivilDateTime.daysFromCivil(year: civil.year, month: civil.month, day: civil.day))
        let seconds = days * 86_400 + Int64(civil.hour * 3600 + civil.minute * 60 + civil.second)
        self.microseconds = seconds * 1_000_000 + Int64(civil.microsecond)
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool { lhs.microseconds < rhs.microseconds }

    public var civil: CivilDateTime {
        let (seconds, micros) = microseconds.floorDivided(by: 1_000_000)
        let (days, secondOfDay) = seconds.floorDivided(by: 86_400)
        let (y, m, d) = CivilDateTime.civilFromDays(Int(days))
        return CivilDateTime(
            year: y, month: m, day: d, hour: Int(secondOfDay / 3600), minute: Int(secondOfDay % 3600 / 60),
            second: Int(secondOfDay % 60), microsecond: Int(micros))
    }

    /// RFC 3339 in UTC with `Z`; the fraction is omitted when zero, else given in 3 or 6 digits.
    public var rfc3339: String {
        let c = civil
        // Written digit by digit: this runs for every timestamp the ledger hashes, stores or shows.
        var out = [UInt8]()
        out.reserveCapacity(27)
        func digits(_ value: Int, _ width: Int) {
            var divisor = 1
            for _ in 1..<width { divisor *= 10 }
            var v = value
            if v >= divisor * 10 {
                out.append(contentsOf: String(v).utf8)
                return
            }
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(v / divisor))
                v %= divisor
                divisor /= 10
            }
        }
        digits(c.year, 4)
        out.append(UInt8(ascii: "-"))
        digits(c.month, 2)
        out.append(UInt8(ascii: "-"))
        digits(c.day, 2)
        out.append(UInt8(ascii: "T"))
        digits(c.hour, 2)
        out.append(UInt8(ascii: ":"))
        digits(c.minute, 2)
        out.append(UInt8(ascii: ":"))
        digits(c.second, 2)
        if c.microsecond != 0 {
            out.append(UInt8(ascii: "."))
            if c.microsecond % 1000 == 0 { digits(c.microsecond / 1000, 3) } else { digits(c.microsecond, 6) }
        }
        out.append(UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

    public var description: String { rfc3339 }
}

extension Int64 {
    /// Division rounding towards negative infinity, with a non-negative remainder.
    func floorDivided(by divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        var q = self / divisor
        var r = self % divisor
        if r < 0 {
            q -= 1
            r += divisor
        }
        return (q, r)
    }
}
