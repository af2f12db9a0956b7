import Foundation
import LedgerCore
import Logging
import PostgresNIO
import Synchronization

extension EventStore {
    /// Runs `body` in one database transaction whose appends (`StoreTransaction.append`) are written inside
    /// it, under the append lock, the general way (keys looked up, the touched streams read). A store message
    /// is recorded, linked, appended and marked this way, all or nothing (`StoreIntake`).
    ///
    /// Group commit is not used for these appends: the group's transaction is its own, and the message's
    /// inbox row and links must commit with its events. Once committed, `AppendMemory` learns what the
    /// appends left (as after a general-path group) and the cache forgets the touched subscribers.
    public func transaction<T: Sendable>(_ body: @escaping @Sendable (StoreTransaction) async throws -> T) async throws -> T {
        let appends = TransactionAppends()
        let logger = self.logger
        do {
            let value = try await StoreError.mapping {
                try await database.transaction { connection in
                    try await body(StoreTransaction(connection: connection, logger: logger, appends: appends))
                }
            }
            appends.committed(memory: memory, onCommit: onCommit)
            return value
        } catch {
            appends.failed(memory: memory, onCommit: onCommit)
            throw error
        }
    }
}

/// The appends of one `EventStore.transaction`, for what follows its end.
final class TransactionAppends: Sendable {
    private let written = Mutex<[AppendWriter.Written]>([])
    private let touched = Mutex<Set<String>>([])

    func add(_ w: AppendWriter.Written, subscribers: Set<String>) {
        written.withLock { $0.append(w) }
        touched.withLock { $0.formUnion(subscribers) }
    }

    func committed(memory: AppendMemory, onCommit: EventStore.CommitObserver) {
        let all = written.withLock { $0 }
        guard !all.isEmpty else { return }
        var changes: [String: Int64] = [:]
        for w in all {
            memory.learn(end: w.end, streams: w.streams, oneTrip: false)
            for case .success(let result) in w.outcomes {
                for e in result.events { changes[e.subscriberID] = max(changes[e.subscriberID] ?? 0, e.position) }
            }
        }
        for s in touched.withLock({ $0 }) where changes[s] == nil { changes[s] = 0 }
        onCommit(changes)
    }

    /// Rolled back, or its outcome unknown: nothing believed about the log survives it.
    func failed(memory: AppendMemory, onCommit: EventStore.CommitObserver) {
        let subscribers = touched.withLock { $0 }
        guard !subscribers.isEmpty else { return }
        memory.forget()
        onCommit(Dictionary(uniqueKeysWithValues: subscribers.map { ($0, Int64(0)) }))
    }
}
