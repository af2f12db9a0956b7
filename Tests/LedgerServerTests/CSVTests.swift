import NIOCore
import Testing

@testable import LedgerServer

@Suite("CSV lines (RFC 4180)")
struct CSVTests {
    @Test("fields with a comma, quote, CR, LF or CRLF are quoted with quotes doubled; others are written as they are")
    func quoting() {
        let line = CSV.line(["plain", "a,b", "say \"hi\"", "two\r\nlines", "cr\r", "lf\n", "é😀", ""])
        #expect(String(buffer: line) == "plain,\"a,b\",\"say \"\"hi\"\"\",\"two\r\nlines\",\"cr\r\",\"lf\n\",é😀,\r\n")
    }
}
