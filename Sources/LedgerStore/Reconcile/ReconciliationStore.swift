import Foundation
import LedgerCore
import PostgresNIO

/// The record of reconciliation runs (schema/0028): runs, their differences, and the lease that lets one
/// instance at a time reconcile a store.
public struct ReconciliationStore: Sendable {
    let database: Database

    public init(database: Database) {
        self.database = database
    }

    /// The stores a run may reconcile.
    public static let stores = ["apple", "google", "stripe"]

    public enum Status: String, Sendable, CaseIterable {
        case running, succeeded, failed
    }

    public enum Trigger: String, Sendable {
        case cli, schedule
    }

    /// A run as recorded.
    public struct Run: Sendable, Hashable {
        public var id: UUID
        public var seq: Int64
        public var store: String
        public var trigger: String
        public var instance: String
        public var since: Timestamp?
        public var voidedSince: Timestamp?
        public var status: Status
        public var error: String?
        public var startedAt: Timestamp
        public var finishedAt: Timestamp?
        public var purchases: Int
        public var differences: Int
        public var repaired: Int
        public var unrepaired: Int
        public var eventsAppended: Int
    }

    /// One difference a run found, and what became of it.
    public struct Difference: Sendable, Hashable {
        public var ordinal: Int
        public var subscriberID: String
        public var purchaseID: String
        public var field: String
        public var ledgerValue: String?
        public var storeValue: String?
        public var repaired: Bool
        public var eventIDs: [UUID]
        public var reason: String?

        public init(
            ordinal: Int = 0, subscriberID: String, purchaseID: String, field: String, ledgerValue: String?, storeValue: String?,
            repaired: Bool, eventIDs: [UUID], reason: String?
        ) {
            self.ordinal = ordinal
            self.subscriberID = subscriberID
            self.purchaseID = purchaseID
            self.field = field
            self.ledgerValue = ledgerValue
            self.storeValue = storeValue
            self.repaired = repaired
            self.eventIDs = eventIDs
            self.reason = reason
        }
    }

    /// A purchase the ledger knows from a store: its subscriber, its id, and the store account it was
    /// recorded with (Google's purchase token, and its package).
    public struct KnownPurchase: Sendable, Hashable {
        public var subscriberID: String
        public var purchaseID: String
        public var account: String?
        public var package: String?

        public init(subscriberID: String, purchaseID: String, account: String? = nil, package: String? = nil) {
            self.subscriberID = subscriberID
            self.purchaseID = purchaseID
            self.account = account
            self.package = package
        }
    }

    // MARK: purchases

    /// Every purchase of `store` in `environment` with a transaction, or a paid period, reaching `since` or
    /// later; ordered by subscriber and purchase. One scan of the store's transactions.
    public func purchases(store: String, environment: LedgerEnvironment, since: Timestamp?) async throws -> [KnownPurchase] {
        let logger = database.logger
        let floor = since ?? Timestamp(microseconds: 0)
        let env = environment.rawValue
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                SELECT subscriber_id, coalesce(data->>'original_transaction_id', data->>'transaction_id') AS purchase,
                       max(metadata->>'purchase_token'), max(metadata->>'package_name')
                FROM events
                WHERE source = \(store) AND type IN ('purchase', 'renewal') AND environment = \(env)
                  AND coalesce(data->>'original_transaction_id', data->>'transaction_id') IS NOT NULL
                GROUP BY 1, 2
                HAVING max(greatest(occurred_at, (data->>'period_end')::timestamptz)) >= \(floor)
                ORDER BY 1, 2
                """, logger: logger)
            var out: [KnownPurchase] = []
            for try await (subscriber, purchase, account, package) in rows.decode((String, String, String?, String?).self) {
                out.append(KnownPurchase(subscriberID: subscriber, purchaseID: purchase, account: account, package: package))
            }
            return out
        }
    }

    // MARK: leases

    /// Who holds a store's lease now, when it is not `holder`.
    public struct Busy: Error, CustomStringConvertible, Sendable {
        public var store: String
        public var holder: String
        public var until: Timestamp
        public var description: String {
            "another reconciliation of \(store) is running (instance \(holder), lease until \(until.rfc3339)); try again later"
        }
    }

    /// Takes (or renews) the store's lease for `duration`; `Busy` when another holder's lease has not expired.
    public func acquire(store: String, holder: String, runID: UUID, duration: Duration) async throws {
        let logger = database.logger
        let seconds = Double(duration.components.seconds)
        let busy: Busy? = try await database.withConnection { c in
            let rows = try await c.query(
                """
                INSERT INTO reconciliation_leases (store, holder, run_id, expires_at)
                VALUES (\(store), \(holder), \(runID), clock_timestamp() + \(seconds) * interval '1 second')
                ON CONFLICT (store) DO UPDATE SET holder = excluded.holder, run_id = excluded.run_id, expires_at = excluded.expires_at
                WHERE reconciliation_leases.expires_at < clock_timestamp() OR reconciliation_leases.holder = excluded.holder
                RETURNING holder
                """, logger: logger)
            for try await _ in rows.decode(String.self) { return nil }
            let held = try await c.query("SELECT holder, expires_at FROM reconciliation_leases WHERE store = \(store)", logger: logger)
            for try await (other, until) in held.decode((String, Timestamp).self) { return Busy(store: store, holder: other, until: until) }
            return Busy(store: store, holder: "unknown", until: Timestamp(microseconds: 0))
        }
        if let busy { throw busy }
    }

    /// Gives the lease back (only the holder's own).
    public func release(store: String, holder: String) async throws {
        let logger = database.logger
        try await database.withConnection { c in
            try await c.query("DELETE FROM reconciliation_leases WHERE store = \(store) AND holder = \(holder)", logger: logger)
        }
    }

    // MARK: runs

    public func begin(_ run: Run) async throws {
        let logger = database.logger
        try await database.withConnection { c in
            try await c.query(
                """
                INSERT INTO reconciliation_runs (run_id, store, trigger, instance, since, voided_since, status, started_at)
                VALUES (\(run.id), \(run.store), \(run.trigger), \(run.instance), \(run.since), \(run.voidedSince), 'running', \(run.startedAt))
                """, logger: logger)
        }
    }

    /// Adds one purchase's differences to a run, with the run's counts, in one transaction.
    public func record(runID: UUID, compared: Int, differences: [Difference], appended: Int) async throws {
        let logger = database.logger
        try await database.transaction { c in
            var next = 1
            if !differences.isEmpty {
                let rows = try await c.query(
                    "SELECT coalesce(max(ordinal), 0)::int8 + 1 FROM reconciliation_differences WHERE run_id = \(runID)", logger: logger)
                for try await n in rows.decode(Int64.self) { next = Int(n) }
            }
            for d in differences {
                try await c.query(
                    """
                    INSERT INTO reconciliation_differences
                        (run_id, ordinal, subscriber_id, purchase_id, field, ledger_value, store_value, outcome, event_ids, reason)
                    VALUES (\(runID), \(next), \(d.subscriberID), \(d.purchaseID), \(d.field), \(d.ledgerValue), \(d.storeValue),
                            \(d.repaired ? "repaired" : "unrepaired"), \(d.eventIDs), \(d.reason))
                    """, logger: logger)
                next += 1
            }
            let repaired = differences.filter(\.repaired).count
            try await c.query(
                """
                UPDATE reconciliation_runs SET purchases = purchases + \(compared), differences = differences + \(differences.count),
                    repaired = repaired + \(repaired), unrepaired = unrepaired + \(differences.count - repaired),
                    events_appended = events_appended + \(appended)
                WHERE run_id = \(runID)
                """, logger: logger)
        }
    }

    public func finish(runID: UUID, status: Status, error: String?, at: Timestamp) async throws {
        let logger = database.logger
        let text = error.map { String($0.prefix(2000)) }
        try await database.withConnection { c in
            try await c.query(
                """
                UPDATE reconciliation_runs SET status = \(status.rawValue), error = \(text), finished_at = \(at) WHERE run_id = \(runID)
                """, logger: logger)
        }
    }

    // MARK: reads

    static let runColumns = """
        run_id, seq, store, trigger, instance, since, voided_since, status, error, started_at, finished_at, purchases::int8,
        differences::int8, repaired::int8, unrepaired::int8, events_appended::int8
        """

    /// Runs newest first, before `beforeSeq` when given.
    public func runs(store: String?, beforeSeq: Int64?, limit: Int) async throws -> [Run] {
        let logger = database.logger
        let before = beforeSeq ?? Int64.max
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                SELECT \(unescaped: Self.runColumns) FROM reconciliation_runs
                WHERE seq < \(before) AND (\(store)::text IS NULL OR store = \(store))
                ORDER BY seq DESC LIMIT \(Int64(limit))
                """, logger: logger)
            return try await Self.decodeRuns(rows)
        }
    }

    public func run(id: UUID) async throws -> Run? {
        let logger = database.logger
        return try await database.withConnection { c in
            let rows = try await c.query(
                "SELECT \(unescaped: Self.runColumns) FROM reconciliation_runs WHERE run_id = \(id)", logger: logger)
            return try await Self.decodeRuns(rows).first
        }
    }

    static func decodeRuns(_ rows: PostgresRowSequence) async throws -> [Run] {
        var out: [Run] = []
        for try await row in rows {
            let c = row.makeRandomAccess()
            out.append(
                Run(
                    id: try c[0].decode(UUID.self), seq: try c[1].decode(Int64.self), store: try c[2].decode(String.self),
                    trigger: try c[3].decode(String.self), instance: try c[4].decode(String.self), since: try c[5].decode(Timestamp?.self),
                    voidedSince: try c[6].decode(Timestamp?.self), status: Status(rawValue: try c[7].decode(String.self)) ?? .failed,
                    error: try c[8].decode(String?.self), startedAt: try c[9].decode(Timestamp.self), finishedAt: try c[10].decode(Timestamp?.self),
                    purchases: Int(try c[11].decode(Int64.self)), differences: Int(try c[12].decode(Int64.self)),
                    repaired: Int(try c[13].decode(Int64.self)), unrepaired: Int(try c[14].decode(Int64.self)),
                    eventsAppended: Int(try c[15].decode(Int64.self))))
        }
        return out
    }

    /// A run's differences in the order found, after `afterOrdinal`.
    public func differences(runID: UUID, afterOrdinal: Int, limit: Int) async throws -> [Difference] {
        let logger = database.logger
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                SELECT ordinal::int8, subscriber_id, purchase_id, field, ledger_value, store_value, outcome, event_ids, reason
                FROM reconciliation_differences WHERE run_id = \(runID) AND ordinal > \(afterOrdinal) ORDER BY ordinal LIMIT \(Int64(limit))
                """, logger: logger)
            var out: [Difference] = []
            for try await r in rows.decode((Int64, String, String, String, String?, String?, String, [UUID], String?).self) {
                out.append(
                    Difference(
                        ordinal: Int(r.0), subscriberID: r.1, purchaseID: r.2, field: r.3, ledgerValue: r.4, storeValue: r.5,
                        repaired: r.6 == "repaired",
                        eventIDs: r.7, reason: r.8))
            }
            return out
        }
    }
}
