import LedgerCore
import Testing

@testable import LedgerStore

@Suite("JSON rows for subledger_projection_write")
struct JSONRowsTests {
    @Test("rows are objects in one array: NULLs, escapes and nested JSON survive a parse")
    func rows() throws {
        var rows = JSONRows()
        #expect(rows.text == "[]")
        for i in 0..<3 {
            rows.beginRow()
            rows.member("name", i == 1 ? .null : .string("a\"b\\c\n\(i)"))
            rows.integer("n", i == 2 ? nil : Int64(i))
            rows.member("list", .array([.string("pro"), .number(JSONNumber(Int64(i)))]))
            rows.endRow()
        }
        let parsed = try JSONParser.parse(rows.text).arrayValue ?? []
        #expect(parsed.count == 3)
        #expect(parsed[0].objectValue?["name"] == .string("a\"b\\c\n0"))
        #expect(parsed[1].objectValue?["name"] == .null)
        #expect(parsed[2].objectValue?["n"] == .null)
        #expect(parsed[2].objectValue?["list"] == .array([.string("pro"), .number(JSONNumber(Int64(2)))]))
    }
}
