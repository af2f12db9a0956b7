import Foundation
import LedgerCore
import NIOCore
import PostgresNIO

/// How events are read back from the `events` table into `RecordedEvent`s.
enum EventRow {
    /// The select list every event read uses; timestamps come back exact, as binary `timestamptz`.
    static let columns = """
        event_id, subscriber_id, version, position, type, occurred_at, recorded_at,
        source, environment, idempotency_key, data::text, metadata::text, prev_hash, hash
        """

    /// The select list of a read that only folds: the fields `Fold` and `SubscriberFacts` read, in the order
    /// `decodeForFold` expects (subscriber first: a rebuild cuts streams by it before
    /// decoding). A rebuild reads every event once; the envelope fields the fold never looks at
    /// (source, key, metadata, hashes) would only cost transfer and parsing.
    static let foldColumns = """
        subscriber_id, event_id, version, position, type, occurred_at, environment, data::text, source
        """

    /// An event read with `foldColumns`, as the fold and the report facts see it (its data typed).
    static func decodeForFold(_ row: PostgresRow) throws -> FoldEvent {
        guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
        return try decodeForFold(&cells)
    }

    /// An event from the next cells of a row (the `foldColumns` select list, wherever it starts in the row).
    static func decodeForFold(_ cells: inout BinaryCells) throws -> FoldEvent {
        let subscriber = try cells.string()
        let id = try cells.uuid()
        let version = try cells.int64()
        let position = try cells.int64()
        let type = try cells.string()
        let occurred = try cells.timestamp()
        let environment = try cells.string()
        let data = try cells.string()
        let source = try cells.string()
        guard let eventType = EventType(rawValue: type), let env = LedgerEnvironment(rawValue: environment) else {
            throw CorruptRow(position: position, reason: "unknown type \(type) or environment \(environment)")
        }
        return FoldEvent(
            eventID: id, subscriberID: subscriber, version: version, position: position, type: eventType,
            occurredAt: occurred, environment: env, data: try object(data, position: position), source: source)
    }

    /// The select list of a stream an append reads: what the fold reads, and the hash the next event chains from.
    static let streamColumns = foldColumns + ", hash"

    /// An event read with `streamColumns`, from the next cells of a row.
    static func decodeForStream(_ cells: inout BinaryCells) throws -> StreamEvent {
        let fold = try decodeForFold(&cells)
        return StreamEvent(fold: fold, hash: try cells.byteArray())
    }

    static func decodeForStream(_ row: PostgresRow) throws -> StreamEvent {
        guard var cells = BinaryCells(row) else { throw BinaryCells.Unexpected(column: "text format") }
        return try decodeForStream(&cells)
    }

    static func decode(_ row: PostgresRow) throws -> RecordedEvent {
        if var cells = BinaryCells(row) { return try decode(&cells) }
        let (id, subscriber, version, position, type, occurred, recorded, source, environment, key, data, metadata, prev, hash) =
            try row.decode(
                (UUID, String, Int64, Int64, String, Timestamp, Timestamp, String, String, String, String, String, ByteBuffer, ByteBuffer).self)
        return try make(
            id, subscriber, version, position, type, occurred, recorded, source, environment, key, data, metadata,
            Array(buffer: prev), Array(buffer: hash))
    }

    /// An event from the next cells of a row (the `columns` select list, wherever it starts in the row).
    static func decode(_ cells: inout BinaryCells) throws -> RecordedEvent {
        let id = try cells.uuid()
        let subscriber = try cells.string()
        let version = try cells.int64()
        let position = try cells.int64()
        let type = try cells.string()
        let occurred = try cells.timestamp()
        let recorded = try cells.timestamp()
        let source = try cells.string()
        let environment = try cells.string()
        let key = try cells.string()
        let data = try cells.string()
        let metadata = try cells.string()
        let prev = try cells.byteArray()
        let hash = try cells.byteArray()
        return try make(
            id, subscriber, version, position, type, occurred, recorded, source, environment, key, data, metadata, prev, hash)
    }

    private static func make(
        _ id: UUID, _ subscriber: String, _ version: Int64, _ position: Int64, _ type: String, _ occurred: Timestamp,
        _ recorded: Timestamp, _ source: String, _ environment: String, _ key: String, _ data: String, _ metadata: String,
        _ prev: [UInt8], _ hash: [UInt8]
    ) throws -> RecordedEvent {
        guard let eventType = EventType(rawValue: type), let env = LedgerEnvironment(rawValue: environment) else {
            throw CorruptRow(position: position, reason: "unknown type \(type) or environment \(environment)")
        }
        return RecordedEvent(
            eventID: id, subscriberID: subscriber, version: version, position: position, type: eventType,
            occurredAt: occurred, recordedAt: recorded,
            source: source, environment: env, idempotencyKey: key,
            data: try object(data, position: position), metadata: try object(metadata, position: position),
            prevHash: prev, hash: hash)
    }

    private static func object(_ text: String, position: Int64) throws -> [String: JSONValue] {
        guard case .object(let o) = try JSONParser.parse(text, maxDepth: 1000) else {
            throw CorruptRow(position: position, reason: "data or metadata is not a JSON object")
        }
        return o
    }

    /// A stored row the ledger cannot read back: only possible if someone changed the table behind its back.
    struct CorruptRow: Error, CustomStringConvertible {
        var position: Int64
        var reason: String
        var description: String { "event at position \(position) is unreadable: \(reason)" }
    }
}
