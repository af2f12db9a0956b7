import Foundation
import LedgerCore
import Logging
import ServiceLifecycle

/// `serve --reconcile-interval`: reconciles each configured store every interval (docs/switching.md
/// "Reconcile"). The store's lease in PostgreSQL lets one instance run it at a time; the others skip that
/// round. Each round compares the purchases whose latest paid period reaches `lookback` back or later.
public struct ReconcileService: Service {
    let reconciler: Reconciler
    let stores: [any StoreReconciliation]
    let interval: Duration
    let lookback: Duration
    let logger: Logger

    /// Purchases whose paid periods ended longer ago than this are not compared by the schedule (the CLI's
    /// `--since` reaches any).
    public static let defaultLookback: Duration = .seconds(90 * 86_400)

    public init(
        reconciler: Reconciler, stores: [any StoreReconciliation], interval: Duration, lookback: Duration = Self.defaultLookback, logger: Logger
    ) {
        self.reconciler = reconciler
        self.stores = stores
        self.interval = interval
        self.lookback = lookback
        self.logger = logger
    }

    public func run() async throws {
        logger.info(
            "reconciliation scheduled",
            metadata: ["reconcile.interval": "\(interval)", "reconcile.stores": "\(stores.map(\.store).joined(separator: ","))"])
        await runPeriodically(every: interval, logger: logger, what: "reconciliation") { try await runOnce() }
    }

    /// One round: every store in turn; a store another instance is reconciling is skipped.
    public func runOnce() async throws {
        let since = Timestamp(microseconds: reconciler.clock().microseconds - lookback.components.seconds * 1_000_000)
        for store in stores {
            do {
                _ = try await reconciler.run(store, since: since, trigger: .schedule)
            } catch let busy as ReconciliationStore.Busy {
                logger.debug("reconciliation skipped", metadata: ["reconcile.store": "\(store.store)", "reconcile.holder": "\(busy.holder)"])
            }
        }
    }
}
