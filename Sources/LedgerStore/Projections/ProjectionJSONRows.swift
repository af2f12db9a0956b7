import Foundation
import LedgerCore

/// The projection rows of folded subscribers as JSON arrays of objects named like the tables' columns, for
/// `subledger_projection_write` (schema 0008), which inserts them with `jsonb_populate_recordset`: one
/// statement for five tables.
struct ProjectionJSONRows {
    private(set) var windows = JSONRows()
    private(set) var states = JSONRows()
    private(set) var runs = JSONRows()
    private(set) var transactions = JSONRows()
    private(set) var trials = JSONRows()

    init(_ folded: [ProjectionWriter.Folded]) {
        for f in folded {
            for (seq, w) in f.ledger.windows.enumerated() { appendWindow(f.subscriber, Int64(seq), w) }
            states.row { r in
                r.string("subscriber_id", f.subscriber)
                r.integer("version", f.version)
                let json = ProjectionWriter.stateJSON(f.ledger)
                r.json("auto_renew", json.autoRenew)
                r.json("lapsed", json.lapsed)
                r.json("unmatched_refunds", json.unmatchedRefunds)
            }
            appendFacts(f.subscriber, f.facts)
        }
    }

    private mutating func appendWindow(_ subscriber: String, _ seq: Int64, _ w: Window) {
        let cut = w.effectiveCut
        windows.row { r in
            r.string("subscriber_id", subscriber)
            r.integer("seq", seq)
            r.string("entitlement", w.entitlement)
            r.string("start_at", w.start.rfc3339)
            r.string("end_at", w.end?.rfc3339)
            r.string("granted_end", w.grantedEnd?.rfc3339)
            r.string("kind", w.kind.rawValue)
            r.string("product_id", w.productID)
            r.string("transaction_id", w.transactionID)
            r.string("source_event_id", w.sourceEventID.lowercasedString)
            r.integer("source_position", w.sourcePosition)
            r.string("environment", w.environment.rawValue)
            r.string("cut_at", cut?.at.rfc3339)
            r.string("cut_by", cut?.eventID.lowercasedString)
            r.string("cut_cause", cut?.cause.rawValue)
        }
    }

    private mutating func appendFacts(_ subscriber: String, _ facts: SubscriberFacts) {
        for (run, firstStart) in zip(facts.runs, facts.runFirstStarts) {
            runs.row { r in
                r.string("entitlement", run.entitlement)
                r.string("subscriber_id", subscriber)
                r.integer("start_us", run.start.microseconds)
                r.integer("end_us", run.end?.microseconds)
                r.integer("first_start_us", firstStart.microseconds)
                r.string("lapse", run.lapse?.rawValue)
            }
        }
        for t in facts.transactions {
            transactions.row { r in
                r.string("source_event_id", t.eventID.lowercasedString)
                r.string("subscriber_id", subscriber)
                r.json("entitlements", .array(t.entitlements.map(JSONValue.string)))
                r.string("kind", t.kind.rawValue)
                r.string("currency", t.currency)
                r.integer("gross", t.gross)
                r.integer("commission", t.commission)
                r.integer("occurred_us", t.occurredAt.microseconds)
                r.integer("start_us", t.start.microseconds)
                r.integer("end_us", t.end?.microseconds)
                r.integer("stop_us", t.stop?.microseconds)
                r.integer("service_end_us", t.serviceEnd?.microseconds)
                r.integer("settled_us", t.settledAt.microseconds)
                r.json("refund_at_us", .array(t.refunds.map { .number(JSONNumber($0.at.microseconds)) }))
                r.json("refund_amount", .array(t.refunds.map { .number(JSONNumber($0.amount)) }))
                // Exact decimals travel as strings: numeric's own text input reads them.
                r.string("monthly_num", t.monthly.map { String($0.numerator) })
                r.string("monthly_den", t.monthly.map { String($0.denominator) })
                r.json("refund_cut", .array(t.refunds.map { .bool($0.cut) }))
            }
        }
        for t in facts.trials {
            trials.row { r in
                r.string("source_event_id", t.eventID.lowercasedString)
                r.string("entitlement", t.entitlement)
                r.string("subscriber_id", subscriber)
                r.integer("start_us", t.start.microseconds)
                r.integer("end_us", t.end.microseconds)
                r.json("converted", .bool(t.converted))
            }
        }
    }
}

/// A JSON array of flat objects, written straight into bytes (no dictionary per row).
struct JSONRows {
    private var out: [UInt8] = [UInt8(ascii: "[")]
    private var rows = 0

    /// The array's text.
    var text: String { String(decoding: out + [UInt8(ascii: "]")], as: UTF8.self) }

    mutating func row(_ body: (inout Row) -> Void) {
        if rows > 0 { out.append(UInt8(ascii: ",")) }
        out.append(UInt8(ascii: "{"))
        rows += 1
        // The buffer moves into the row and back (swaps, never copies: appending stays amortized O(1)).
        var row = Row()
        swap(&row.out, &out)
        body(&row)
        row.out.append(UInt8(ascii: "}"))
        swap(&row.out, &out)
    }

    struct Row {
        fileprivate var out: [UInt8] = []
        private var members = 0

        private mutating func key(_ name: StaticString) {
            if members > 0 { out.append(UInt8(ascii: ",")) }
            members += 1
            out.append(UInt8(ascii: "\""))
            name.withUTF8Buffer { out.append(contentsOf: $0) }
            out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
        }

        /// A string member; nil is JSON null (the column's NULL).
        mutating func string(_ name: StaticString, _ value: String?) {
            key(name)
            if let value { JSONValue.string(value).write(into: &out) } else { out.append(contentsOf: "null".utf8) }
        }

        mutating func integer(_ name: StaticString, _ value: Int64?) {
            key(name)
            if let value { out.append(contentsOf: String(value).utf8) } else { out.append(contentsOf: "null".utf8) }
        }

        mutating func json(_ name: StaticString, _ value: JSONValue) {
            key(name)
            value.write(into: &out)
        }
    }
}
