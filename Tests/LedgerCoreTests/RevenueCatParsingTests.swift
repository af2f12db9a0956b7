import LedgerCore
import LedgerTestSupport
import Testing

@Suite("RevenueCat export parsing")
struct RevenueCatParsingTests {
    static func records(_ text: String, delimiter: Character = ",", chunk: Int = 3) throws -> [CSVRecordReader.Record] {
        var bytes = Array(text.utf8)[...]
        var reader = CSVRecordReader(delimiter: delimiter.asciiValue!) {
            defer { bytes = bytes.dropFirst(chunk) }
            return Array(bytes.prefix(chunk))
        }
        var out: [CSVRecordReader.Record] = []
        while let r = try reader.next() { out.append(r) }
        return out
    }

    @Test("RFC 4180: quoted delimiters, doubled quotes, line breaks and JSON in cells, CRLF or LF, the line each record starts on")
    func csv() throws {
        let text = "a,b,c\r\n1,\"x, \"\"y\"\"\",\"[\"\"pro\"\",\"\"plus\"\"]\"\r\n2,\"two\nlines\",\n\n3,,last"
        let records = try Self.records(text)
        #expect(records.map(\.line) == [1, 2, 3, 6])
        #expect(records[1].fields == ["1", "x, \"y\"", "[\"pro\",\"plus\"]"])
        #expect(records[2].fields == ["2", "two\nlines", ""])
        #expect(records[3].fields == ["3", "", "last"])
        #expect(try Self.records("a;b\n\"1;2\";3\n", delimiter: ";")[1].fields == ["1;2", "3"])
    }

    @Test("a broken quote is named by line and column")
    func csvErrors() throws {
        #expect(throws: CSVRecordReader.SyntaxError(line: 2, column: 2, reason: "a quote inside an unquoted field (quote the whole field)")) {
            try Self.records("a,b\n1,x\"y\n")
        }
        #expect(throws: CSVRecordReader.SyntaxError(line: 2, column: 1, reason: "a quoted field is not closed before the end of the file")) {
            try Self.records("a\n\"open\n")
        }
    }

    @Test("the version comes from the header: experiments → 7, experiment_id → 5 or 6, older refused")
    func versions() throws {
        #expect(try RevenueCatHeader(RevenueCatExportGenerator.header(.v7, updatedAt: false)).version == .v7)
        #expect(try RevenueCatHeader(RevenueCatExportGenerator.header(.v5, updatedAt: true)).version == .v5or6)
        let v4 = RevenueCatExportGenerator.header(.v5, updatedAt: false).filter {
            !["first_seen_time", "offer", "offer_type", "auto_resume_time", "experiment_id", "experiment_variant"].contains($0)
        }
        #expect(throws: RevenueCatHeader.Problem.self) { try RevenueCatHeader(v4) }
    }

    @Test("rows map to events with the stores' own keys; prices in minor units of each currency")
    func mapping() throws {
        var generator = RevenueCatExportGenerator(seed: 1, subscribers: 200)
        _ = generator.update(count: 0, at: generator.exportTime)
        let text = RevenueCatExportGenerator.csv(generator.rows, version: .v7)
        let records = try Self.records(text, chunk: 1 << 16)
        let header = try RevenueCatHeader(records[0].fields)
        for (record, row) in zip(records.dropFirst(), generator.rows) {
            let parsed = try RevenueCatRow(fields: record.fields, line: record.line, header: header)
            #expect(parsed.priceMinor == row.priceMinor)
            #expect(parsed.appUserID == row.appUserID)
            let events = try RevenueCatMapping.events(for: parsed, asOf: generator.exportTime)
            let first = try #require(events.first)
            #expect(first.type == (row.renewalNumber > 1 ? .renewal : .purchase))
            #expect(first.source == row.source)
            switch row.store {
            case "app_store": #expect(first.idempotencyKey == "apple:txn:\(row.transactionID)")
            case "play_store": #expect(first.idempotencyKey == "google:order:\(row.transactionID)")
            default: #expect(first.idempotencyKey == "revenuecat:stripe:txn:\(row.transactionID):\(row.renewalNumber)")
            }
            #expect(events.contains { $0.type == .refund } == (row.refundedAt != nil))
            for event in events {
                try EventDataValidator.validate(type: event.type, data: event.data, occurredAt: event.occurredAt, path: "data")
            }
        }
    }
}

@Suite("RevenueCat export parsing: hostile input")
struct RevenueCatHostileParsingTests {
    @Test("a quote never closed stops at the field limit, naming where the field began; a price too large is refused, not trapped")
    func limits() throws {
        let text = "a,b\n1,\"" + String(repeating: "x", count: CSVRecordReader.maxFieldBytes + 10)
        #expect(throws: CSVRecordReader.SyntaxError(line: 2, column: 2, reason: "a field is longer than 1024 KiB (a quote not closed?)")) {
            try RevenueCatParsingTests.records(text, chunk: 1 << 16)
        }
        var header = RevenueCatExportGenerator.header(.v7, updatedAt: false)
        header.removeAll { $0 == "purchase_price_in_purchased_currency" }
        let parsed = try RevenueCatHeader(header)
        var cells = Array(repeating: "", count: header.count)
        func set(_ name: String, _ value: String) { cells[header.firstIndex(of: name)!] = value }
        set("rc_original_app_user_id", "u")
        set("product_identifier", "p")
        set("start_time", "2026-01-01 00:00:00")
        set("store", "app_store")
        set("store_transaction_id", "1")
        set("renewal_number", "1")
        set("purchased_currency", "KWD")
        set("price_in_purchased_currency", "9999999999999999.9999")
        #expect(throws: RevenueCatRowError.self) { try RevenueCatRow(fields: cells, line: 2, header: parsed) }
    }
}
