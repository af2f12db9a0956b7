import Foundation
import LedgerCore
import Logging
import NIOCore
import PostgresNIO

/// `COPY … FROM STDIN (FORMAT binary)`: PostgreSQL reads each field with its type's binary receive function
/// (an `int8` is eight bytes, a `timestamptz` its microseconds) instead of parsing text, and the writer
/// formats no digits, dates or escapes. Binary fields must be of the column's exact type, so the writer
/// asks the catalog (`ColumnTypes`) for each column's type first.
enum BinaryCopy {
    /// The column types a binary COPY knows how to write.
    enum ColumnType: Sendable, Equatable {
        case text, json, jsonb, int2, int4, int8, numeric, timestamp, uuid, bool, bytea
        case textArray, int8Array, boolArray

        /// From the type's oid (domains resolved to their base type); nil for a type this writer does not know.
        init?(oid: UInt32) {
            switch oid {
            case 25, 1043: self = .text  // text, varchar
            case 114: self = .json
            case 3802: self = .jsonb
            case 21: self = .int2
            case 23: self = .int4
            case 20: self = .int8
            case 1700: self = .numeric
            case 1114, 1184: self = .timestamp  // timestamp, timestamptz: the same microseconds
            case 2950: self = .uuid
            case 16: self = .bool
            case 17: self = .bytea
            case 1009, 1015: self = .textArray
            case 1016: self = .int8Array
            case 1000: self = .boolArray
            default: return nil
            }
        }
    }

    /// Each column's type, by table and column name, or the name of its type when this writer cannot write it.
    struct ColumnTypes: Sendable {
        var tables: [String: [String: Result<ColumnType, Unsupported>]] = [:]

        /// The columns of `tables` as the catalog has them now.
        static func load(_ tables: [String], on connection: PostgresConnection, logger: Logger) async throws -> ColumnTypes {
            var out = ColumnTypes()
            let rows = try await connection.query(
                """
                SELECT c.relname::text, a.attname::text, coalesce(nullif(t.typbasetype, 0), t.oid)::int8,
                       format_type(a.atttypid, a.atttypmod)
                FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_type t ON t.oid = a.atttypid
                WHERE c.relname = ANY(\(tables)::text[]) AND c.relnamespace = current_schema()::regnamespace
                  AND a.attnum > 0 AND NOT a.attisdropped
                """, logger: logger)
            for try await (table, column, oid, name) in rows.decode((String, String, Int64, String).self) {
                out.tables[table, default: [:]][column] =
                    ColumnType(oid: UInt32(truncatingIfNeeded: oid)).map { .success($0) }
                    ?? .failure(Unsupported(table: table, column: column, type: name))
            }
            return out
        }
    }

    /// A column of a type the binary writer does not know, or a value its type cannot hold.
    struct Unsupported: Error, Equatable, CustomStringConvertible {
        var table: String
        var column: String
        var type: String
        var description: String { "binary COPY cannot write \(table).\(column) (\(type))" }
    }

    /// The signature, flags and header extension every binary COPY stream starts with.
    static let header: [UInt8] = Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00] + [0, 0, 0, 0] + [0, 0, 0, 0]

    /// Microseconds from 1970-01-01 to PostgreSQL's epoch, 2000-01-01 UTC.
    static let postgresEpochMicroseconds: Int64 = 946_684_800_000_000

    /// Sends `rows` (binary tuples, without header and trailer) to `table`'s `columns`.
    ///
    /// PostgresNIO 1.33 builds the COPY statement itself and knows only the text format, so the format is
    /// named in the statement through the table argument (the rest of its statement becomes a comment). Only
    /// plain lower-case identifiers are accepted: the names are the projection's own, never input.
    static func copy(_ rows: ByteBuffer, into table: String, columns: [String], on connection: PostgresConnection, logger: Logger)
        async throws
    {
        for name in [table] + columns {
            precondition(
                !name.isEmpty && name.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F },
                "binary COPY takes plain identifiers only")
        }
        // Quoted: a column may be named like a keyword (`new`, `end`).
        let statement = "\(table)\" (\(columns.map { "\"\($0)\"" }.joined(separator: ", "))) FROM STDIN WITH (FORMAT binary) --"
        try await connection.copyFrom(table: statement, logger: logger) { writer in
            var head = ByteBuffer()
            head.writeBytes(header)
            try await writer.write(head)
            try await writer.write(rows)
            var trailer = ByteBuffer()
            trailer.writeInteger(Int16(-1))
            try await writer.write(trailer)
        }
    }
}

extension ByteBuffer {
    /// A binary COPY field: its length, then its bytes.
    mutating func copyField(_ bytes: some Collection<UInt8>) {
        writeInteger(Int32(bytes.count))
        writeBytes(bytes)
    }

    mutating func copyField(utf8 s: String) {
        var s = s
        s.withUTF8 { copyField($0) }
    }

    mutating func copyNull() { writeInteger(Int32(-1)) }

    /// `numeric`'s binary form of a decimal in plain notation (`-12`, `3.50`): base-10000 digits, the weight of
    /// the first, the sign and the scale. Nil when `text` is not such a decimal.
    mutating func copyNumeric(_ text: String) -> Bool {
        var utf8 = Array(text.utf8)
        var negative = false
        if let first = utf8.first, first == UInt8(ascii: "-") || first == UInt8(ascii: "+") {
            negative = first == UInt8(ascii: "-")
            utf8.removeFirst()
        }
        let point = utf8.firstIndex(of: UInt8(ascii: "."))
        var whole = Array(utf8[..<(point ?? utf8.endIndex)])
        let fraction = point.map { Array(utf8[(utf8.index(after: $0))...]) } ?? []
        let isDigit = { (b: UInt8) in b >= 0x30 && b <= 0x39 }
        guard !(whole.isEmpty && fraction.isEmpty), whole.allSatisfy(isDigit), fraction.allSatisfy(isDigit), fraction.count <= 1000
        else { return false }
        while whole.first == UInt8(ascii: "0") { whole.removeFirst() }
        // Whole part grouped from the right, fraction from the left, four decimal digits to a group.
        let wholeGroups = (whole.count + 3) / 4
        var digits: [Int16] = []
        let padded = [UInt8](repeating: UInt8(ascii: "0"), count: wholeGroups * 4 - whole.count) + whole
        let fractionPadded = fraction + [UInt8](repeating: UInt8(ascii: "0"), count: (4 - fraction.count % 4) % 4)
        for chunk in stride(from: 0, to: padded.count, by: 4) {
            digits.append(Self.group(padded[chunk..<chunk + 4]))
        }
        for chunk in stride(from: 0, to: fractionPadded.count, by: 4) {
            digits.append(Self.group(fractionPadded[chunk..<chunk + 4]))
        }
        var weight = wholeGroups - 1
        // Leading zero groups (a zero whole part) move the weight down; trailing ones are dropped.
        while digits.first == 0 {
            digits.removeFirst()
            weight -= 1
        }
        while digits.last == 0 { digits.removeLast() }
        if digits.isEmpty { weight = 0 }
        writeInteger(Int32(8 + 2 * digits.count))
        writeMultipleIntegers(
            Int16(digits.count), Int16(weight), UInt16(negative && !digits.isEmpty ? 0x4000 : 0), Int16(fraction.count))
        for d in digits { writeInteger(d) }
        return true
    }

    private static func group(_ four: ArraySlice<UInt8>) -> Int16 {
        four.reduce(Int16(0)) { $0 * 10 + Int16($1 - 0x30) }
    }

    /// A one-dimensional array of non-null elements of type `element` (an oid), each written by `write`.
    mutating func copyArray<T>(_ values: [T], element: Int32, _ write: (inout ByteBuffer, T) -> Void) {
        let lengthAt = writerIndex
        writeInteger(Int32(0))
        if values.isEmpty {
            writeMultipleIntegers(Int32(0), Int32(0), element)
        } else {
            writeMultipleIntegers(Int32(1), Int32(0), element, Int32(values.count), Int32(1))
            for v in values { write(&self, v) }
        }
        setInteger(Int32(writerIndex - lengthAt - 4), at: lengthAt)
    }
}

/// One table's rows as binary COPY tuples, each field written in its column's type as the catalog names it
/// (`BinaryCopy.ColumnTypes`). The columns are those the first row names, in its order; every row must
/// name the same. A value the column's type cannot take (or a column the catalog lacks) is remembered in
/// `unsupported`, and `copy` fails with it rather than send a wrong value.
struct BinaryRows: Sendable {
    let table: String
    private let catalog: [String: Result<BinaryCopy.ColumnType, BinaryCopy.Unsupported>]
    private(set) var buffer = ByteBuffer()
    private(set) var columns: [String] = []
    private var types: [BinaryCopy.ColumnType] = []
    private var naming = true
    private var field = 0
    private var countAt = 0
    private(set) var unsupported: BinaryCopy.Unsupported?

    init(table: String, catalog: BinaryCopy.ColumnTypes, capacity: Int = 0) {
        self.table = table
        self.catalog = catalog.tables[table] ?? [:]
        buffer.reserveCapacity(capacity)
    }

    var isEmpty: Bool { buffer.readableBytes == 0 }

    mutating func beginRow() {
        field = 0
        countAt = buffer.writerIndex
        buffer.writeInteger(Int16(0))
    }

    mutating func endRow() {
        buffer.setInteger(Int16(field), at: countAt)
        naming = false
    }

    /// The next field's column type (learnt from the catalog on the first row), and moves past it.
    private mutating func next(_ column: StaticString) -> BinaryCopy.ColumnType {
        defer { field += 1 }
        if naming {
            let name = column.description
            columns.append(name)
            switch catalog[name] {
            case .success(let type): types.append(type)
            case .failure(let error):
                types.append(.text)
                unsupported = unsupported ?? error
            case nil:
                types.append(.text)
                unsupported = unsupported ?? BinaryCopy.Unsupported(table: table, column: name, type: "no such column")
            }
        }
        return types[field]
    }

    private mutating func mismatch(_ column: StaticString, _ type: BinaryCopy.ColumnType, _ value: String) {
        unsupported = unsupported ?? BinaryCopy.Unsupported(table: table, column: column.description, type: "\(type), given \(value)")
        buffer.copyNull()
    }

    mutating func text(_ column: StaticString, _ value: String?) {
        let type = next(column)
        guard let value else { return buffer.copyNull() }
        switch type {
        case .text, .json: buffer.copyField(utf8: value)
        case .numeric: if !buffer.copyNumeric(value) { mismatch(column, type, "text") }
        default: mismatch(column, type, "text")
        }
    }

    mutating func integer(_ column: StaticString, _ value: Int64?) {
        let type = next(column)
        guard let value else { return buffer.copyNull() }
        wide(column, type, Int128(value))
    }

    /// An integer of up to 128 bits, for `int8`, `int4`, `int2` or `numeric` columns.
    mutating func wide(_ column: StaticString, _ value: Int128) {
        wide(column, next(column), value)
    }

    private mutating func wide(_ column: StaticString, _ type: BinaryCopy.ColumnType, _ value: Int128) {
        switch type {
        case .int8:
            guard let v = Int64(exactly: value) else { return mismatch(column, type, "\(value)") }
            buffer.writeMultipleIntegers(Int32(8), v)
        case .int4:
            guard let v = Int32(exactly: value) else { return mismatch(column, type, "\(value)") }
            buffer.writeMultipleIntegers(Int32(4), v)
        case .int2:
            guard let v = Int16(exactly: value) else { return mismatch(column, type, "\(value)") }
            buffer.writeMultipleIntegers(Int32(2), v)
        case .numeric: buffer.copyNumeric(value)
        default: mismatch(column, type, "an integer")
        }
    }

    mutating func timestamp(_ column: StaticString, _ value: Timestamp?) {
        let type = next(column)
        guard let value else { return buffer.copyNull() }
        guard type == .timestamp else { return mismatch(column, type, "a timestamp") }
        buffer.writeMultipleIntegers(Int32(8), value.microseconds - BinaryCopy.postgresEpochMicroseconds)
    }

    mutating func uuid(_ column: StaticString, _ value: UUID?) {
        let type = next(column)
        guard let value else { return buffer.copyNull() }
        guard type == .uuid else { return mismatch(column, type, "a uuid") }
        buffer.writeInteger(Int32(16))
        withUnsafeBytes(of: value.uuid) { buffer.writeBytes($0) }
    }

    mutating func bool(_ column: StaticString, _ value: Bool) {
        let type = next(column)
        guard type == .bool else { return mismatch(column, type, "a bool") }
        buffer.writeMultipleIntegers(Int32(1), UInt8(value ? 1 : 0))
    }

    mutating func textArray(_ column: StaticString, _ values: [String]) {
        let type = next(column)
        guard type == .textArray else { return mismatch(column, type, "text[]") }
        buffer.copyArray(values, element: 25) { $0.copyField(utf8: $1) }
    }

    mutating func integerArray(_ column: StaticString, _ values: [Int64]) {
        let type = next(column)
        guard type == .int8Array else { return mismatch(column, type, "int8[]") }
        buffer.copyArray(values, element: 20) { $0.writeMultipleIntegers(Int32(8), $1) }
    }

    mutating func boolArray(_ column: StaticString, _ values: [Bool]) {
        let type = next(column)
        guard type == .boolArray else { return mismatch(column, type, "bool[]") }
        buffer.copyArray(values, element: 16) { $0.writeMultipleIntegers(Int32(1), UInt8($1 ? 1 : 0)) }
    }

    /// A JSON value for a `jsonb` or `json` column.
    mutating func json(_ column: StaticString, _ value: JSONValue) { json(column, canonical: value.canonicalBytes()) }

    /// JSON already written (canonical text), for a `jsonb` or `json` column.
    mutating func json(_ column: StaticString, canonical bytes: [UInt8]) {
        let type = next(column)
        switch type {
        case .jsonb:
            // jsonb's binary form is a version byte (1) and the text.
            buffer.writeMultipleIntegers(Int32(bytes.count + 1), UInt8(1))
            buffer.writeBytes(bytes)
        case .json: buffer.copyField(bytes)
        default: mismatch(column, type, "JSON")
        }
    }

    /// Bytes for a `bytea` column.
    mutating func bytes(_ column: StaticString, _ value: [UInt8]) {
        let type = next(column)
        guard type == .bytea else { return mismatch(column, type, "bytes") }
        buffer.copyField(value)
    }

    /// Sends the rows with one binary COPY (nothing when there are none).
    func copy(on connection: PostgresConnection, logger: Logger) async throws {
        if let unsupported { throw unsupported }
        guard !isEmpty else { return }
        try await BinaryCopy.copy(buffer, into: table, columns: columns, on: connection, logger: logger)
    }
}

extension ByteBuffer {
    /// `numeric`'s binary form of an integer: base-10000 digits, most significant first, no trailing zero groups.
    mutating func copyNumeric(_ value: Int128) {
        var magnitude = value.magnitude
        var groups: [Int16] = []
        while magnitude > 0 {
            groups.append(Int16(magnitude % 10_000))
            magnitude /= 10_000
        }
        let weight = groups.count - 1
        while groups.first == 0 { groups.removeFirst() }  // least significant first here: trailing zero groups
        groups.reverse()
        writeInteger(Int32(8 + 2 * groups.count))
        writeMultipleIntegers(Int16(groups.count), Int16(max(weight, 0)), UInt16(value < 0 ? 0x4000 : 0), Int16(0))
        for g in groups { writeInteger(g) }
    }
}
