import Foundation
import Testing

@testable import LedgerCore

@Suite("Timestamps and RFC 3339")
struct TimestampTests {
    private func parse(_ text: String) -> Result<Timestamp, Timestamp.ParseError> {
        do {
            return .success(try Timestamp(rfc3339: text))
        } catch {
            return .failure(error)
        }
    }

    @Test(
        "parses RFC 3339 and normalises to UTC",
        arguments: [
            ("2026-03-01T10:00:00Z", "2026-03-01T10:00:00Z"),
            ("2026-03-01t10:00:00z", "2026-03-01T10:00:00Z"),
            ("2026-03-01 10:00:00Z", "2026-03-01T10:00:00Z"),
            ("2026-03-01T10:00:00+00:00", "2026-03-01T10:00:00Z"),
            ("2026-03-01T10:00:00-00:00", "2026-03-01T10:00:00Z"),
            ("2026-03-01T12:00:00+02:00", "2026-03-01T10:00:00Z"),
            ("2026-03-01T05:30:00-04:30", "2026-03-01T10:00:00Z"),
            ("2026-03-01T01:00:00+02:00", "2026-02-28T23:00:00Z"),
            ("2024-03-01T01:00:00+02:00", "2024-02-29T23:00:00Z"),
            ("2025-12-31T23:00:00-01:00", "2026-01-01T00:00:00Z"),
            ("2026-03-01T23:59:59+23:59", "2026-03-01T00:00:59Z"),
            ("2026-03-01T00:00:00-23:59", "2026-03-01T23:59:00Z"),
            ("2026-03-01T10:00:00.5Z", "2026-03-01T10:00:00.500Z"),
            ("2026-03-01T10:00:00.12Z", "2026-03-01T10:00:00.120Z"),
            ("2026-03-01T10:00:00.123Z", "2026-03-01T10:00:00.123Z"),
            ("2026-03-01T10:00:00.1234Z", "2026-03-01T10:00:00.123400Z"),
            ("2026-03-01T10:00:00.123456Z", "2026-03-01T10:00:00.123456Z"),
            ("2026-03-01T10:00:00.000001Z", "2026-03-01T10:00:00.000001Z"),
            ("2026-03-01T10:00:00.000Z", "2026-03-01T10:00:00Z"),
            ("2026-03-01T10:00:00.0Z", "2026-03-01T10:00:00Z"),
            ("2026-03-01T10:00:00.123000000Z", "2026-03-01T10:00:00.123Z"),
            ("2026-03-01T10:00:00.123456000Z", "2026-03-01T10:00:00.123456Z"),
            ("2026-03-01T10:00:00.999999000000000000000Z", "2026-03-01T10:00:00.999999Z"),
            ("2026-03-01T12:00:00.250+02:00", "2026-03-01T10:00:00.250Z"),
            ("2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z"),
            ("2000-02-29T12:00:00Z", "2000-02-29T12:00:00Z"),
            ("1600-02-29T12:00:00Z", "1600-02-29T12:00:00Z"),
            ("2026-12-31T23:59:59Z", "2026-12-31T23:59:59Z"),
            ("2026-04-30T00:00:00Z", "2026-04-30T00:00:00Z"),
            ("1969-12-31T23:59:59.999999Z", "1969-12-31T23:59:59.999999Z"),
            ("1900-03-01T00:00:00Z", "1900-03-01T00:00:00Z"),
            ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"),
            ("0001-01-01T01:00:00+01:00", "0001-01-01T00:00:00Z"),
            ("9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.999999Z"),
            ("9999-12-31T23:59:59.999999-00:00", "9999-12-31T23:59:59.999999Z"),
        ])
    func parses(text: String, utc: String) throws {
        let t = try Timestamp(rfc3339: text)
        #expect(t.rfc3339 == utc)
        #expect(try Timestamp(rfc3339: utc) == t)
    }

    @Test("offsets convert to the same instant")
    func offsets() throws {
        let z = try Timestamp(rfc3339: "2026-03-01T10:00:00Z")
        #expect(try Timestamp(rfc3339: "2026-03-01T12:00:00+02:00") == z)
        #expect(try Timestamp(rfc3339: "2026-03-01T04:00:00-06:00") == z)
        #expect(try Timestamp(rfc3339: "2026-03-01T15:45:00+05:45") == z)
        #expect(try Timestamp(rfc3339: "2026-03-01T12:00:00+02:00").microseconds - z.microseconds == 0)
        #expect(try Timestamp(rfc3339: "2026-03-01T10:00:00+02:00") < z)
    }

    @Test(
        "rejects what is not RFC 3339",
        arguments: [
            "", "2026-03-01", "2026-03-01T10:00:00", "2026-03-01T10:00Z", "2026-3-01T10:00:00Z", "26-03-01T10:00:00Z",
            "2026-03-01T10:00:00.Z", "2026-03-01T10:00:00+0200", "2026-03-01T10:00:00+02", "2026-03-01T10:00:00+2:00",
            "2026-03-01T10:00:00 Z", "2026-03-01T10:00:00Z ", " 2026-03-01T10:00:00Z", "2026/03/01T10:00:00Z",
            "2026-03-01X10:00:00Z", "2026-03-01T10:00:00UTC", "2026-03-01T10:00:00GMT", "2026-03-01T10:00:00,5Z",
            "2026-03-01T10:00:00.5", "2026-03-01T10:00:00.5.5Z", "10000-01-01T00:00:00Z", "+2026-03-01T10:00:00Z",
            "-0001-01-01T00:00:00Z", "2026-03-01T10:00:00ZZ", "2026-03-01T1a:00:00Z", "２０２６-03-01T10:00:00Z",
            "2026-03-01T10:00:00Z\n", "2026-03-01T10:00:00\u{2212}02:00", "1709164800",
        ])
    func malformed(text: String) {
        #expect(parse(text) == .failure(.malformed), "\(text.debugDescription)")
    }

    @Test(
        "rejects dates and times that do not exist or are out of range",
        arguments: [
            "2025-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2100-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
            "2026-00-10T00:00:00Z", "2026-04-31T00:00:00Z", "2026-06-31T00:00:00Z", "2026-01-32T00:00:00Z",
            "2026-01-00T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T23:60:00Z", "2026-12-31T23:59:60Z",
            "2026-01-01T99:99:99Z", "0000-01-01T00:00:00Z", "0000-12-31T23:59:59Z", "0001-01-01T00:30:00+01:00",
            "9999-12-31T23:30:00-01:00", "2026-03-01T10:00:00+24:00", "2026-03-01T10:00:00+01:60",
        ])
    func outOfRange(text: String) {
        #expect(parse(text) == .failure(.outOfRange), "\(text.debugDescription)")
    }

    @Test(
        "refuses precision finer than a microsecond unless it is zeros",
        arguments: [
            "2026-03-01T10:00:00.1234567Z", "2026-03-01T10:00:00.0000001Z", "2026-03-01T10:00:00.123456001Z",
            "2026-03-01T10:00:00.999999999Z", "2026-03-01T10:00:00.0000000000001+02:00",
        ])
    func subMicrosecond(text: String) {
        #expect(parse(text) == .failure(.subMicrosecond), "\(text.debugDescription)")
    }

    @Test("parse errors explain themselves")
    func errorDescriptions() {
        #expect(Timestamp.ParseError.malformed.description.contains("RFC 3339"))
        #expect(Timestamp.ParseError.outOfRange.description.contains("0001"))
        #expect(Timestamp.ParseError.outOfRange.description.contains("9999"))
        #expect(Timestamp.ParseError.subMicrosecond.description.contains("microsecond"))
    }

    @Test(
        "formatting: no fraction, 3 digits or 6 digits, always Z",
        arguments: [
            (Int64(0), "1970-01-01T00:00:00Z"),
            (1, "1970-01-01T00:00:00.000001Z"),
            (100, "1970-01-01T00:00:00.000100Z"),
            (1_000, "1970-01-01T00:00:00.001Z"),
            (120_000, "1970-01-01T00:00:00.120Z"),
            (500_000, "1970-01-01T00:00:00.500Z"),
            (123_456, "1970-01-01T00:00:00.123456Z"),
            (999_999, "1970-01-01T00:00:00.999999Z"),
            (1_000_000, "1970-01-01T00:00:01Z"),
            (-1, "1969-12-31T23:59:59.999999Z"),
            (-1_000, "1969-12-31T23:59:59.999Z"),
            (-1_000_000, "1969-12-31T23:59:59Z"),
            (-86_400_000_000, "1969-12-31T00:00:00Z"),
            (1_700_000_000_000_000, "2023-11-14T22:13:20Z"),
            (1_709_164_800_123_456, "2024-02-29T00:00:00.123456Z"),
            (951_782_400_000_000, "2000-02-29T00:00:00Z"),
            (-14_182_940_000_000, "1969-07-20T20:17:40Z"),
            (-2_208_988_800_000_000, "1900-01-01T00:00:00Z"),
            (-12_219_292_800_000_000, "1582-10-15T00:00:00Z"),
            (-28_502_721_000_000_000, "1066-10-14T09:30:00Z"),
            (4_107_542_400_000_000, "2100-03-01T00:00:00Z"),
            (-62_135_596_800_000_000, "0001-01-01T00:00:00Z"),
            (253_402_300_799_999_999, "9999-12-31T23:59:59.999999Z"),
        ])
    func formatting(microseconds: Int64, text: String) throws {
        let t = Timestamp(microseconds: microseconds)
        #expect(t.rfc3339 == text)
        #expect(t.description == text)
        #expect(try Timestamp(rfc3339: text) == t)
    }

    @Test("the accepted range is years 0001 through 9999")
    func range() {
        #expect(Timestamp.minimum.microseconds == -62_135_596_800_000_000)
        #expect(Timestamp.maximum.microseconds == 253_402_300_799_999_999)
        #expect(Timestamp.minimum.rfc3339 == "0001-01-01T00:00:00Z")
        #expect(Timestamp.maximum.rfc3339 == "9999-12-31T23:59:59.999999Z")
        #expect(Timestamp.minimum < Timestamp(microseconds: 0))
        #expect(Timestamp(microseconds: 0) < Timestamp.maximum)
    }

    static let instants: [Int64] = [
        0, 1, -1, 999_999, -999_999, 1_000_000, -1_000_001, 86_399_999_999, 86_400_000_000, -86_400_000_000,
        -86_400_000_001, 951_782_400_000_000, 951_868_799_999_999, -2_208_988_800_000_000, -62_135_596_800_000_000,
        253_402_300_799_999_999, 1_709_164_800_123_456, -12_219_292_800_000_000, -11_670_955_200_000_000,
        4_107_542_400_000_000, -28_502_721_000_000_000, -14_182_940_000_000, 1_772_359_200_000_000,
        -50_000_000_000_000_000, 200_000_000_000_000_000, 123_456_789_012_345, -123_456_789_012_345,
    ]

    @Test("civil fields round-trip, before and after 1970", arguments: instants)
    func civilRoundTrip(microseconds: Int64) throws {
        let t = Timestamp(microseconds: microseconds)
        let c = t.civil
        #expect((1...9999).contains(c.year))
        #expect((1...12).contains(c.month))
        #expect((1...CivilDateTime.daysInMonth(year: c.year, month: c.month)).contains(c.day))
        #expect((0...23).contains(c.hour) && (0...59).contains(c.minute) && (0...59).contains(c.second))
        #expect((0...999_999).contains(c.microsecond))
        #expect(Timestamp(civil: c) == t)
        #expect(try Timestamp(rfc3339: t.rfc3339) == t)
    }

    @Test("civil fields of known instants")
    func knownCivil() {
        #expect(
            Timestamp(microseconds: -1).civil
                == CivilDateTime(
                    year: 1969, month: 12, day: 31, hour: 23, minute: 59, second: 59, microsecond: 999_999))
        #expect(
            Timestamp(microseconds: 1_709_164_800_123_456).civil
                == CivilDateTime(
                    year: 2024, month: 2, day: 29, microsecond: 123_456))
        #expect(Timestamp(civil: CivilDateTime(year: 1970, month: 1, day: 1)).microseconds == 0)
        #expect(
            Timestamp(civil: CivilDateTime(year: 1969, month: 7, day: 20, hour: 20, minute: 17, second: 40))
                .microseconds == -14_182_940_000_000)
    }

    @Test("ordering follows the instant")
    func ordering() throws {
        let texts = [
            "2026-03-01T10:00:00.000001Z", "1969-12-31T23:59:59Z", "2026-03-01T10:00:00Z", "0001-01-01T00:00:00Z",
            "2026-03-01T11:00:00+02:00",
        ]
        let sorted = try texts.map { try Timestamp(rfc3339: $0) }.sorted().map(\.rfc3339)
        #expect(
            sorted == [
                "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2026-03-01T09:00:00Z", "2026-03-01T10:00:00Z",
                "2026-03-01T10:00:00.000001Z",
            ])
    }
}

@Suite("Civil calendar")
struct CivilDateTimeTests {
    @Test(
        "leap years",
        arguments: [
            (2024, true), (2025, false), (2000, true), (1900, false), (2100, false), (2400, true), (1600, true), (4, true),
            (1, false), (9996, true), (9999, false),
        ])
    func leapYears(year: Int, leap: Bool) {
        #expect(CivilDateTime.isLeapYear(year) == leap)
        #expect(CivilDateTime.daysInMonth(year: year, month: 2) == (leap ? 29 : 28))
    }

    @Test("days in each month")
    func daysInMonth() {
        let lengths = (1...12).map { CivilDateTime.daysInMonth(year: 2026, month: $0) }
        #expect(lengths == [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
        #expect(lengths.reduce(0, +) == 365)
        #expect((1...12).map { CivilDateTime.daysInMonth(year: 2024, month: $0) }.reduce(0, +) == 366)
    }

    @Test("day numbers and civil dates convert both ways over the whole range")
    func dayConversions() {
        let first = CivilDateTime.daysFromCivil(year: 1, month: 1, day: 1)
        let last = CivilDateTime.daysFromCivil(year: 9999, month: 12, day: 31)
        #expect(first == -719_162)
        #expect(last == 2_932_896)
        #expect(CivilDateTime.daysFromCivil(year: 1970, month: 1, day: 1) == 0)
        #expect(CivilDateTime.daysFromCivil(year: 2000, month: 3, day: 1) == 11_017)
        for days in stride(from: first, through: last, by: 97) {
            let (y, m, d) = CivilDateTime.civilFromDays(days)
            #expect(CivilDateTime.daysFromCivil(year: y, month: m, day: d) == days)
        }
    }

    @Test("consecutive day numbers are consecutive calendar days across a whole 400-year cycle")
    func consecutiveDays() {
        let start = CivilDateTime.daysFromCivil(year: 1600, month: 1, day: 1)
        let end = CivilDateTime.daysFromCivil(year: 2000, month: 1, day: 1)
        #expect(end - start == 146_097)
        func ymd(_ days: Int) -> [Int] {
            let c = CivilDateTime.civilFromDays(days)
            return [c.year, c.month, c.day]
        }
        var previous = ymd(start - 1)
        #expect(previous == [1599, 12, 31])
        var failures: [Int] = []
        for days in start...end {
            let c = ymd(days)
            let (y, m, d) = (previous[0], previous[1], previous[2])
            let expected: [Int]
            if d < CivilDateTime.daysInMonth(year: y, month: m) {
                expected = [y, m, d + 1]
            } else if m < 12 {
                expected = [y, m + 1, 1]
            } else {
                expected = [y + 1, 1, 1]
            }
            if c != expected { failures.append(days) }
            previous = c
        }
        #expect(failures.isEmpty)
        #expect(previous == [2000, 1, 1])
    }

    @Test("the written form reads back as the same instant over the whole range, padded to four-digit years")
    func writtenFormRoundTrips() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let t = Timestamp(microseconds: Int64.random(in: Timestamp.minimum.microseconds...Timestamp.maximum.microseconds, using: &generator))
            #expect(try Timestamp(rfc3339: t.rfc3339) == t)
        }
        #expect(Timestamp.minimum.rfc3339 == "0001-01-01T00:00:00Z")
        #expect(Timestamp.maximum.rfc3339 == "9999-12-31T23:59:59.999999Z")
        #expect(Timestamp(microseconds: 1_500).rfc3339 == "1970-01-01T00:00:00.001500Z")
    }

    @Test("event ids are written in lower case as Foundation formats them")
    func uuidText() {
        for _ in 0..<1_000 {
            let id = UUID()
            #expect(id.lowercasedString == id.uuidString.lowercased())
        }
    }
}
