import StoreAdapters
import Testing

@Suite("Page cursor")
struct PageCursorTests {
    @Test("a paged read ends: at the last page, or with an error on a missing, repeated or cycling token and past the cap")
    func ends() throws {
        var cursor = PageCursor("history", maxPages: 10)
        #expect(try cursor.next(hasMore: true, token: "a") == "a")
        #expect(try cursor.next(hasMore: true, token: "b") == "b")
        #expect(try cursor.next(hasMore: false, token: "b") == nil)

        var cycling = PageCursor("history", maxPages: 10)
        _ = try cycling.next(hasMore: true, token: "a")
        _ = try cycling.next(hasMore: true, token: "b")
        #expect(throws: PaginationError(what: "history", reason: .repeatedToken, pages: 3)) { try cycling.next(hasMore: true, token: "a") }

        var missing = PageCursor("history", maxPages: 10)
        #expect(throws: PaginationError(what: "history", reason: .missingToken, pages: 1)) { try missing.next(hasMore: true, token: nil) }
        #expect(throws: PaginationError.self) { try missing.next(hasMore: true, token: "") }

        var long = PageCursor("history", maxPages: 3)
        _ = try long.next(hasMore: true, token: "1")
        _ = try long.next(hasMore: true, token: "2")
        #expect(throws: PaginationError(what: "history", reason: .tooManyPages(3), pages: 3)) { try long.next(hasMore: true, token: "3") }
        #expect("\(PaginationError(what: "history", reason: .tooManyPages(3), pages: 3))".contains("more than 3 pages"))
    }
}
