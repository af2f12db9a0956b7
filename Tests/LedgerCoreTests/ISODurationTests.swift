import LedgerCore
import Testing

@Suite("ISO 8601 durations")
struct ISODurationTests {
    @Test(
        "parses calendar and clock parts",
        arguments: [
            ("P1M", 1, 0, 0), ("P1Y", 12, 0, 0), ("P1Y2M", 14, 0, 0), ("P12M", 12, 0, 0), ("P3M", 3, 0, 0),
            ("P1W", 0, 7, 0), ("P2W", 0, 14, 0), ("P7D", 0, 7, 0), ("P1Y2M3W4D", 14, 25, 0), ("PT36H", 0, 0, 129_600),
            ("PT1H30M", 0, 0, 5_400), ("PT90S", 0, 0, 90), ("PT1M", 0, 0, 60), ("P1DT12H", 0, 1, 43_200),
            ("P1MT1M", 1, 0, 60), ("P1Y1M1W1DT1H1M1S", 13, 8, 3_661), ("P0Y1M", 1, 0, 0), ("PT0H1S", 0, 0, 1),
            ("P01M", 1, 0, 0), ("P999999D", 0, 999_999, 0),
        ])
    func parses(text: String, months: Int, days: Int, seconds: Int) throws {
        let d = try #require(ISODuration(text))
        #expect(d.months == months)
        #expect(d.days == days)
        #expect(d.seconds == seconds)
        #expect(d.text == text)
        #expect(d.description == text)
    }

    @Test(
        "rejects what is not a positive ISO 8601 duration",
        arguments: [
            "", "P", "PT", "P1YT", "P1DT", "T1H", "P1M2Y", "P1D1W", "P1D1M", "PT1S1M", "PT1M1H", "P0D", "PT0S", "P0Y0M0D",
            "P0W", "1M", "M", "P1", "PT1", "P1X", "P1.5M", "P1,5M", "P-1M", "P+1M", "p1m", "P1m", "pt1h", "PT1D", "PT1Y",
            "P1H", "P1S", "P1MT1M1H", "P1Y1Y", "PT1H1H", "P1TT1H", "PT1HT1M", "P1000000D", " P1M", "P1M ", "P１M",
            "P1Y 2M", "P1MP1M", "P1M\n", "P٣M",
        ])
    func rejects(text: String) {
        #expect(ISODuration(text) == nil, "accepted \(text.debugDescription)")
    }

    @Test(
        "adds in UTC calendar arithmetic: months clamp to the month's length, then days, then time",
        arguments: [
            ("P1M", "2026-01-31T10:00:00Z", "2026-02-28T10:00:00Z"),
            ("P1M", "2024-01-31T10:00:00Z", "2024-02-29T10:00:00Z"),
            ("P1M", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z"),
            ("P1M", "2026-01-15T08:30:00.123456Z", "2026-02-15T08:30:00.123456Z"),
            ("P1M", "2026-12-15T08:30:00Z", "2027-01-15T08:30:00Z"),
            ("P1M", "2026-12-31T23:59:59.999999Z", "2027-01-31T23:59:59.999999Z"),
            ("P1M", "1969-12-31T23:59:59.999999Z", "1970-01-31T23:59:59.999999Z"),
            ("P1M", "1900-01-31T00:00:00Z", "1900-02-28T00:00:00Z"),
            ("P2M", "2026-12-31T00:00:00Z", "2027-02-28T00:00:00Z"),
            ("P3M", "2026-11-30T00:00:00Z", "2027-02-28T00:00:00Z"),
            ("P12M", "2024-02-29T00:00:00Z", "2025-02-28T00:00:00Z"),
            ("P1Y", "2024-02-29T00:00:00Z", "2025-02-28T00:00:00Z"),
            ("P4Y", "2024-02-29T00:00:00Z", "2028-02-29T00:00:00Z"),
            ("P1Y", "2026-03-01T10:00:00Z", "2027-03-01T10:00:00Z"),
            ("P1Y", "1999-02-28T00:00:00Z", "2000-02-28T00:00:00Z"),
            ("P1W", "2026-03-01T10:00:00Z", "2026-03-08T10:00:00Z"),
            ("P1W", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z"),
            ("P7D", "2024-02-25T00:00:00Z", "2024-03-03T00:00:00Z"),
            ("P1D", "2024-02-28T12:00:00Z", "2024-02-29T12:00:00Z"),
            ("P1D", "2025-02-28T12:00:00Z", "2025-03-01T12:00:00Z"),
            ("PT36H", "2026-03-01T10:00:00Z", "2026-03-02T22:00:00Z"),
            ("PT1S", "2026-12-31T23:59:59Z", "2027-01-01T00:00:00Z"),
            ("PT90M", "2026-03-01T23:00:00Z", "2026-03-02T00:30:00Z"),
            ("P1MT1H", "2026-01-31T23:30:00Z", "2026-03-01T00:30:00Z"),
            ("P1M1D", "2026-01-31T00:00:00Z", "2026-03-01T00:00:00Z"),
            ("P1Y1M", "2023-01-31T00:00:00Z", "2024-02-29T00:00:00Z"),
            ("P1D", "1969-12-31T12:00:00Z", "1970-01-01T12:00:00Z"),
        ])
    func adds(duration: String, from: String, to: String) throws {
        let d = try #require(ISODuration(duration))
        #expect(d.added(to: Fixtures.timestamp(from)).rfc3339 == to)
    }

    @Test("P1M twelve times from the 15th equals P1Y")
    func monthlyChainMatchesYear() throws {
        let month = try #require(ISODuration("P1M"))
        let year = try #require(ISODuration("P1Y"))
        let start = Fixtures.timestamp("2026-01-15T09:00:00Z")
        var t = start
        for _ in 0..<12 { t = month.added(to: t) }
        #expect(t == year.added(to: start))
        #expect(t.rfc3339 == "2027-01-15T09:00:00Z")
    }

    @Test("P3M chained: each step adds to the previous end, so a clamped day stays clamped")
    func quarterlyChain() throws {
        let quarter = try #require(ISODuration("P3M"))
        var t = Fixtures.timestamp("2025-11-30T00:00:00Z")
        var ends: [String] = []
        for _ in 0..<4 {
            t = quarter.added(to: t)
            ends.append(t.rfc3339)
        }
        #expect(ends == ["2026-02-28T00:00:00Z", "2026-05-28T00:00:00Z", "2026-08-28T00:00:00Z", "2026-11-28T00:00:00Z"])
    }

    @Test("P1M chained from 31 January")
    func monthlyChainFromJan31() throws {
        let month = try #require(ISODuration("P1M"))
        var t = Fixtures.timestamp("2024-01-31T00:00:00Z")
        t = month.added(to: t)
        #expect(t.rfc3339 == "2024-02-29T00:00:00Z")
        t = month.added(to: t)
        #expect(t.rfc3339 == "2024-03-29T00:00:00Z")
    }

    @Test("adding always moves forward", arguments: ["P1M", "P1Y", "P1W", "P1D", "PT1S", "PT36H", "P3M", "P1Y2M3DT4H5M6S"])
    func monotonic(text: String) throws {
        let d = try #require(ISODuration(text))
        for start in ["2024-01-31T00:00:00Z", "2024-02-29T23:59:59Z", "1969-12-31T23:59:59.999999Z", "0001-01-01T00:00:00Z"] {
            let t = Fixtures.timestamp(start)
            #expect(d.added(to: t) > t)
        }
    }

    @Test(
        "huge durations saturate at the end of the representable range instead of overflowing",
        arguments: [
            ("P999999Y", "2026-03-01T10:00:00Z"), ("P999999Y", "9999-12-31T23:59:59.999999Z"),
            ("P999999M", "9999-01-01T00:00:00Z"), ("P999999W", "9999-01-01T00:00:00Z"),
            ("P999999D", "9999-12-31T00:00:00Z"), ("PT999999H", "9999-12-31T00:00:00Z"),
            ("P1D", "9999-12-31T23:59:59.999999Z"),
        ])
    func saturates(duration: String, from: String) throws {
        let d = try #require(ISODuration(duration))
        let t = Fixtures.timestamp(from)
        #expect(d.added(to: t) == Timestamp.maximum)
    }

    @Test("large but representable durations are exact")
    func largeExact() throws {
        let d = try #require(ISODuration("P7000Y"))
        #expect(d.added(to: Fixtures.timestamp("2026-03-01T10:00:00Z")).rfc3339 == "9026-03-01T10:00:00Z")
        let days = try #require(ISODuration("P999999D"))
        #expect(days.added(to: Fixtures.timestamp("2000-01-01T00:00:00Z")).rfc3339 == "4737-11-27T00:00:00Z")
    }
}
