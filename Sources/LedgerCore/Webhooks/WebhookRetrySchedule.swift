import Foundation

/// When a failed delivery is tried again: exponential steps with jitter, the last step repeating, until the
/// endpoint has failed for `giveUpAfter`; then it is paused (`failing`) with its cursor kept.
public struct WebhookRetrySchedule: Sendable, Hashable {
    /// 1 s → 2 s → 5 s → 10 s → 20 s → 1 min → 5 min → 30 min → 2 h → 5 h → 10 h, then every 10 h, for up to
    /// three days. Dense at first: a failure holds only its own subscriber's messages, and most failures of a
    /// receiver that is up (a deploy, a timeout) pass within seconds; an endpoint that keeps failing is
    /// probed one message at a time (docs/webhooks.md), so the early retries do not hammer a receiver that is down.
    public static let standard = WebhookRetrySchedule(
        delays: [
            .seconds(1), .seconds(2), .seconds(5), .seconds(10), .seconds(20), .seconds(60), .seconds(300), .seconds(1800),
            .seconds(7200), .seconds(18_000), .seconds(36_000),
        ],
        giveUpAfter: .seconds(3 * 86_400))

    /// `standard`'s delays as `--webhook-retry-schedule` spells them.
    public static let standardText = "1s,2s,5s,10s,20s,1m,5m,30m,2h,5h,10h"

    /// Delay after the first failure, the second, …; the last repeats.
    public var delays: [Duration]
    /// How long an endpoint may keep failing (from its first failure) before it is paused.
    public var giveUpAfter: Duration
    /// Each delay is spread by up to ± this fraction, so endpoints that failed together do not retry together.
    public var jitter: Double

    public init(delays: [Duration], giveUpAfter: Duration, jitter: Double = 0.2) {
        precondition(!delays.isEmpty, "a retry schedule needs at least one delay")
        self.delays = delays
        self.giveUpAfter = giveUpAfter
        self.jitter = jitter
    }

    /// The wait after `failures` failed attempts (1 for the first), for a `random` draw in 0..<1.
    public func delay(afterFailures failures: Int, random: Double) -> Duration {
        let base = delays[min(max(failures, 1), delays.count) - 1]
        let factor = 1 + jitter * (2 * random - 1)
        let ms = Double(base.components.seconds) * 1000 + Double(base.components.attoseconds) / 1e15
        return .milliseconds(Int64((ms * factor).rounded()))
    }

    /// Parses `5s,5m,30m,2h` (units ms, s, m, h, d).
    public static func durations(_ text: String) -> [Duration]? {
        let parts = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard !parts.isEmpty else { return nil }
        var out: [Duration] = []
        for part in parts {
            guard let d = duration(part), d > .zero else { return nil }
            out.append(d)
        }
        return out
    }

    /// `500ms`, `5s`, `2m`, `1h`, `3d`.
    public static func duration(_ text: String) -> Duration? {
        let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        for (suffix, ms) in units where text.hasSuffix(suffix) {
            guard let n = Int64(text.dropLast(suffix.count)), n >= 0, n <= 365 * 86_400_000 / ms else { return nil }
            return .milliseconds(n * ms)
        }
        return nil
    }
}
