import Foundation
import NIOCore
import PostgresNIO

/// Array bind parameters written in PostgreSQL's binary array format by concrete code.
///
/// Binding a Swift array directly goes through PostgresNIO's generic array encoding, which is not
/// specialized for the element type and cost a quarter of an append's CPU in the profile (BENCHMARKS.md).
/// These write the same bytes: a one-dimensional array without NULLs (`ndim`, `flags`, element OID,
/// length, lower bound 1, then each element as length and bytes). Each conformance is its own concrete
/// type, so the encoding is specialized in this module.
protocol BinaryArrayBind: PostgresNonThrowingEncodable {
    associatedtype Element
    var values: [Element] { get }
    static var elementOID: UInt32 { get }
    /// Writes one element's bytes, length first.
    static func write(_ element: Element, into buffer: inout ByteBuffer)
}

extension BinaryArrayBind {
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        buffer.writeInteger(Int32(values.isEmpty ? 0 : 1))
        buffer.writeInteger(Int32(0))
        buffer.writeInteger(Self.elementOID)
        if !values.isEmpty {
            buffer.writeInteger(Int32(values.count))
            buffer.writeInteger(Int32(1))
        }
        for value in values { Self.write(value, into: &buffer) }
    }
}

/// `text[]`.
struct TextArray: BinaryArrayBind {
    var values: [String]
    init(_ values: [String]) { self.values = values }
    static var psqlType: PostgresDataType { .textArray }
    static var elementOID: UInt32 { 25 }
    static func write(_ element: String, into buffer: inout ByteBuffer) {
        buffer.writeInteger(Int32(element.utf8.count))
        buffer.writeString(element)
    }
}

/// `text[]` from UTF-8 bytes (canonical JSON written once for the hash and kept for the row).
struct UTF8TextArray: BinaryArrayBind {
    var values: [[UInt8]]
    init(_ values: [[UInt8]]) { self.values = values }
    static var psqlType: PostgresDataType { .textArray }
    static var elementOID: UInt32 { 25 }
    static func write(_ element: [UInt8], into buffer: inout ByteBuffer) {
        buffer.writeInteger(Int32(element.count))
        buffer.writeBytes(element)
    }
}

/// `int8[]`.
struct Int64Array: BinaryArrayBind {
    var values: [Int64]
    init(_ values: [Int64]) { self.values = values }
    static var psqlType: PostgresDataType { .int8Array }
    static var elementOID: UInt32 { 20 }
    static func write(_ element: Int64, into buffer: inout ByteBuffer) {
        buffer.writeInteger(Int32(8))
        buffer.writeInteger(element)
    }
}

/// `int4[]`.
struct Int32Array: BinaryArrayBind {
    var values: [Int32]
    init(_ values: [Int32]) { self.values = values }
    static var psqlType: PostgresDataType { .int4Array }
    static var elementOID: UInt32 { 23 }
    static func write(_ element: Int32, into buffer: inout ByteBuffer) {
        buffer.writeInteger(Int32(4))
        buffer.writeInteger(element)
    }
}

/// `bytea[]`.
struct ByteaArray: BinaryArrayBind {
    var values: [[UInt8]]
    init(_ values: [[UInt8]]) { self.values = values }
    static var psqlType: PostgresDataType { .byteaArray }
    static var elementOID: UInt32 { 17 }
    static func write(_ element: [UInt8], into buffer: inout ByteBuffer) {
        buffer.writeInteger(Int32(element.count))
        buffer.writeBytes(element)
    }
}

/// `uuid[]`.
struct UUIDArray: BinaryArrayBind {
    var values: [UUID]
    init(_ values: [UUID]) { self.values = values }
    static var psqlType: PostgresDataType { .uuidArray }
    static var elementOID: UInt32 { 2950 }
    static func write(_ element: UUID, into buffer: inout ByteBuffer) {
        buffer.writeInteger(Int32(16))
        withUnsafeBytes(of: element.uuid) { _ = buffer.writeBytes($0) }
    }
}

/// `jsonb` from JSON text (binary format: version 1, then the text), so a statement's parameter has the
/// type of the function argument it feeds, which the one-trip statement's test checks against `pg_proc`.
struct JSONBText: PostgresNonThrowingEncodable {
    var text: String
    init(_ text: String) { self.text = text }
    static var psqlType: PostgresDataType { .jsonb }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        buffer.writeInteger(UInt8(1))
        buffer.writeString(text)
    }
}
