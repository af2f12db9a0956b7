import Foundation
import LedgerCore

/// The wall clock the request and append paths read ("now" for `recorded_at`, entitlement and report reads),
/// injected so that a test can set the time, and so that LedgerCore stays free of clocks.
public struct WallClock: Sendable {
    public var now: @Sendable () -> Timestamp

    public init(now: @escaping @Sendable () -> Timestamp) {
        self.now = now
    }

    /// The system's clock, to the microsecond (rounded down).
    public static let system = WallClock {
        Timestamp(microseconds: Int64((Date().timeIntervalSince1970 * 1_000_000).rounded(.down)))
    }

    /// Always `t`.
    public static func fixed(_ t: Timestamp) -> WallClock {
        WallClock { t }
    }
}
