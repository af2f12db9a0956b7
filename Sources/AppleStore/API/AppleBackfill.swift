import LedgerCore
import LedgerStore
import Logging
import StoreAdapters

/// Recovers notifications the ledger missed from Apple's notification history: every `signedPayload` is
/// verified like a pushed one and goes through the same intake, so those already seen append nothing and a
/// late one lands at its own `occurred_at` (the fold orders by it) without overwriting newer facts.
public struct AppleBackfill: Sendable {
    let client: AppStoreServerAPIClient
    let reader: AppleNotificationReader
    let intake: EventIntake
    let logger: Logger

    public init(client: AppStoreServerAPIClient, reader: AppleNotificationReader, intake: EventIntake, logger: Logger) {
        self.client = client
        self.reader = reader
        self.intake = intake
        self.logger = logger
    }

    public struct Summary: Sendable, Equatable, CustomStringConvertible {
        /// Notifications in the history.
        public var seen = 0
        /// Recorded now and applied (events appended or already known).
        public var new = 0
        /// Recorded now, waiting for their subscriber.
        public var pending = 0
        /// Recorded now as notices (nothing to append).
        public var notices = 0
        /// Already in the inbox: nothing appended.
        public var duplicates = 0
        /// Refused (signature, mapping or validation); logged, the rest go on.
        public var failed = 0
        /// Pages read.
        public var pages = 0

        public init() {}

        public var description: String {
            "seen \(seen), new \(new), pending \(pending), notices \(notices), already known \(duplicates), failed \(failed)"
        }
    }

    /// Apple keeps 180 days of history; the page size is Apple's.
    public static let historyDays = 180

    /// Most pages of notification history one run reads (Apple's pages hold up to 20 notifications): an
    /// API answering `hasMore` forever ends the run with an error, as does a token it gave before.
    public static let maxPages = 10_000

    /// Reads the history between `since` and `until`, page by page, calling `progress` after each.
    public func run(
        since: Timestamp, until: Timestamp, now: Timestamp, progress: @Sendable (Summary) -> Void = { _ in }
    ) async throws -> Summary {
        var summary = Summary()
        var token: String?
        var cursor = PageCursor("notification history", maxPages: Self.maxPages)
        repeat {
            let page = try await client.notificationHistory(start: since, end: until, paginationToken: token)
            summary.pages += 1
            for signed in page.signedPayloads {
                summary.seen += 1
                let notification: AppleNotification
                do {
                    notification = try await reader.read(signedPayload: signed, now: now)
                } catch {
                    summary.failed += 1
                    logger.warning("backfill: a notification does not verify", metadata: ["error.message": "\(error)"])
                    continue
                }
                do {
                    switch try await intake.ingest(apple: notification, signedPayload: signed) {
                    case .applied: summary.new += 1
                    case .pending: summary.pending += 1
                    case .notice: summary.notices += 1
                    case .duplicate: summary.duplicates += 1
                    case .ignored, .received, .refused: break
                    }
                } catch let error as StoreMappingError {
                    summary.failed += 1
                    logger.warning(
                        "backfill: a notification cannot be mapped",
                        metadata: ["apple.notification_uuid": "\(notification.notificationUUID)", "error.message": "\(error)"])
                } catch let error as EventValidationError {
                    summary.failed += 1
                    logger.warning(
                        "backfill: a notification's events are invalid",
                        metadata: ["apple.notification_uuid": "\(notification.notificationUUID)", "error.message": "\(error)"])
                }
            }
            progress(summary)
            token = try cursor.next(hasMore: page.hasMore, token: page.paginationToken)
        } while token != nil
        return summary
    }
}
