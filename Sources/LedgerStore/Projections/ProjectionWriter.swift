import Foundation
import LedgerCore
import Logging
import NIOCore
import PostgresNIO

/// Re-folds subscribers from the log and replaces their rows in `windows` and `subscriber_state`.
///
/// Used inside the append transaction (so a read right after a 201 sees the event, and a failed projection
/// write rolls the event back with it) and by `rebuild`. Re-folding the whole stream makes late events
/// (an earlier `occurred_at` than events already recorded) land at their effective time.
struct ProjectionWriter {
    let logger: Logger

    /// Folds the given subscribers' streams as stored (this transaction's rows included) and writes their
    /// own tables (`windows`, `subscriber_state`); their report facts are `ReportRollupWorker`'s, which
    /// follows the log. Returns how many events were folded.
    @discardableResult
    func refold(_ subscribers: [String], on connection: PostgresConnection) async throws -> Int {
        guard !subscribers.isEmpty else { return 0 }
        let streams = try await streams(
            """
            SELECT \(unescaped: EventRow.streamColumns) FROM events
            WHERE subscriber_id = ANY(\(TextArray(subscribers))::text[]) ORDER BY subscriber_id, version
            """, on: connection)
        try await write(Self.fold(streams, previous: [:]), parts: .subscriber, on: connection)
        return streams.values.reduce(0) { $0 + $1.count }
    }

    /// The given subscribers' streams folded as they stand at log position `end`, each with its fold at `cursor`
    /// (`Folded.previous`): what a follower of the log (`ReportRollupWorker`, `ConvertedLTVCells`) takes the change of
    /// a batch from. `known`: as for `fold`.
    func fold(
        _ subscribers: Set<String>, from cursor: Int64, through end: Int64, known: [String: Previous] = [:], on connection: PostgresConnection
    ) async throws -> [Folded] {
        let streams = try await streams(subscribers, through: end, on: connection)
        let previous = streams.mapValues { $0.filter { $0.position <= cursor } }.filter { !$0.value.isEmpty }
        return Self.fold(streams, previous: previous, known: known)
    }

    /// The given subscribers' streams folded as they stand at log position `end` (no `previous`).
    func fold(_ subscribers: Set<String>, at end: Int64, on connection: PostgresConnection) async throws -> [Folded] {
        Self.fold(try await streams(subscribers, through: end, on: connection), previous: [:])
    }

    /// The given subscribers' events up to log position `end`.
    private func streams(_ subscribers: Set<String>, through end: Int64, on connection: PostgresConnection) async throws -> [String: [StreamEvent]] {
        try await streams(
            """
            SELECT \(unescaped: EventRow.streamColumns) FROM events
            WHERE subscriber_id = ANY(\(TextArray(Array(subscribers)))::text[]) AND position <= \(end)
            ORDER BY subscriber_id, version
            """, on: connection)
    }

    /// The streams an event query returns (rows ordered by subscriber and version).
    func streams(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> [String: [StreamEvent]] {
        var streams: [String: [StreamEvent]] = [:]
        for try await row in try await connection.query(query, logger: logger) {
            let event = try EventRow.decodeForStream(row)
            streams[event.subscriberID, default: []].append(event)
        }
        return streams
    }

    /// Folds whole streams into what `write` stores; `previous` holds the streams as the projection has
    /// them now (absent: not projected yet), whose facts the rollups' change is taken from.
    /// `known`: folds kept from earlier appends (`AppendMemory`), used for a previous stream they are the fold
    /// of (same last version and hash) instead of folding it again.
    static func fold<Streams: Sequence<(key: String, value: [StreamEvent])>>(
        _ streams: Streams, previous: [String: [StreamEvent]], known: [String: Previous] = [:]
    ) -> [Folded] {
        streams.map { subscriber, events in
            let typed = events.map(\.fold)
            let ledger = Fold.fold(typed)
            let facts = SubscriberFacts.derive(events: typed, ledger: ledger)
            let old = previous[subscriber].flatMap { before -> Previous? in
                guard let last = before.last else { return nil }
                if let kept = known[subscriber], kept.version == last.version, kept.hash == last.hash { return kept }
                let typedBefore = before.map(\.fold)
                let ledger = Fold.fold(typedBefore)
                return Previous(
                    ledger: ledger, facts: SubscriberFacts.derive(events: typedBefore, ledger: ledger), version: last.version,
                    hash: last.hash)
            }
            return Folded(
                subscriber: subscriber, version: events.last!.version, ledger: ledger, facts: facts, previous: old,
                hash: events.last!.hash)
        }
    }

    /// One subscriber's fold, the report facts derived from it, and the fold it replaces (the rollups
    /// change by the difference of the two facts).
    struct Folded: Sendable {
        var subscriber: String
        var version: Int64
        var ledger: SubscriberLedger
        var facts: SubscriberFacts
        /// The fold of the stream as it was before (nil: it was empty).
        var previous: Previous?
        /// The stream's last event's hash (empty where nobody keeps the fold: the rebuild).
        var hash: [UInt8] = []

        /// This fold, as the previous one of the next append.
        var asPrevious: Previous { Previous(ledger: ledger, facts: facts, version: version, hash: hash) }
    }

    /// A subscriber's fold before an append, and the stream head it is the fold of.
    struct Previous: Sendable {
        var ledger: SubscriberLedger
        var facts: SubscriberFacts
        var version: Int64
        var hash: [UInt8]
    }

    /// Replaces the projection rows of `parts` of the given subscribers, in one round
    /// trip (`schema/functions/subledger_projection_write.sql`).
    func write(_ folded: [Folded], parts: ProjectionParts, on connection: PostgresConnection) async throws {
        guard !folded.isEmpty else { return }
        let rows = ProjectionJSONRows(folded, parts: parts)
        // Read, so an error the function raises after its row description is thrown here. The last statement
        // before COMMIT also lifts the statement timeout for the rest of the transaction: a timeout cancels a
        // COMMIT that waits for the synchronous standby into a mere WARNING, leaving the append committed
        // on the primary alone yet acknowledged (docs/scaling.md, "Zero acknowledged loss").
        _ = try await connection.query(
            """
            SELECT subledger_projection_write(
                \(TextArray(folded.map(\.subscriber)))::text[], \(rows.rows(.windows))::jsonb, \(rows.rows(.subscriberState))::jsonb,
                \(rows.rows(.reportRuns))::jsonb, \(rows.rows(.reportTransactions))::jsonb, \(rows.rows(.reportTrials))::jsonb,
                NULL::text),
                set_config('statement_timeout', '0', true)
            """, logger: logger
        ).collect()
    }

    /// The `subscriber_state` row's JSON columns, as both the append path and the rebuild's COPY write them.
    /// `will_renew` keeps each entitlement's instants as RFC 3339 text (schema 0020), so reads at any T
    /// answer from the row as the fold would.
    static func stateJSON(_ ledger: SubscriberLedger) -> (willRenew: JSONValue, unmatchedRefunds: JSONValue) {
        (
            .object(ledger.renewing.mapValues { .array($0.map { .string($0.rfc3339) }) }),
            .array(ledger.unmatchedRefunds.map { .string($0.lowercasedString) })
        )
    }
}
