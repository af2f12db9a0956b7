import Foundation
import LedgerCore
import NIOCore
import PostgresNIO

/// Folded subscribers as `COPY … FROM STDIN` text rows, one buffer per projection table, for a full rebuild.
///
/// The same rows `ProjectionWriter.write` sends as JSON (windows, state, report facts), in COPY's text
/// format: tab-separated, `\N` for NULL, backslash escapes (`EventStore.copyEscaped`). COPY into the
/// rebuild's index-less shadow tables is what a rebuild of every subscriber pays for.
struct ProjectionCopyRows {
    private(set) var subscribers = 0
    private var windows = ByteBuffer()
    private var state = ByteBuffer()
    private var runs = ByteBuffer()
    private var transactions = ByteBuffer()
    private var trials = ByteBuffer()

    var bytes: Int { windows.readableBytes + state.readableBytes + runs.readableBytes + transactions.readableBytes + trials.readableBytes }

    mutating func append(_ f: ProjectionWriter.Folded) {
        subscribers += 1
        let s = EventStore.copyEscaped(f.subscriber)
        for (seq, w) in f.ledger.windows.enumerated() {
            let cut = w.effectiveCut
            windows.field(s)
            windows.field(Int64(seq))
            windows.field(text: w.entitlement)
            windows.field(w.start.rfc3339)
            windows.field(w.end?.rfc3339)
            windows.field(w.grantedEnd?.rfc3339)
            windows.field(w.kind.rawValue)
            windows.field(text: w.productID)
            windows.field(text: w.transactionID)
            windows.field(w.sourceEventID.lowercasedString)
            windows.field(w.sourcePosition)
            windows.field(w.environment.rawValue)
            windows.field(cut?.at.rfc3339)
            windows.field(cut?.eventID.lowercasedString)
            windows.field(cut?.cause.rawValue, last: true)
        }
        state.field(s)
        state.field(f.version)
        let json = ProjectionWriter.stateJSON(f.ledger)
        state.field(text: json.autoRenew.canonicalString())
        state.field(text: json.lapsed.canonicalString())
        state.field(text: json.unmatchedRefunds.canonicalString(), last: true)
        for (run, firstStart) in zip(f.facts.runs, f.facts.runFirstStarts) {
            runs.field(text: run.entitlement)
            runs.field(s)
            runs.field(run.start.microseconds)
            runs.field(run.end?.microseconds)
            runs.field(firstStart.microseconds)
            runs.field(run.lapse?.rawValue, last: true)
        }
        for t in f.facts.transactions {
            transactions.field(t.eventID.lowercasedString)
            transactions.field(s)
            transactions.field(text: Self.arrayLiteral(t.entitlements.map(Self.quoted)))
            transactions.field(t.kind.rawValue)
            transactions.field(text: t.currency)
            transactions.field(t.gross)
            transactions.field(t.commission)
            transactions.field(t.occurredAt.microseconds)
            transactions.field(t.start.microseconds)
            transactions.field(t.end?.microseconds)
            transactions.field(t.stop?.microseconds)
            transactions.field(t.serviceEnd?.microseconds)
            transactions.field(t.settledAt.microseconds)
            transactions.field(Self.arrayLiteral(t.refunds.map { String($0.at.microseconds) }))
            transactions.field(Self.arrayLiteral(t.refunds.map { String($0.amount) }))
            transactions.field(t.monthly.map { String($0.numerator) })
            transactions.field(t.monthly.map { String($0.denominator) })
            transactions.field(Self.arrayLiteral(t.refunds.map { $0.cut ? "t" : "f" }), last: true)
        }
        for t in f.facts.trials {
            trials.field(t.eventID.lowercasedString)
            trials.field(text: t.entitlement)
            trials.field(s)
            trials.field(t.start.microseconds)
            trials.field(t.end.microseconds)
            trials.field(t.converted ? "t" : "f", last: true)
        }
    }

    /// Sends the rows to the tables `<prefix><table>` with one COPY per table that has rows.
    func copy(into prefix: String, on connection: PostgresConnection, logger: Logger) async throws {
        for (table, columns, buffer) in [
            ("windows", Self.windowColumns, windows), ("subscriber_state", Self.stateColumns, state),
            ("report_runs", Self.runColumns, runs), ("report_transactions", Self.transactionColumns, transactions),
            ("report_trials", Self.trialColumns, trials),
        ] where buffer.readableBytes > 0 {
            try await connection.copyFrom(table: prefix + table, columns: columns, logger: logger) { writer in
                try await writer.write(buffer)
            }
        }
    }

    private static let windowColumns = [
        "subscriber_id", "seq", "entitlement", "start_at", "end_at", "granted_end", "kind", "product_id", "transaction_id",
        "source_event_id", "source_position", "environment", "cut_at", "cut_by", "cut_cause",
    ]
    private static let stateColumns = ["subscriber_id", "version", "auto_renew", "lapsed", "unmatched_refunds"]
    private static let runColumns = ["entitlement", "subscriber_id", "start_us", "end_us", "first_start_us", "lapse"]
    private static let transactionColumns = [
        "source_event_id", "subscriber_id", "entitlements", "kind", "currency", "gross", "commission", "occurred_us",
        "start_us", "end_us", "stop_us", "service_end_us", "settled_us", "refund_at_us", "refund_amount", "monthly_num",
        "monthly_den", "refund_cut",
    ]
    private static let trialColumns = ["source_event_id", "entitlement", "subscriber_id", "start_us", "end_us", "converted"]

}

extension ByteBuffer {
    /// One field of a COPY text row that needs no escaping (or is escaped already); nil is NULL. The row's
    /// last field ends the line instead of a tab.
    fileprivate mutating func field(_ value: String?, last: Bool = false) {
        if let value { writeString(value) } else { writeStaticString("\\N") }
        writeInteger(UInt8(ascii: last ? "\n" : "\t"))
    }

    /// A text field that may hold a tab, newline or backslash.
    fileprivate mutating func field(text value: String?, last: Bool = false) {
        field(value.map(EventStore.copyEscaped), last: last)
    }

    fileprivate mutating func field(_ value: Int64?, last: Bool = false) {
        guard let value else { return field(nil as String?, last: last) }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
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
        writeInteger(UInt8(ascii: last ? "\n" : "\t"))
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
