import Foundation
import LedgerCore
import NIOCore
import PostgresNIO

/// Reads a row's cells in order straight from their binary bytes.
///
/// PostgresNIO's tuple `decode` goes through generic code that is not specialized for our column types; on
/// the hot paths (the projection refold, rebuild, feeds) it cost more than the fold itself (profile in
/// BENCHMARKS.md). This reads each binary cell with concrete code instead. Only the binary format is read:
/// callers fall back to `decode` when a cell comes in text.
struct BinaryCells {
    private var cells: PostgresRow.Iterator

    /// Nil when the row's first cell is in text format; a later text cell is an error when read (PostgresNIO
    /// asks for binary results, so neither happens; checking every cell up front cost a pass over the row).
    init?(_ row: PostgresRow) {
        var probe = row.makeIterator()
        guard probe.next()?.format ?? .binary == .binary else { return nil }
        cells = row.makeIterator()
    }

    struct Unexpected: Error, CustomStringConvertible {
        var column: String
        var description: String { "unexpected NULL or size in column \(column)" }
    }

    /// The next cell's bytes, nil for NULL.
    private mutating func optionalBytes() throws -> ByteBuffer? {
        guard let cell = cells.next() else { throw Unexpected(column: "past the last") }
        guard cell.format == .binary else { throw Unexpected(column: "\(cell.columnName) in text format") }
        return cell.bytes
    }

    private mutating func bytes() throws -> ByteBuffer {
        guard let bytes = try optionalBytes() else { throw Unexpected(column: "NULL") }
        return bytes
    }

    mutating func string() throws -> String { Self.string(try bytes()) }
    mutating func int64() throws -> Int64 { try Self.int64(try bytes()) }
    mutating func int32() throws -> Int32 {
        let b = try bytes()
        guard b.readableBytes == 4, let value = b.getInteger(at: b.readerIndex, as: Int32.self) else { throw Unexpected(column: "int4") }
        return value
    }
    mutating func uuid() throws -> UUID { try Self.uuid(try bytes()) }
    mutating func bool() throws -> Bool {
        let b = try bytes()
        guard b.readableBytes == 1, let value = b.getInteger(at: b.readerIndex, as: UInt8.self) else { throw Unexpected(column: "bool") }
        return value != 0
    }
    mutating func byteArray() throws -> [UInt8] { Array(try bytes().readableBytesView) }

    mutating func optionalString() throws -> String? { try optionalBytes().map(Self.string) }
    mutating func optionalInt64() throws -> Int64? { try optionalBytes().map(Self.int64) }
    mutating func optionalUUID() throws -> UUID? { try optionalBytes().map(Self.uuid) }
    /// A binary `timestamptz` cell (`Timestamp+Postgres.swift`).
    mutating func timestamp() throws -> Timestamp { try Timestamp(postgresMicroseconds: try Self.int64(try bytes())) }
    mutating func optionalTimestamp() throws -> Timestamp? {
        try optionalBytes().map { try Timestamp(postgresMicroseconds: try Self.int64($0)) }
    }

    private static func string(_ buffer: ByteBuffer) -> String {
        String(decoding: buffer.readableBytesView, as: UTF8.self)
    }

    private static func int64(_ buffer: ByteBuffer) throws -> Int64 {
        guard buffer.readableBytes == 8, let value = buffer.getInteger(at: buffer.readerIndex, as: Int64.self) else {
            throw Unexpected(column: "int8")
        }
        return value
    }

    private static func uuid(_ buffer: ByteBuffer) throws -> UUID {
        guard buffer.readableBytes == 16 else { throw Unexpected(column: "uuid") }
        return buffer.withUnsafeReadableBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
    }
}
