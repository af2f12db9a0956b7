import Foundation
import LedgerCore
import NIOCore
import PostgresNIO

/// Folded subscribers as binary `COPY … FROM STDIN` rows (`BinaryCopy`), one buffer per projection table, for a
/// full rebuild.
///
/// The rows `ProjectionRows` describes (the same the append path sends as JSON), each field in its column's
/// binary form: the types come from the catalog (`BinaryCopy.ColumnTypes`), so a value goes in exactly as the
/// text form would have put it. COPY into the rebuild's index-less shadow tables is what a rebuild of every
/// subscriber pays for; binary fields spare PostgreSQL parsing dates, numbers and arrays, and the folders
/// formatting them.
struct ProjectionCopyRows: ProjectionRowEncoder {
    private(set) var subscribers = 0
    private var tables: [BinaryRows]
    private var current = ProjectionTable.windows

    /// `prefix`: the tables are `<prefix><table>` (the rebuild's shadows), as the catalog was asked for them.
    init(catalog: BinaryCopy.ColumnTypes, prefix: String) {
        tables = ProjectionTable.allCases.map { BinaryRows(table: prefix + $0.name, catalog: catalog) }
    }

    var bytes: Int { tables.reduce(0) { $0 + $1.buffer.readableBytes } }

    mutating func append(_ f: ProjectionWriter.Folded) {
        subscribers += 1
        ProjectionRows.write(f, to: &self)
    }

    mutating func beginRow(_ table: ProjectionTable) {
        current = table
        tables[table.rawValue].beginRow()
    }

    mutating func endRow() { tables[current.rawValue].endRow() }
    mutating func text(_ column: StaticString, _ value: String?) { tables[current.rawValue].text(column, value) }
    mutating func integer(_ column: StaticString, _ value: Int64?) { tables[current.rawValue].integer(column, value) }
    mutating func timestamp(_ column: StaticString, _ value: Timestamp?) { tables[current.rawValue].timestamp(column, value) }
    mutating func uuid(_ column: StaticString, _ value: UUID?) { tables[current.rawValue].uuid(column, value) }
    mutating func bool(_ column: StaticString, _ value: Bool) { tables[current.rawValue].bool(column, value) }
    mutating func textArray(_ column: StaticString, _ values: [String]) { tables[current.rawValue].textArray(column, values) }
    mutating func integerArray(_ column: StaticString, _ values: [Int64]) { tables[current.rawValue].integerArray(column, values) }
    mutating func boolArray(_ column: StaticString, _ values: [Bool]) { tables[current.rawValue].boolArray(column, values) }
    mutating func json(_ column: StaticString, _ value: JSONValue) { tables[current.rawValue].json(column, value) }

    /// Sends the rows with one binary COPY per table that has rows.
    func copy(on connection: PostgresConnection, logger: Logger) async throws {
        for table in tables { try await table.copy(on: connection, logger: logger) }
    }
}
