import LedgerCore
import Testing

@Suite("Report calendar")
struct ReportCalendarTests {
    /// The calendar's own answer: midnight of the civil day, then back to Monday or to the 1st.
    static func civilStart(_ t: Timestamp, _ interval: ReportInterval) -> Timestamp {
        var c = t.civil
        (c.hour, c.minute, c.second, c.microsecond) = (0, 0, 0, 0)
        if interval == .month { c.day = 1 }
        var start = Timestamp(civil: c)
        if interval == .week {
            while !isMonday(start) {
                start = Timestamp(microseconds: start.microseconds - 86_400_000_000)
            }
        }
        return start
    }

    static func isMonday(_ t: Timestamp) -> Bool {
        // 2024-01-01 was a Monday.
        let monday = try! Timestamp(rfc3339: "2024-01-01T00:00:00Z").microseconds
        return (t.microseconds - monday) % (7 * 86_400_000_000) == 0
    }

    @Test("day and week starts by arithmetic equal the calendar's, before 1970 and after, at and around midnight")
    func periodStarts() throws {
        var instants: [Timestamp] = []
        for text in [
            "0001-01-01T00:00:00Z", "1969-12-31T23:59:59.999999Z", "1970-01-01T00:00:00Z", "2024-02-29T12:00:00Z",
            "2026-03-01T00:00:00Z", "2026-03-01T10:00:00Z", "9999-12-31T23:59:59Z",
        ] {
            instants.append(try Timestamp(rfc3339: text))
        }
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<2000 {
            x = x &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            // Years 1 to 9999, microsecond precision.
            let span: UInt64 = 315_537_897_599_999_999
            instants.append(Timestamp(microseconds: -62_135_596_800_000_000 + Int64(x % span)))
        }
        for t in instants {
            for interval in ReportInterval.allCases {
                #expect(interval.periodStart(containing: t) == Self.civilStart(t, interval), "\(interval) of \(t.rfc3339)")
            }
        }
    }
}
