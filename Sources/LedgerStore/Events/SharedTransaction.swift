import LedgerCore
import Logging
import PostgresNIO
import Synchronization

/// Store messages that arrive while another's transaction is open share that transaction: their statements go
/// through its one connection, their appends wait for one another and are written together, and one commit
/// ends them all. This is group commit for store messages, whose inbox row and links must commit with their
/// events, so they cannot join the plain appends' groups (`GroupCommitter`), and which would otherwise each
/// hold the append lock through an append and a commit of their own (docs/data-flow.md, "Store messages
/// together").
///
/// The first message (the leader) opens the transaction; messages that arrive before its appends are written
/// join it (up to `maxMembers`). Each member runs its own work on the shared connection until its first append,
/// where it waits; once no member is still on its way to an append, the waiting appends are written in one lock
/// turn (`TransactionAppends.write`), and later appends, the lock being held, are written at once. The leader
/// commits when every member has finished. Any member's failure fails the whole transaction: it is rolled back
/// and every member runs again alone (`EventStore.transaction`), so a failure concerns only its own message, as
/// before.
final class SharedTransaction: Sendable {
    /// One member's place in the transaction.
    final class Member: Sendable {
        fileprivate let reachedAppend = Mutex(false)
    }

    /// A value filled once and awaited by any number of members (the open transaction, its outcome, an append's).
    fileprivate final class Slot<Value: Sendable>: Sendable {
        private let state = Mutex<(value: Result<Value, any Error>?, waiters: [CheckedContinuation<Value, any Error>])>((nil, []))

        func fill(_ value: Result<Value, any Error>) {
            let waiters = state.withLock { s -> [CheckedContinuation<Value, any Error>] in
                guard s.value == nil else { return [] }
                s.value = value
                defer { s.waiters = [] }
                return s.waiters
            }
            for w in waiters { w.resume(with: value) }
        }

        func value() async throws -> Value {
            try await withCheckedThrowingContinuation { c in
                let ready = state.withLock { s -> Result<Value, any Error>? in
                    if s.value == nil { s.waiters.append(c) }
                    return s.value
                }
                if let ready { c.resume(with: ready) }
            }
        }
    }

    private struct Waiting {
        var job: AppendJob
        var slot: Slot<Result<AppendResult, StoreError>>
    }

    private struct State {
        var members = 1
        var finished = 0
        /// Members that have not finished nor reached an append: the waiting appends are written once none is left.
        var running = 1
        var waiting: [Waiting] = []
        /// The waiting appends were written (or are being written): the lock is the transaction's, later
        /// appends are written at once, and nobody joins any more.
        var locked = false
        var closed = false
        var failure: (any Error)?
        var everyoneFinished: CheckedContinuation<Void, Never>?
    }

    let maxMembers: Int
    private let state = Mutex(State())
    /// Look-ups waiting while another runs on the connection (`lookup`): they go together in the next statement.
    private let lookups = Mutex<(running: Bool, queue: [LookupWaiter], asked: Int, statements: Int)>((false, [], 0, 0))

    /// Look-ups asked by its members, and the statements that answered them.
    var lookupCounts: (asked: Int, statements: Int) { lookups.withLock { ($0.asked, $0.statements) } }
    private let opened = Slot<StoreTransaction>()
    private let outcome = Slot<Void>()

    init(maxMembers: Int) {
        self.maxMembers = maxMembers
    }

    /// The member joins, unless the transaction took the lock, is full, or failed.
    func join() -> Bool {
        state.withLock { s in
            guard !s.closed, !s.locked, s.failure == nil, s.members < maxMembers else { return false }
            s.members += 1
            s.running += 1
            return true
        }
    }

    /// The leader opened the transaction: the members waiting for it get it.
    func open(_ tx: StoreTransaction) { opened.fill(.success(tx)) }

    /// The shared transaction, once open, for a member that joined.
    func transaction(for member: Member) async throws -> StoreTransaction {
        var tx = try await opened.value()
        tx.member = member
        return tx
    }

    /// How many messages it holds.
    var members: Int { state.withLock { $0.members } }

    /// Whether the transaction failed (it will be rolled back).
    var failure: (any Error)? { state.withLock { $0.failure } }

    /// An append of `member`: nil when it is written at once (the lock is held); else its outcome once the
    /// waiting appends are written together. Throws `Failed` when the transaction failed.
    func append(
        _ job: AppendJob, of member: Member, appends: TransactionAppends, on connection: PostgresConnection, logger: Logger
    ) async throws -> Result<AppendResult, StoreError>? {
        let first = member.reachedAppend.withLock { r in
            defer { r = true }
            return !r
        }
        let slot = Slot<Result<AppendResult, StoreError>>()
        let decision = try state.withLock { s -> Decision in
            if let failure = s.failure { throw Failed(cause: failure) }
            if s.locked { return .direct }
            if first { s.running -= 1 }
            s.waiting.append(Waiting(job: job, slot: slot))
            return Self.takeWaiting(&s)
        }
        if case .direct = decision { return nil }
        await perform(decision, appends: appends, on: connection, logger: logger)
        return try await slot.value()
    }

    /// A member's look-up (`StoreTransaction.lookup`). The connection runs one statement at a time: a look-up
    /// asked while another runs waits, and every look-up waiting then goes in the next statement together
    /// (natural batching, as group commit does: none waits when the connection is free).
    func lookup(_ request: StoreTransaction.LookupRequest, on tx: StoreTransaction) async throws -> StoreTransaction.Lookup {
        let role: LookupRole = try await withCheckedThrowingContinuation { c in
            let leads = lookups.withLock { l -> Bool in
                l.asked += 1
                if l.running {
                    l.queue.append(LookupWaiter(request: request, continuation: c))
                    return false
                }
                l.running = true
                return true
            }
            if leads { c.resume(returning: .run([])) }
        }
        let others: [LookupWaiter]
        switch role {
        case .done(let lookup): return lookup
        case .run(let waiting): others = waiting
        }
        lookups.withLock { $0.statements += 1 }
        let result: Result<[StoreTransaction.Lookup], any Error>
        do {
            result = .success(try await StoreTransaction.lookups([request] + others.map(\.request), on: tx.connection, logger: tx.logger))
        } catch {
            result = .failure(error)
        }
        // Whoever waited meanwhile runs next, with the others that waited.
        let next = lookups.withLock { l -> [LookupWaiter] in
            defer { l.queue = [] }
            if l.queue.isEmpty { l.running = false }
            return l.queue
        }
        if let first = next.first { first.continuation.resume(returning: .run(Array(next.dropFirst()))) }
        switch result {
        case .success(let all):
            for (w, lookup) in zip(others, all.dropFirst()) { w.continuation.resume(returning: .done(lookup)) }
            return all[0]
        case .failure(let error):
            for w in others { w.continuation.resume(throwing: error) }
            throw error
        }
    }

    fileprivate struct LookupWaiter: Sendable {
        var request: StoreTransaction.LookupRequest
        var continuation: CheckedContinuation<LookupRole, any Error>
    }

    /// What a waiting look-up is told: its answer, or to run the next statement (for itself and these).
    fileprivate enum LookupRole: Sendable {
        case done(StoreTransaction.Lookup)
        case run([LookupWaiter])
    }

    /// A member's work ended (`failure`: how, when it threw); the waiting appends may now be written.
    func finish(_ member: Member, failure: (any Error)?, appends: TransactionAppends, on connection: PostgresConnection, logger: Logger)
        async
    {
        let reached = member.reachedAppend.withLock { $0 }
        let (decision, everyone) = state.withLock { s -> (Decision, CheckedContinuation<Void, Never>?) in
            s.finished += 1
            if !reached { s.running -= 1 }
            if let failure, s.failure == nil { s.failure = failure }
            let decision = Self.takeWaiting(&s)
            guard s.finished == s.members else { return (decision, nil) }
            defer { s.everyoneFinished = nil }
            return (decision, s.everyoneFinished)
        }
        await perform(decision, appends: appends, on: connection, logger: logger)
        everyone?.resume()
    }

    /// Closes the transaction to newcomers and waits until every member has finished (the leader, before its
    /// commit or rollback: no member's statement may outlive the transaction).
    func everyoneFinished() async {
        await withCheckedContinuation { c in
            let done = state.withLock { s -> Bool in
                s.closed = true
                if s.finished == s.members { return true }
                s.everyoneFinished = c
                return false
            }
            if done { c.resume() }
        }
    }

    /// The leader's commit or rollback: the members waiting for it learn it (and a member still waiting for
    /// the transaction to open, when it never opened, that it failed).
    func settle(_ result: Result<Void, any Error>) {
        opened.fill(.failure(Failed(cause: StoreError.unavailable("the shared transaction ended before it opened"))))
        outcome.fill(result.mapError { Failed(cause: $0) })
    }

    /// A member waits for the leader's commit: throws `Failed` when the transaction was rolled back.
    func committed() async throws { try await outcome.value() }

    /// The shared transaction was rolled back (`cause`: the first failure): each member runs again alone.
    struct Failed: Error, CustomStringConvertible {
        var cause: any Error
        var description: String { "the shared store transaction was rolled back: \(cause)" }
    }

    private enum Decision {
        case wait
        case direct
        /// The waiting appends, taken for one lock turn (the caller's).
        case write([Waiting])
        /// The transaction failed: the waiting appends fail with it.
        case fail([Waiting], any Error)
    }

    /// The waiting appends: failed at once with the transaction, else written once no member is still on its
    /// way to one.
    private static func takeWaiting(_ s: inout State) -> Decision {
        guard !s.waiting.isEmpty else { return .wait }
        let waiting = s.waiting
        if let failure = s.failure {
            s.waiting = []
            return .fail(waiting, failure)
        }
        guard s.running == 0 else { return .wait }
        s.waiting = []
        s.locked = true
        s.closed = true
        return .write(waiting)
    }

    private func perform(_ decision: Decision, appends: TransactionAppends, on connection: PostgresConnection, logger: Logger) async {
        switch decision {
        case .wait, .direct: break
        case .write(let waiting): await write(waiting, appends: appends, on: connection, logger: logger)
        case .fail(let waiting, let error): for w in waiting { w.slot.fill(.failure(Failed(cause: error))) }
        }
    }

    /// Writes the waiting appends in one lock turn and gives each its outcome.
    private func write(_ waiting: [Waiting], appends: TransactionAppends, on connection: PostgresConnection, logger: Logger) async {
        do {
            let outcomes = try await appends.write(waiting.map(\.job), on: connection, logger: logger)
            for (w, outcome) in zip(waiting, outcomes) { w.slot.fill(.success(outcome)) }
        } catch {
            state.withLock { s in if s.failure == nil { s.failure = error } }
            for w in waiting { w.slot.fill(.failure(Failed(cause: error))) }
        }
    }
}

/// Hands arriving store messages the shared transaction they may join, or a new one to lead.
final class SharedTransactions: Sendable {
    let maxMembers: Int
    private let forming = Mutex<SharedTransaction?>(nil)
    private let counts = Mutex((transactions: 0, messages: 0, rolledBack: 0, lookups: 0, lookupStatements: 0))

    /// Shared transactions ended, the messages they held, how many were rolled back, and their members'
    /// look-ups with the statements that answered them (tests, metrics).
    var tally: (transactions: Int, messages: Int, rolledBack: Int, lookups: Int, lookupStatements: Int) { counts.withLock { $0 } }

    /// A shared transaction ended (its leader committed it or rolled it back).
    func ended(_ shared: SharedTransaction, committed: Bool) {
        let members = shared.members
        let lookups = shared.lookupCounts
        counts.withLock { c in
            c.transactions += 1
            c.messages += members
            c.lookups += lookups.asked
            c.lookupStatements += lookups.statements
            if !committed { c.rolledBack += 1 }
        }
    }

    /// Six members at most: a shared transaction's statements go one after another through its one connection,
    /// so a long one keeps messages waiting that a second transaction, on another connection, would have
    /// served meanwhile (their appends still share lock turns). Measured against 2, 4, 5, 8 and 32 at 8 and 32
    /// clients (docs/data-flow.md, "Store messages together").
    init(maxMembers: Int = 6) {
        self.maxMembers = maxMembers
    }

    /// The transaction to join, and whether the caller leads it (opens and commits it).
    func join() -> (SharedTransaction, leads: Bool) {
        forming.withLock { f in
            if let open = f, open.join() { return (open, false) }
            let new = SharedTransaction(maxMembers: maxMembers)
            f = new
            return (new, true)
        }
    }
}
