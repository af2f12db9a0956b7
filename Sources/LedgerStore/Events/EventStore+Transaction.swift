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
    /// inbox row and links must commit with its events. The append lock is taken as late as it can be and
    /// costs two round trips (`AppendWriter.appendInTransaction`); a key stored meanwhile by another writer,
    /// or a deadlock with one, runs the message's transaction again (`StoreIntake`). Once committed,
    /// `AppendMemory` learns what the appends left (as after a general-path group) and the cache forgets
    /// the touched subscribers.
    public func transaction<T: Sendable>(_ body: @escaping @Sendable (StoreTransaction) async throws -> T) async throws -> T {
        try await transaction(shared: nil, body)
    }

    /// `transaction`, led for a shared transaction (`shared`) whose members run on the same connection.
    private func transaction<T: Sendable>(
        shared: SharedTransaction?, _ body: @escaping @Sendable (StoreTransaction) async throws -> T
    ) async throws -> T {
        let appends = TransactionAppends(clock: clock, shared: shared)
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
            if let error = error as? PSQLError, error.sqlState == "40P01" {
                // Two messages' transactions waited for each other (an inbox row and the append lock, taken
                // in opposite orders); PostgreSQL ended this one.
                throw RunAgain(reason: "a deadlock with another store message's transaction")
            }
            throw error
        }
    }

    /// Runs `body` in a transaction shared with the store messages that arrive meanwhile (`SharedTransaction`):
    /// one commit, and one lock turn for their appends, for them all. Throws `SharedTransaction.Failed` when the
    /// shared transaction was rolled back, whoever failed: the caller then runs `body` alone (`transaction`).
    func sharedTransaction<T: Sendable>(_ body: @escaping @Sendable (StoreTransaction) async throws -> T) async throws -> T {
        let (shared, leads) = sharing.join()
        let member = SharedTransaction.Member()
        guard leads else {
            let tx = try await shared.transaction(for: member)
            let value: Result<T, any Error>
            do {
                value = .success(try await body(tx))
            } catch {
                value = .failure(error)
            }
            await shared.finish(member, failure: value.failure, appends: tx.appends!, on: tx.connection, logger: logger)
            try await shared.committed()
            return try value.get()
        }
        do {
            let value = try await transaction(shared: shared) { base in
                var tx = base
                tx.member = member
                shared.open(base)
                let mine: Result<T, any Error>
                do {
                    mine = .success(try await body(tx))
                } catch {
                    mine = .failure(error)
                }
                await shared.finish(member, failure: mine.failure, appends: tx.appends!, on: tx.connection, logger: tx.logger)
                // No member's statement may outlive the transaction.
                await shared.everyoneFinished()
                if let failure = shared.failure { throw SharedTransaction.Failed(cause: failure) }
                return try mine.get()
            }
            sharing.ended(shared, committed: true)
            shared.settle(.success(()))
            return value
        } catch {
            sharing.ended(shared, committed: false)
            shared.settle(.failure(error))
            throw (error as? SharedTransaction.Failed) ?? SharedTransaction.Failed(cause: error)
        }
    }

    /// The transaction was rolled back for a reason a second run does not meet (a key stored meanwhile, a
    /// deadlock): its caller runs it again.
    struct RunAgain: Error, CustomStringConvertible {
        var reason: String
        var description: String { "the transaction must run again: \(reason)" }
    }
}

/// The appends of one `EventStore.transaction`, for what follows its end.
final class TransactionAppends: Sendable {
    private let written = Mutex<[AppendWriter.Written]>([])
    private let touched = Mutex<Set<String>>([])
    /// `recorded_at` of the rows: this server's clock, never before the log's last event's.
    let clock: WallClock
    /// The shared transaction these appends belong to, if it is one (`SharedTransaction`).
    let shared: SharedTransaction?

    init(clock: WallClock, shared: SharedTransaction? = nil) {
        self.clock = clock
        self.shared = shared
    }

    /// A store append, written inside the transaction (`AppendWriter.appendInTransaction`); in a shared
    /// transaction, with the other members' appends when it is among the first (`SharedTransaction.append`).
    func append(_ job: AppendJob, of member: SharedTransaction.Member?, on connection: PostgresConnection, logger: Logger)
        async throws -> AppendResult
    {
        if let shared, let member, let outcome = try await shared.append(job, of: member, appends: self, on: connection, logger: logger) {
            return try outcome.get()
        }
        return try await write([job], on: connection, logger: logger)[0].get()
    }

    /// Writes jobs in one lock turn (`AppendWriter.appendInTransaction`), kept for what follows the commit.
    func write(_ jobs: [AppendJob], on connection: PostgresConnection, logger: Logger) async throws -> [Result<AppendResult, StoreError>] {
        do {
            let done = try await AppendWriter(logger: logger).appendInTransaction(jobs, now: clock.now(), on: connection)
            if case .written(let written) = done {
                add(written, subscribers: Set(jobs.flatMap { $0.events.map(\.subscriberID) }))
            }
            return done.outcomes
        } catch let error as AppendWriter.StreamTooLarge {
            throw error.validationError
        } catch let error as PSQLError where error.isUniqueViolation(of: "events_idempotency_key") {
            // Stored by another writer since the keys were looked up (before the lock): the transaction is
            // aborted; run it again, which finds the key stored.
            throw EventStore.RunAgain(reason: "an idempotency key was stored meanwhile")
        }
    }

    private func add(_ w: AppendWriter.Written, subscribers: Set<String>) {
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

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
