import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// Where a read runs, and the ledger position its answer reflects (every event up to at least it).
public struct ReadRoute: Sendable {
    public let database: Database
    /// A lower bound of the source's committed position, observed before the read's own query.
    public let position: Int64
    let replica: ReadRouter.Replica?
    /// The read runs on a replica (not the primary).
    public var isReplica: Bool { replica != nil }
}

/// Chooses the database a read runs on: a replica when one has reached the position the read needs, else
/// the primary; and says which position the answer reflects.
///
/// Positions are gapless and commit in order, on the primary and, replayed in WAL order, on every standby,
/// so "the highest visible position" is an exact description of what a source holds, and a value seen once
/// stays a lower bound (replay only moves forward). The router keeps the last value seen per source, raised
/// by this server's own commits, by the change listener and by a monitor, so most reads need no extra
/// query; `pg_last_wal_replay_lsn()` is not used, because an LSN is not a ledger position.
///
/// A read that needs position `p` (`min_position`, or the last change this server heard of for the
/// subscriber) goes to a replica that has it, or waits up to `replicaWait` for one, then reads the primary.
/// A `p` the primary has not reached was never acknowledged: the answer comes from the primary at once,
/// and its lower position says so (docs/api.md).
public final class ReadRouter: Sendable {
    final class Replica: Sendable {
        let database: Database
        let name: String
        /// Highest position seen visible on it; -1 before the first look.
        let known = Atomic<Int64>(-1)
        private let state = Mutex(State())

        struct State {
            var downUntil: ContinuousClock.Instant?
        }

        init(database: Database, name: String) {
            self.database = database
            self.name = name
        }

        var isDown: Bool { state.withLock { s in s.downUntil.map { ContinuousClock.now < $0 } ?? false } }

        func markDown(for duration: Duration) { state.withLock { $0.downUntil = .now + duration } }

        func observe(_ position: Int64) {
            state.withLock { s in
                s.downUntil = nil
                if position > known.load(ordering: .relaxed) { known.store(position, ordering: .releasing) }
            }
        }
    }

    public let primary: Database
    let replicas: [Replica]
    /// How long a read waits for a replica to reach its position before reading the primary.
    public let replicaWait: Duration
    private let primaryKnown = Atomic<Int64>(-1)
    /// The primary's known position at each refresh of the last two seconds (oldest first).
    private let history = Mutex<[(at: ContinuousClock.Instant, position: Int64)]>([])
    private let next = Atomic<Int>(0)
    private let counts = Counts()

    public init(primary: Database, replicas: [(name: String, database: Database)] = [], replicaWait: Duration = .milliseconds(250)) {
        self.primary = primary
        self.replicas = replicas.map { Replica(database: $0.database, name: $0.name) }
        self.replicaWait = replicaWait
    }

    public var hasReplicas: Bool { !replicas.isEmpty }

    /// A position known committed and visible on the primary (an own commit, the change listener).
    public func observedPrimary(_ position: Int64) {
        var current = primaryKnown.load(ordering: .acquiring)
        while current < position {
            let (done, original) = primaryKnown.compareExchange(expected: current, desired: position, ordering: .acquiringAndReleasing)
            if done { return }
            current = original
        }
    }

    /// The lowest position every replica is known to have reached (`Int64.max` without replicas): changes
    /// up to it need no remembering for the entitlement cache.
    public var replicaFloor: Int64 {
        replicas.reduce(Int64.max) { min($0, $1.known.load(ordering: .acquiring)) }
    }

    /// The primary's last committed position, asked now.
    public func primaryHead() async throws -> Int64 {
        let head = try await Self.head(of: primary)
        observedPrimary(head)
        return head
    }

    /// Where a read that must reflect position `need` (0: any) runs. `primaryOnly` for reads that need the
    /// newest state (as-of audit reads).
    public func route(atLeast need: Int64, primaryOnly: Bool = false) async throws -> ReadRoute {
        guard !primaryOnly, let replica = pickReplica() else { return try await primaryRoute(atLeast: need) }
        let known = replica.known.load(ordering: .acquiring)
        if known >= need && known >= 0 {
            counts.replica.wrappingAdd(1, ordering: .relaxed)
            return ReadRoute(database: replica.database, position: known, replica: replica)
        }
        // A position the primary has not reached was never acknowledged: no replica will have it.
        if need > primaryKnown.load(ordering: .acquiring) {
            let head = try await primaryHead()
            if head < need { return try await primaryRoute(atLeast: need) }
        }
        if !isStalled(replica) {
            let deadline = ContinuousClock.now + replicaWait
            while true {
                let head: Int64
                do {
                    head = try await Self.head(of: replica.database)
                } catch {
                    replica.markDown(for: .seconds(2))
                    break
                }
                replica.observe(head)
                if head >= need {
                    counts.replica.wrappingAdd(1, ordering: .relaxed)
                    return ReadRoute(database: replica.database, position: head, replica: replica)
                }
                if ContinuousClock.now >= deadline { break }
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        counts.fallback.wrappingAdd(1, ordering: .relaxed)
        return try await primaryRoute(atLeast: need)
    }

    /// Runs `body` on the routed database; a replica that fails is set aside and the primary answers.
    public func read<T: Sendable>(
        atLeast need: Int64, primaryOnly: Bool = false, _ body: @Sendable (Database) async throws -> T
    ) async throws -> (value: T, position: Int64) {
        let route = try await route(atLeast: need, primaryOnly: primaryOnly)
        do {
            return (try await body(route.database), route.position)
        } catch  where route.isReplica && Self.isReplicaFailure(error) {
            route.replica?.markDown(for: .seconds(2))
            counts.fallback.wrappingAdd(1, ordering: .relaxed)
            let fallback = try await primaryRoute(atLeast: need)
            return (try await body(fallback.database), fallback.position)
        }
    }

    /// `read` for the reports of the rollups, which trail the log (`ReportRollupWorker`): on the primary the
    /// report applies what the worker has not followed yet before reading (`ReportStore.reading`); a replica's rollups hold the position
    /// `ReportRollupWorker.position` says, which the answer names, and a replica whose rollups lack `need` is
    /// passed over for the primary.
    public func readReports<T: Sendable>(
        atLeast need: Int64, _ body: @Sendable (Database) async throws -> T
    ) async throws -> (value: T, position: Int64) {
        let route = try await route(atLeast: need)
        if let replica = route.replica {
            do {
                let held = try await ReportRollupWorker.position(of: route.database)
                if held >= need {
                    return (try await body(route.database), min(route.position, held))
                }
            } catch  where Self.isReplicaFailure(error) {
                replica.markDown(for: .seconds(2))
            }
            counts.fallback.wrappingAdd(1, ordering: .relaxed)
            let primary = try await primaryRoute(atLeast: need)
            return (try await body(primary.database), primary.position)
        }
        return (try await body(route.database), route.position)
    }

    /// Reads on the primary, from replicas, and reads that waited for a replica in vain.
    public var statistics: (primary: Int, replica: Int, fallback: Int) {
        (counts.primary.load(ordering: .relaxed), counts.replica.load(ordering: .relaxed), counts.fallback.load(ordering: .relaxed))
    }

    /// Per replica: its name, the highest position seen on it, and whether it is set aside.
    public var replicaStates: [(name: String, position: Int64, down: Bool)] {
        replicas.map { ($0.name, $0.known.load(ordering: .acquiring), $0.isDown) }
    }

    /// Looks at every source once: refreshes the positions seen (and revives replicas that answer).
    public func refresh() async {
        for replica in replicas {
            do {
                replica.observe(try await Self.head(of: replica.database))
            } catch {
                replica.markDown(for: .seconds(2))
            }
        }
        _ = try? await primaryHead()
        let now = ContinuousClock.now
        let position = primaryKnown.load(ordering: .acquiring)
        history.withLock { h in
            h.append((now, position))
            h.removeAll { now - $0.at > .seconds(2) }
        }
    }

    /// A replica more than a second behind (replay paused, a broken stream, a long conflict): it has not
    /// reached what the primary had a second ago, so a short wait for it is futile.
    private func isStalled(_ replica: Replica) -> Bool {
        let aSecondAgo = ContinuousClock.now - .seconds(1)
        guard let then = history.withLock({ h in h.last(where: { $0.at <= aSecondAgo }) }) else { return false }
        return replica.known.load(ordering: .acquiring) < then.position
    }

    private func primaryRoute(atLeast need: Int64) async throws -> ReadRoute {
        counts.primary.wrappingAdd(1, ordering: .relaxed)
        let known = primaryKnown.load(ordering: .acquiring)
        if known >= need && known >= 0 { return ReadRoute(database: primary, position: known, replica: nil) }
        return ReadRoute(database: primary, position: try await primaryHead(), replica: nil)
    }

    private func pickReplica() -> Replica? {
        guard !replicas.isEmpty else { return nil }
        let start = next.wrappingAdd(1, ordering: .relaxed).oldValue
        for i in 0..<replicas.count {
            let replica = replicas[(start &+ i) % replicas.count]
            if !replica.isDown { return replica }
        }
        return nil
    }

    /// The replica is gone, or cancelled the query for a conflict with recovery (SQLSTATE 40001 on a hot
    /// standby, when replay must remove rows a long read still needs): the primary answers instead.
    static func isReplicaFailure(_ error: any Error) -> Bool {
        if StoreError.classify(error) is StoreError { return true }
        return (error as? PSQLError)?.sqlState == "40001"
    }

    /// The highest visible position: one backward step of the unique index on `position`.
    static func head(of database: Database) async throws -> Int64 {
        let logger = database.logger
        return try await database.withConnection { connection in
            try await connection.query("SELECT coalesce(max(position), 0)::int8 FROM events", logger: logger)
                .collect().first?.decode(Int64.self) ?? 0
        }
    }

    private final class Counts: Sendable {
        let primary = Atomic<Int>(0)
        let replica = Atomic<Int>(0)
        let fallback = Atomic<Int>(0)
    }
}

/// Keeps the read router's view of every source fresh (and, through `onFloor`, lets the entitlement cache
/// forget changes every replica has passed).
public struct ReadRouterMonitor: Service {
    let router: ReadRouter
    let interval: Duration
    let onFloor: @Sendable (Int64) -> Void

    public init(router: ReadRouter, interval: Duration = .milliseconds(100), onFloor: @escaping @Sendable (Int64) -> Void = { _ in }) {
        self.router = router
        self.interval = interval
        self.onFloor = onFloor
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            var told: Int64 = -1
            while !Task.isCancelled {
                await router.refresh()
                let floor = router.replicaFloor
                if floor > told && floor < .max {
                    onFloor(floor)
                    told = floor
                }
                try? await Task.sleep(for: interval)
            }
        }
    }
}
