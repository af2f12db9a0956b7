import Foundation
import LedgerCore
import NIOCore
import PostgresNIO

/// Folded subscribers as `COPY … FROM STDIN` text rows, one buffer per projection table, for a full rebuild.
///
/// The rows `ProjectionRows` describes (the same the append path sends as JSON), in COPY's text format:
/// tab-separated, `\N` for NULL, backslash escapes (`EventStore.copyEscaped`). COPY into the rebuild's
/// index-less shadow tables is what a rebuild of every subscriber pays for.
struct ProjectionCopyRows: ProjectionRowEncoder {
    private(set) var subscribers = 0
    private var buffers = ProjectionTable.allCases.map { _ in ByteBuffer() }
    /// Each table's columns, in the order its first row named them (every row names the same).
    private var columns = ProjectionTable.allCases.map { _ in [String]() }
    private var current = ProjectionTable.windows
    private var naming = false

    var bytes: Int { buffers.reduce(0) { $0 + $1.readableBytes } }

    mutating func append(_ f: ProjectionWriter.Folded) {
        subscribers += 1
        ProjectionRows.write(f, to: &self)
    }

    mutating func beginRow(_ table: ProjectionTable) {
        current = table
        naming = columns[table.rawValue].isEmpty
    }

    mutating func endRow() {
        // The row's last field ended with a tab: it ends the line instead.
        let b = buffers[current.rawValue].writerIndex
        buffers[current.rawValue].setInteger(UInt8(ascii: "\n"), at: b - 1)
        naming = false
    }

    private mutating func field(_ column: StaticString, _ value: String?) {
        if naming { columns[current.rawValue].append(column.description) }
        buffers[current.rawValue].field(value)
    }

    mutating func text(_ column: StaticString, _ value: String?) { field(column, value.map(EventStore.copyEscaped)) }

    mutating func integer(_ column: StaticString, _ value: Int64?) {
        if naming { columns[current.rawValue].append(column.description) }
        buffers[current.rawValue].field(value)
    }

    mutating func timestamp(_ column: StaticString, _ value: Timestamp?) { field(column, value?.rfc3339) }
    mutating func uuid(_ column: StaticString, _ value: UUID?) { field(column, value?.lowercasedString) }
    mutating func bool(_ column: StaticString, _ value: Bool) { field(column, value ? "t" : "f") }
    mutating func textArray(_ column: StaticString, _ values: [String]) {
        field(column, EventStore.copyEscaped(Self.arrayLiteral(values.map(Self.quoted))))
    }
    mutating func integerArray(_ column: StaticString, _ values: [Int64]) { field(column, Self.arrayLiteral(values.map { String($0) })) }
    mutating func boolArray(_ column: StaticString, _ values: [Bool]) { field(column, Self.arrayLiteral(values.map { $0 ? "t" : "f" })) }
    mutating func json(_ column: StaticString, _ value: JSONValue) { field(column, EventStore.copyEscaped(value.canonicalString())) }

    /// Sends the rows to the tables `<prefix><table>` with one COPY per table that has rows.
    func copy(into prefix: String, on connection: PostgresConnection, logger: Logger) async throws {
        for table in ProjectionTable.allCases where buffers[table.rawValue].readableBytes > 0 {
            let buffer = buffers[table.rawValue]
            try await connection.copyFrom(table: prefix + table.name, columns: columns[table.rawValue], logger: logger) { writer in
                try await writer.write(buffer)
            }
        }
    }
}

extension ByteBuffer {
    /// One field of a COPY text row that needs no escaping (or is escaped already), then a tab; nil is NULL.
    fileprivate mutating func field(_ value: String?) {
        if let value { writeString(value) } else { writeStaticString("\\N") }
        writeInteger(UInt8(ascii: "\t"))
    }

    fileprivate mutating func field(_ value: Int64?) {
        guard let value else { return field(nil as String?) }
        var digits:
            (
                UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8
            ) =
                (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var magnitude = value.magnitude
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[19 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            if value < 0 { writeInteger(UInt8(ascii: "-")) }
            writeBytes(UnsafeRawBufferPointer(rebasing: buffer[(20 - count)...]))
        }
        writeInteger(UInt8(ascii: "\t"))
    }
}

extension ProjectionCopyRows {
    /// A PostgreSQL array literal of already-quoted elements (one COPY field).
    static func arrayLiteral(_ elements: [String]) -> String { "{" + elements.joined(separator: ",") + "}" }

    /// One array-literal element, double-quoted with `\\` and `"` escaped: any entitlement name survives.
    static func quoted(_ s: String) -> String {
        guard s.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\"") }) else { return "\"" + s + "\"" }
        return "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }
}
