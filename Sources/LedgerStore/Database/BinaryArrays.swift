import Foundation
import NIOCore
import PostgresNIO

/// Array bind parameters written in PostgreSQL's binary array format by concrete code.
///
/// Binding a Swift array directly goes through PostgresNIO's generic array encoding, which is not
/// specialized for the element type and cost a quarter of an append's CPU in the profile (BENCHMARKS.md).
/// These write the same bytes: a one-dimensional array without NULLs (`ndim`, `flags`, element OID,
/// length, lower bound 1, then each element as length and bytes).
enum BinaryArray {
    static func header(_ buffer: inout ByteBuffer, count: Int, elementOID: UInt32) {
        buffer.writeInteger(Int32(count == 0 ? 0 : 1))
        buffer.writeInteger(Int32(0))
        buffer.writeInteger(elementOID)
        if count > 0 {
            buffer.writeInteger(Int32(count))
            buffer.writeInteger(Int32(1))
        }
    }
}

/// `text[]`.
struct TextArray: PostgresNonThrowingEncodable {
    var values: [String]
    init(_ values: [String]) { self.values = values }
    static var psqlType: PostgresDataType { .textArray }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        BinaryArray.header(&buffer, count: values.count, elementOID: 25)
        for value in values {
            buffer.writeInteger(Int32(value.utf8.count))
            buffer.writeString(value)
        }
    }
}

/// `int8[]`.
struct Int64Array: PostgresNonThrowingEncodable {
    var values: [Int64]
    init(_ values: [Int64]) { self.values = values }
    static var psqlType: PostgresDataType { .int8Array }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        BinaryArray.header(&buffer, count: values.count, elementOID: 20)
        for value in values {
            buffer.writeInteger(Int32(8))
            buffer.writeInteger(value)
        }
    }
}

/// `int4[]`.
struct Int32Array: PostgresNonThrowingEncodable {
    var values: [Int32]
    init(_ values: [Int32]) { self.values = values }
    static var psqlType: PostgresDataType { .int4Array }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        BinaryArray.header(&buffer, count: values.count, elementOID: 23)
        for value in values {
            buffer.writeInteger(Int32(4))
            buffer.writeInteger(value)
        }
    }
}

/// `bytea[]`.
struct ByteaArray: PostgresNonThrowingEncodable {
    var values: [[UInt8]]
    init(_ values: [[UInt8]]) { self.values = values }
    static var psqlType: PostgresDataType { .byteaArray }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        BinaryArray.header(&buffer, count: values.count, elementOID: 17)
        for value in values {
            buffer.writeInteger(Int32(value.count))
            buffer.writeBytes(value)
        }
    }
}

/// `uuid[]`.
struct UUIDArray: PostgresNonThrowingEncodable {
    var values: [UUID]
    init(_ values: [UUID]) { self.values = values }
    static var psqlType: PostgresDataType { .uuidArray }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        BinaryArray.header(&buffer, count: values.count, elementOID: 2950)
        for value in values {
            buffer.writeInteger(Int32(16))
            withUnsafeBytes(of: value.uuid) { _ = buffer.writeBytes($0) }
        }
    }
}
