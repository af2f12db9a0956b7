import Foundation
import LedgerCore
import LedgerStore
import Logging
import ServiceLifecycle

/// `serve --apple-backfill-interval`: reads Apple's notification history every interval from a durable
/// high-water mark (`store_sync_marks`), so notifications lost on the way (an outage on either side, a
/// wrong URL) still land within one interval. Each run starts an hour before the mark, since Apple may
/// record a notification a little after its send time; the overlap appends nothing.
public struct AppleBackfillService: Service {
    let backfill: AppleBackfill
    let marks: StoreSyncMarks
    let interval: Duration
    let logger: Logger
    let clock: @Sendable () -> Timestamp

    static let markName = "notification_history"
    static let overlap: Int64 = 3_600_000_000
    /// Apple keeps 180 days; a first run (no mark) reads the last 179.
    static let reach: Int64 = 179 * 86_400_000_000

    public init(
        backfill: AppleBackfill, marks: StoreSyncMarks, interval: Duration, logger: Logger,
        clock: @escaping @Sendable () -> Timestamp = { Timestamp(microseconds: Int64(Date().timeIntervalSince1970 * 1_000_000)) }
    ) {
        self.backfill = backfill
        self.marks = marks
        self.interval = interval
        self.logger = logger
        self.clock = clock
    }

    public func run() async throws {
        await runPeriodically(every: interval, logger: logger, what: "apple backfill") { try await runOnce() }
    }

    /// One run from the mark to now; the mark moves only after the whole range was read.
    @discardableResult
    public func runOnce() async throws -> AppleBackfill.Summary {
        let now = clock()
        let floor = now.microseconds - Self.reach
        let mark = try await marks.mark(store: "apple", name: Self.markName)
        let since = Timestamp(microseconds: max(floor, (mark?.microseconds ?? floor) - Self.overlap))
        let summary = try await backfill.run(since: since, until: now, now: now)
        try await marks.advance(store: "apple", name: Self.markName, to: now)
        logger.log(
            level: summary.new + summary.pending + summary.failed > 0 ? .info : .debug, "apple backfill",
            metadata: [
                "apple.backfill.since": "\(since.rfc3339)", "apple.backfill.seen": "\(summary.seen)", "apple.backfill.new": "\(summary.new)",
                "apple.backfill.pending": "\(summary.pending)", "apple.backfill.failed": "\(summary.failed)",
            ])
        return summary
    }
}
