import LedgerCore
import NIOCore
import PostgresNIO

/// `Timestamp` as PostgreSQL's binary `timestamptz`: microseconds since 2000-01-01 00:00 UTC, exact both ways,
/// so SQL reads and binds timestamps as they are (no `extract(epoch …)` arithmetic, no text round trips).
extension Timestamp: PostgresNonThrowingEncodable, PostgresDecodable {
    /// 2000-01-01 00:00:00 UTC in microseconds since 1970.
    static let postgresEpoch: Int64 = 946_684_800_000_000

    public static var psqlType: PostgresDataType { .timestamptz }
    public static var psqlFormat: PostgresFormat { .binary }

    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        // Timestamps are within years 1–9999, far from the Int64 limits.
        byteBuffer.writeInteger(microseconds - Self.postgresEpoch)
    }

    public init<JSONDecoder: PostgresJSONDecoder>(
        from buffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat, context: PostgresDecodingContext<JSONDecoder>
    ) throws {
        guard type == .timestamptz || type == .timestamp, format == .binary else { throw PostgresDecodingError.Code.typeMismatch }
        guard buffer.readableBytes == 8, let raw = buffer.readInteger(as: Int64.self) else { throw PostgresDecodingError.Code.failure }
        self = try Self(postgresMicroseconds: raw)
    }

    /// From PostgreSQL's count; `infinity` and anything outside years 1–9999 is refused.
    init(postgresMicroseconds raw: Int64) throws {
        let (us, overflow) = raw.addingReportingOverflow(Self.postgresEpoch)
        let t = Timestamp(microseconds: us)
        guard !overflow, t >= .minimum, t <= .maximum else { throw PostgresDecodingError.Code.failure }
        self = t
    }
}
