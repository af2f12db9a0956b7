import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// The statements every API append runs, prepared once per connection (PostgresNIO keeps them by name).
///
/// Sent as unnamed statements, PostgreSQL parsed and planned them on every append: 0.26 ms of its time for
/// the read of the streams a server does not remember and 0.29 ms for the append's call (statement log of
/// lone appends, issue 21). A prepared statement is parsed once and bound each time.
enum AppendStatements {
    /// The events a stream statement returns, grouped by subscriber (each stream in version order).
    static func streams<S: PostgresPreparedStatement>(
        _ statement: S, on connection: PostgresConnection, logger: Logger
    ) async throws -> [String: [StreamEvent]] where S.Row == StreamEvent {
        var read: [String: [StreamEvent]] = [:]
        for try await event in try await connection.execute(statement, logger: logger) {
            read[event.subscriberID, default: []].append(event)
        }
        return read
    }

    /// One subscriber's whole stream, in version order: the common case (a single append). Its plan does not
    /// depend on the value, so PostgreSQL keeps one generic plan; the array form below is planned per call.
    struct Stream: PostgresPreparedStatement {
        static let name = "subledger_append_stream"
        static let sql = "SELECT \(EventRow.streamColumns) FROM events WHERE subscriber_id = $1 ORDER BY version"
        typealias Row = StreamEvent

        var subscriber: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(subscriber)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> StreamEvent { try EventRow.decodeForStream(row) }
    }

    /// The whole streams of the given subscribers, in subscriber and version order.
    struct Streams: PostgresPreparedStatement {
        static let name = "subledger_append_streams"
        static let sql = "SELECT \(EventRow.streamColumns) FROM events WHERE subscriber_id = ANY($1::text[]) ORDER BY subscriber_id, version"
        typealias Row = StreamEvent

        var subscribers: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(TextArray(subscribers))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> StreamEvent { try EventRow.decodeForStream(row) }
    }

    /// One group in one round trip (`schema/functions/subledger_append.sql`): false when a belief is wrong. Each
    /// parameter is bound in its argument's type (test: `the one-trip statement binds…`).
    struct OneTrip: PostgresPreparedStatement {
        static let name = "subledger_append_one_trip"
        static let sql = """
            SELECT subledger_append($1, $2, $3::text[], $4::int8[], $5::bytea[], $6::timestamptz,
                $7::text[], $8::int8[], $9::int8[], $10::uuid[], $11::text[], $12::text[], $13::text[], $14::text[],
                $15::text[], $16::text[], $17::text[], $18::bytea[], $19::bytea[], $20::bytea[],
                $21::jsonb, $22::jsonb, $23::jsonb, $24::jsonb, $25::jsonb, $26::text, $27::jsonb)
            """
        typealias Row = Bool

        var lockKey: Int64
        var expectedPosition: Int64
        /// The touched subscribers, and the version and hash each stream is believed to end at.
        var subscribers: [String]
        var believedVersions: [Int64]
        var believedHashes: [[UInt8]]
        var recordedAt: Timestamp
        var rows: [RecordedEvent]
        var fingerprints: [[UInt8]]
        var texts: AppendWriter.RowTexts
        var projection: ProjectionJSONRows

        func makeBindings() throws -> PostgresBindings {
            var b = PostgresBindings(capacity: 27)
            b.append(lockKey)
            b.append(expectedPosition)
            b.append(TextArray(subscribers))
            b.append(Int64Array(believedVersions))
            b.append(ByteaArray(believedHashes))
            b.append(recordedAt)
            b.append(TextArray(rows.map(\.subscriberID)))
            b.append(Int64Array(rows.map(\.version)))
            b.append(Int64Array(rows.map(\.position)))
            b.append(UUIDArray(rows.map(\.eventID)))
            b.append(TextArray(rows.map(\.type.rawValue)))
            b.append(TextArray(rows.map(\.occurredAt.rfc3339)))
            b.append(TextArray(rows.map(\.source)))
            b.append(TextArray(rows.map(\.environment.rawValue)))
            b.append(TextArray(rows.map(\.idempotencyKey)))
            b.append(UTF8TextArray(texts.data))
            b.append(UTF8TextArray(texts.metadata))
            b.append(ByteaArray(fingerprints))
            b.append(ByteaArray(rows.map(\.prevHash)))
            b.append(ByteaArray(rows.map(\.hash)))
            b.append(JSONBText(projection.text(.windows)))
            b.append(JSONBText(projection.text(.subscriberState)))
            b.append(JSONBText(projection.text(.reportRuns)))
            b.append(JSONBText(projection.text(.reportTransactions)))
            b.append(JSONBText(projection.text(.reportTrials)))
            b.append(projection.rollupText)
            b.append(JSONBText(projection.deletionsText))
            return b
        }

        func decodeRow(_ row: PostgresRow) throws -> Bool { try row.decode(Bool.self) }
    }
}
