import Foundation
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

    init?(_ row: PostgresRow) {
        guard row.allSatisfy({ $0.format == .binary }) else { return nil }
        cells = row.makeIterator()
    }

    struct Unexpected: Error, CustomStringConvertible {
        var column: String
        var description: String { "unexpected NULL or size in column \(column)" }
    }

    private mutating func bytes() throws -> ByteBuffer {
        guard let cell = cells.next(), let bytes = cell.bytes else { throw Unexpected(column: "?") }
        return bytes
    }

    mutating func string() throws -> String {
        let buffer = try bytes()
        return String(decoding: buffer.readableBytesView, as: UTF8.self)
    }

    mutating func int64() throws -> Int64 {
        let buffer = try bytes()
        guard buffer.readableBytes == 8, let value = buffer.getInteger(at: buffer.readerIndex, as: Int64.self) else {
            throw Unexpected(column: "int8")
        }
        return value
    }

    mutating func uuid() throws -> UUID {
        let buffer = try bytes()
        guard buffer.readableBytes == 16 else { throw Unexpected(column: "uuid") }
        return buffer.withUnsafeReadableBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
    }

    mutating func byteArray() throws -> [UInt8] {
        Array(try bytes().readableBytesView)
    }
}
