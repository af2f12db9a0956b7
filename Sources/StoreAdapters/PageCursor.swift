/// Why a paged read stopped before its last page: the API answered `hasMore` without a token, with a
/// token it had already given (it would answer the same pages forever), or more pages than one run reads.
public struct PaginationError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: Sendable, Equatable {
        case missingToken
        case repeatedToken
        case tooManyPages(Int)
    }

    public var what: String
    public var reason: Reason
    /// Pages read before stopping.
    public var pages: Int

    public init(what: String, reason: Reason, pages: Int) {
        self.what = what
        self.reason = reason
        self.pages = pages
    }

    public var description: String {
        switch reason {
        case .missingToken: "\(what): page \(pages) says more follow but gives no token for them; stopped"
        case .repeatedToken: "\(what): page \(pages) gives a pagination token an earlier page gave; stopped (the API would repeat itself)"
        case .tooManyPages(let limit): "\(what): more than \(limit) pages in one run; stopped (read a shorter range)"
        }
    }
}

/// The tokens of one paged read, so that the loop ends whatever the API answers.
public struct PageCursor: Sendable {
    public let what: String
    public let maxPages: Int
    public private(set) var pages = 0
    private var seen: Set<String> = []

    /// `what` names the read in the error (no token is ever put in it).
    public init(_ what: String, maxPages: Int) {
        self.what = what
        self.maxPages = max(1, maxPages)
    }

    /// After a page: the token of the next one, or nil when this was the last.
    public mutating func next(hasMore: Bool, token: String?) throws(PaginationError) -> String? {
        pages += 1
        guard hasMore else { return nil }
        guard let token, !token.isEmpty else { throw PaginationError(what: what, reason: .missingToken, pages: pages) }
        guard seen.insert(token).inserted else { throw PaginationError(what: what, reason: .repeatedToken, pages: pages) }
        guard pages < maxPages else { throw PaginationError(what: what, reason: .tooManyPages(maxPages), pages: pages) }
        return token
    }
}
