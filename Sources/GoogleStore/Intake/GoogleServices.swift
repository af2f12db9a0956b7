import Foundation
import LedgerCore
import LedgerStore
import Logging
import ServiceLifecycle

/// Resolves, in the background, the notifications that wait in the inbox (Google was unreachable, the
/// catalog lacked a product): none is dropped; each is retried with a growing delay.
public struct GoogleResolverService: Service {
    let play: GooglePlay
    let inbox: StoreInbox

    public init(play: GooglePlay, inbox: StoreInbox) {
        self.play = play
        self.inbox = inbox
    }

    public func run() async throws {
        // Woken by each notification recorded, and every poll interval for those waiting for a retry.
        // Failures are logged; the next wake retries (nothing in the inbox is dropped).
        let play = play
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: play.configuration.pollInterval)
                        play.wake()
                    }
                }
                for await _ in play.wakeups.stream {
                    if Task.isCancelled { break }
                    do {
                        try await play.resolveDue()
                    } catch is CancellationError {
                        break
                    } catch {
                        play.logger.warning("google inbox resolution failed; retrying at the next wake", metadata: ["error.message": "\(error)"])
                    }
                }
                group.cancelAll()
            }
        }
    }
}

/// Reconciles voided purchases periodically (`GooglePlay.reconcile`), in case a notification was missed.
public struct GoogleReconcileService: Service {
    let play: GooglePlay
    let interval: Duration

    public init(play: GooglePlay, interval: Duration) {
        self.play = play
        self.interval = interval
    }

    public func run() async throws {
        await runPeriodically(every: interval, logger: play.logger, what: "google reconciliation") {
            let (read, new) = try await play.reconcile(since: nil)
            play.logger.info(
                "google voided purchases reconciled", metadata: ["google.voided.read": "\(read)", "google.voided.new": "\(new)"])
        }
    }
}
