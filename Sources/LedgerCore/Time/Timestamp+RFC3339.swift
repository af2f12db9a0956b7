extension Timestamp {
    /// Why a text is not an acceptable RFC 3339 timestamp.
    public enum ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        case malformed
        case outOfRange
        case subMicrosecond

        public var description: String {
            switch self {
            case .malformed: "must be an RFC 3339 timestamp such as 2026-03-01T10:00:00Z"
            case .outOfRange: "is not a valid date and time between years 0001 and 9999"
            case .subMicrosecond: "has more than microsecond precision"
            }
        }
    }

    /// Parses RFC 3339 (`2026-03-01T10:00:00Z`, `…T10:00:00.123456+02:00`); the offset is applied and the
    /// instant kept in UTC. Fractions beyond microseconds must be zeros.
    public init(rfc3339 text: String) throws(ParseError) {
        // On the string's own UTF-8 bytes, without copying them: every event's timestamps are parsed on
        // every append and every fold.
        var text = text
        self = try text.withUTF8 { bytes in Result { () throws(ParseError) in try Self.parse(rfc3339: bytes) } }.get()
    }

    private static func parse(rfc3339 b: UnsafeBufferPointer<UInt8>) throws(ParseError) -> Timestamp {
        var i = 0
        func number(_ width: Int) throws(ParseError) -> Int {
            guard i + width <= b.count else { throw .malformed }
            var v = 0
            for k in i..<i + width {
                guard b[k] >= 0x30, b[k] <= 0x39 else { throw .malformed }
                v = v * 10 + Int(b[k] - 0x30)
            }
            i += width
            return v
        }
        func expect(_ char: UInt8, or other: UInt8? = nil, or third: UInt8? = nil) throws(ParseError) {
            guard i < b.count, b[i] == char || b[i] == other || b[i] == third else { throw .malformed }
            i += 1
        }
        let year = try number(4)
        try expect(UInt8(ascii: "-"))
        let month = try number(2)
        try expect(UInt8(ascii: "-"))
        let day = try number(2)
        try expect(UInt8(ascii: "T"), or: UInt8(ascii: "t"), or: UInt8(ascii: " "))
        let hour = try number(2)
        try expect(UInt8(ascii: ":"))
        let minute = try number(2)
        try expect(UInt8(ascii: ":"))
        let second = try number(2)
        var micro = 0
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            var digits = 0
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                let d = Int(b[i] - 0x30)
                if digits < 6 {
                    micro = micro * 10 + d
                } else if d != 0 {
                    throw .subMicrosecond
                }
                digits += 1
                i += 1
            }
            guard digits > 0 else { throw .malformed }
            for _ in digits..<max(digits, 6) { micro *= 10 }
        }
        var offsetSeconds = 0
        guard i < b.count else { throw .malformed }
        if b[i] == UInt8(ascii: "Z") || b[i] == UInt8(ascii: "z") {
            i += 1
        } else if b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let sign = b[i] == UInt8(ascii: "-") ? -1 : 1
            i += 1
            let oh = try number(2)
            try expect(UInt8(ascii: ":"))
            let om = try number(2)
            guard oh <= 23, om <= 59 else { throw .outOfRange }
            offsetSeconds = sign * (oh * 3600 + om * 60)
        } else {
            throw .malformed
        }
        guard i == b.count else { throw .malformed }
        guard year >= 1, (1...12).contains(month), day >= 1, day <= CivilDateTime.daysInMonth(year: year, month: month),
            hour <= 23, minute <= 59, second <= 59
        else { throw .outOfRange }
        let local = Timestamp(
            civil: CivilDateTime(year: year, month: month, day: day, hour: hour, minute: minute, second: second, microsecond: micro))
        let utc = Timestamp(microseconds: local.microseconds - Int64(offsetSeconds) * 1_000_000)
        guard utc >= .minimum, utc <= .maximum else { throw .outOfRange }
        return utc
    }
}
