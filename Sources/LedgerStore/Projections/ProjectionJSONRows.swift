import Foundation
import LedgerCore

/// The projection rows of folded subscribers as JSON arrays of objects named like the tables' columns, for
/// `subledger_projection_write` (schema/functions), which inserts them with `jsonb_populate_recordset`: one
/// statement for five tables. The rows themselves are described in `ProjectionRows`.
struct ProjectionJSONRows: ProjectionRowEncoder, Sendable {
    private var tables = ProjectionTable.allCases.map { _ in JSONRows() }
    private var current = ProjectionTable.windows
    /// The rollups' change of all the folded subscribers (cells that sum to zero included).
    private var rollup = ReportRollup()
    private var deletions = ProjectionTable.allCases.map { _ in JSONRows() }
    private let patched: Bool

    /// The rollups' change, as `subledger_rollup_add` (schema/functions) takes it, for the append's queue row
    /// (schema 0033: stored as this text); nil when no cell changes, so nothing is queued.
    var rollupText: String? {
        let arrays = RollupRows.arrays(rollup.pruned())
        guard arrays.contains(where: { $0.rows != "[]" }) else { return nil }
        return RollupRows.json(arrays)
    }

    /// The stored rows to delete before the rows are inserted, when `patched` (`subledger_append`, schema
    /// 0016): an object of arrays named like the tables, each element the key columns of one row.
    var deletionsText: String {
        guard patched else { return "{}" }
        return "{"
            + [ProjectionTable.windows, .reportRuns, .reportTransactions, .reportTrials]
            .map { "\"\($0.name)\":\(deletions[$0.rawValue].text)" }.joined(separator: ",") + "}"
    }

    /// `patched`: each subscriber with a previous fold gets only the rows that changed (`ProjectionPatch`),
    /// and `deletionsText` the keys of its stored rows to replace; otherwise every row is written.
    ///
    /// `parts`: the tables written (the others' arrays stay empty); the rollups' change is computed with the
    /// report facts only.
    init(_ folded: [ProjectionWriter.Folded], patched: Bool = false, parts: ProjectionParts = .all) {
        self.patched = patched
        self.parts = parts
        for f in folded {
            let patch = patched ? f.previous.map { ProjectionPatch(from: $0, to: f) } : nil
            ProjectionRows.write(f, to: &self, patch: patch, parts: parts)
            if parts.reports { rollup.addChange(from: f.previous?.facts, to: f.facts) }
            if let patch { Self.delete(patch, of: f.subscriber, parts: parts, into: &deletions) }
        }
    }

    /// The tables this value writes.
    let parts: ProjectionParts

    /// A table's rows as the projection functions take them: NULL for a table outside `parts`, which
    /// `subledger_projection_write` then leaves alone.
    func rows(_ table: ProjectionTable) -> String? {
        switch table {
        case .windows, .subscriberState: parts.subscriber ? text(table) : nil
        case .reportRuns, .reportTransactions, .reportTrials: parts.reports ? text(table) : nil
        }
    }

    /// Adds the rows of other subscribers (encoded apart, e.g. on another core).
    mutating func merge(_ other: ProjectionJSONRows) {
        for i in tables.indices { tables[i].append(other.tables[i]) }
        for i in deletions.indices { deletions[i].append(other.deletions[i]) }
        rollup.add(other.rollup)
    }

    /// Appends the keys of the stored rows `patch` replaces, one object per row, to each table's array.
    private static func delete(_ patch: ProjectionPatch, of subscriber: String, parts: ProjectionParts, into tables: inout [JSONRows]) {
        func row(_ table: ProjectionTable, _ members: (inout JSONRows) -> Void) {
            tables[table.rawValue].beginRow()
            members(&tables[table.rawValue])
            tables[table.rawValue].endRow()
        }
        for seq in patch.windowSeqs where parts.subscriber {
            row(.windows) { r in
                r.member("subscriber_id", .string(subscriber))
                r.integer("seq", Int64(seq))
            }
        }
        for key in patch.runKeys where parts.reports {
            row(.reportRuns) { r in
                r.member("entitlement", .string(key.entitlement))
                r.member("subscriber_id", .string(subscriber))
                r.integer("start_us", key.start)
            }
        }
        for id in patch.transactionIDs where parts.reports {
            row(.reportTransactions) { $0.member("source_event_id", .string(id.lowercasedString)) }
        }
        for key in patch.trialKeys where parts.reports {
            row(.reportTrials) { r in
                r.member("source_event_id", .string(key.eventID.lowercasedString))
                r.member("entitlement", .string(key.entitlement))
            }
        }
    }

    /// The rows of one table as a JSON array.
    func text(_ table: ProjectionTable) -> String { tables[table.rawValue].text }

    mutating func beginRow(_ table: ProjectionTable) {
        current = table
        tables[table.rawValue].beginRow()
    }

    mutating func endRow() { tables[current.rawValue].endRow() }

    mutating func text(_ column: StaticString, _ value: String?) {
        tables[current.rawValue].member(column, value.map(JSONValue.string) ?? .null)
    }

    mutating func integer(_ column: StaticString, _ value: Int64?) {
        tables[current.rawValue].integer(column, value)
    }

    mutating func timestamp(_ column: StaticString, _ value: Timestamp?) { text(column, value?.rfc3339) }
    mutating func uuid(_ column: StaticString, _ value: UUID?) { text(column, value?.lowercasedString) }
    mutating func bool(_ column: StaticString, _ value: Bool) { json(column, .bool(value)) }
    mutating func textArray(_ column: StaticString, _ values: [String]) { json(column, .array(values.map(JSONValue.string))) }
    mutating func integerArray(_ column: StaticString, _ values: [Int64]) {
        json(column, .array(values.map { .number(JSONNumber($0)) }))
    }
    mutating func boolArray(_ column: StaticString, _ values: [Bool]) { json(column, .array(values.map(JSONValue.bool))) }
    mutating func json(_ column: StaticString, _ value: JSONValue) { tables[current.rawValue].member(column, value) }
}

/// A JSON array of flat objects, written straight into bytes (no dictionary per row).
struct JSONRows: Sendable {
    private var out: [UInt8] = [UInt8(ascii: "[")]
    private var rows = 0
    private var members = 0

    /// The array's text.
    var text: String { String(decoding: out + [UInt8(ascii: "]")], as: UTF8.self) }

    mutating func beginRow() {
        if rows > 0 { out.append(UInt8(ascii: ",")) }
        out.append(UInt8(ascii: "{"))
        rows += 1
        members = 0
    }

    mutating func endRow() { out.append(UInt8(ascii: "}")) }

    /// Appends the rows of another array.
    mutating func append(_ other: JSONRows) {
        guard other.rows > 0 else { return }
        if rows > 0 { out.append(UInt8(ascii: ",")) }
        out.append(contentsOf: other.out.dropFirst())
        rows += other.rows
    }

    private mutating func key(_ name: StaticString) {
        if members > 0 { out.append(UInt8(ascii: ",")) }
        members += 1
        out.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { out.append(contentsOf: $0) }
        out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
    }

    /// A member; JSON null is the column's NULL.
    mutating func member(_ name: StaticString, _ value: JSONValue) {
        key(name)
        value.write(into: &out)
    }

    mutating func integer(_ name: StaticString, _ value: Int64?) {
        key(name)
        if let value { out.append(contentsOf: String(value).utf8) } else { out.append(contentsOf: "null".utf8) }
    }
}
