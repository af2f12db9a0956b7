import LedgerStore
import Logging
import Metrics
import ServiceLifecycle

/// `subledger_store_inbox_messages{store, status}`: how many store messages wait, per store and waiting status
/// (received, pending, failed), read from PostgreSQL every `interval` by every instance (the inbox is shared,
/// so each reports the same figures). Applied, notice and ignored messages only accumulate and are not counted.
struct StoreInboxGauges: Service {
    let inbox: StoreInbox
    let logger: Logger
    var interval: Duration = .seconds(15)

    static let label = "subledger_store_inbox_messages"

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await refresh()
                } catch is CancellationError {
                    return
                } catch {
                    logger.debug("store inbox gauges not refreshed", metadata: ["error.detail": "\(StoreError.classify(error))"])
                }
                try await Task.sleep(for: interval)
            }
        }
    }

    /// One refresh: every store and waiting status, zeros included (a gauge that vanished would read as no data).
    func refresh() async throws {
        Self.report(try await inbox.waitingCounts())
    }

    static func report(_ counts: [String: [StoreInbox.Status: Int]]) {
        for store in StoreInbox.stores {
            for status in StoreInbox.waiting {
                Gauge(label: label, dimensions: [("store", store), ("status", status.rawValue)]).record(Double(counts[store]?[status] ?? 0))
            }
        }
    }
}
