import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// Keeps a `LedgerCache` honest about changes made by other processes: LISTENs on `subledger_changes`
/// (schema 0007), and on each notification forgets the subscribers whose events came after the last
/// position it saw; a rebuild's `reset` forgets everything.
///
/// The cache is enabled only while the LISTEN is in place, and disabled (every read goes to PostgreSQL)
/// from the moment the connection fails until a new LISTEN has started, so a missed notification can never
/// leave a stale ledger in memory. A heartbeat query notices a dead connection that would otherwise look
/// quiet.
public struct ProjectionChanges: Service {
    public static let channel = "subledger_changes"
    public static let resetPayload = "reset"
    /// More changed events than this in one notification: forgetting everything is cheaper than reading them.
    static let resetThreshold: Int64 = 10_000

    let database: Database
    let cache: LedgerCache
    let heartbeat: Duration
    let retryDelay: Duration
    /// Told every position the listener has seen committed on the primary (the read router's lower bound).
    let onPosition: @Sendable (Int64) -> Void
    var logger: Logger { database.logger }

    public init(
        database: Database, cache: LedgerCache, heartbeat: Duration = .seconds(5), retryDelay: Duration = .seconds(1),
        onPosition: @escaping @Sendable (Int64) -> Void = { _ in }
    ) {
        self.database = database
        self.cache = cache
        self.heartbeat = heartbeat
        self.retryDelay = retryDelay
        self.onPosition = onPosition
    }

    public init(
        client: PostgresClient, cache: LedgerCache, logger: Logger, heartbeat: Duration = .seconds(5),
        retryDelay: Duration = .seconds(1)
    ) {
        self.init(database: Database(client: client, logger: logger), cache: cache, heartbeat: heartbeat, retryDelay: retryDelay)
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            // One warning per outage (the listener was in place), not one per failed retry.
            var first = true
            while !Task.isCancelled {
                do {
                    try await listenOnce()
                } catch  where Task.isCancelled {
                } catch {
                    logger.log(
                        level: cache.isEnabled || first ? .warning : .debug,
                        "entitlement cache disabled: change notifications interrupted",
                        metadata: ["cache.error": "\(String(reflecting: error))"])
                }
                first = false
                cache.disable()
                try? await Task.sleep(for: retryDelay)
            }
        }
        cache.disable()
    }

    private func listenOnce() async throws {
        try await database.withConnection { connection in
            try await connection.listen(on: Self.channel) { notifications in
                let start = try await lastPosition(connection)
                cache.enable(heard: start)
                onPosition(start)
                logger.debug("entitlement cache enabled", metadata: ["cache.position": "\(start)"])
                // Notifications that arrive while a catch-up runs collapse into one more catch-up.
                let (signals, signal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
                let resetAsked = ResetFlag()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        defer { signal.finish() }
                        for try await notification in notifications {
                            if notification.payload == Self.resetPayload { resetAsked.set() }
                            signal.yield()
                        }
                        throw Interrupted()
                    }
                    group.addTask {
                        while true {
                            try await Task.sleep(for: heartbeat)
                            try await connection.query("SELECT 1", logger: logger)
                        }
                    }
                    group.addTask {
                        var seen = start
                        for await _ in signals {
                            seen = try await catchUp(after: seen, reset: resetAsked.take(), on: connection)
                            cache.advance(heard: seen)
                            onPosition(seen)
                        }
                    }
                    try await group.next()
                    group.cancelAll()
                }
            }
        }
    }

    /// Forgets the subscribers with events after `seen` (or everything), and returns the new last position.
    private func catchUp(after seen: Int64, reset: Bool, on connection: PostgresConnection) async throws -> Int64 {
        if !reset {
            var moved: [String: Int64] = [:]
            var last = seen
            let rows = try await connection.execute(Moved(after: seen, limit: Self.resetThreshold + 1), logger: logger)
            for try await (subscriber, position) in rows {
                moved[subscriber] = position
                last = position
            }
            if last - seen <= Self.resetThreshold {
                cache.invalidate(changes: moved.lazy.map { ($0.key, $0.value) })
                return last
            }
        }
        let last = try await lastPosition(connection)
        cache.reset(changedUpTo: last)
        return last
    }

    /// The events after a position: read after every append's notification, so prepared once per
    /// connection instead of parsed every time.
    struct Moved: PostgresPreparedStatement {
        static let name = "subledger_changes_moved"
        static let sql = "SELECT subscriber_id, position FROM events WHERE position > $1 ORDER BY position LIMIT $2"
        typealias Row = (String, Int64)

        var after: Int64
        var limit: Int64

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(after)
            bindings.append(limit)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    private final class ResetFlag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .releasing) }
        func take() -> Bool { value.exchange(false, ordering: .acquiringAndReleasing) }
    }

    /// The notification stream ended: the connection is gone.
    struct Interrupted: Error {}

    private func lastPosition(_ connection: PostgresConnection) async throws -> Int64 {
        try await connection.query("SELECT coalesce(max(position), 0)::int8 FROM events", logger: logger)
            .collect().first?.decode(Int64.self) ?? 0
    }
}
