import LedgerTestSupport
import Testing

@testable import LedgerCore

/// The fold keeps each entitlement's merged runs so that a stacked grant finds its coverage by binary search
/// (issue 32: credits folded O(n) each). The runs must answer exactly what the sweep over every window does.
@Suite("Coverage runs: the same answers as the sweep")
struct CoverageRunsTests {
    @Test("random intervals, inserted in any order, and random instants: runEnd equals Coverage.runEnd")
    func equalsTheSweep() {
        var r = SplitMix64(seed: 32)
        for _ in 0..<400 {
            var intervals: [(Timestamp, Timestamp?)] = []
            var runs = CoverageRuns()
            for _ in 0..<r.int(0...25) {
                let s = Int64(r.int(0...60))
                let e: Int64? = r.int(0...12) == 0 ? nil : s + Int64(r.int(1...15))
                let interval = (Timestamp(microseconds: s), e.map { Timestamp(microseconds: $0) })
                intervals.append(interval)
                runs.insert(interval.0, interval.1)
                for t in 0...80 {
                    let at = Timestamp(microseconds: Int64(t))
                    #expect(runs.runEnd(containing: at) == Coverage.runEnd(intervals, containing: at))
                }
            }
        }
    }
}
