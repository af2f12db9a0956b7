import Foundation

/// Splits a SQL script into statements for PostgresNIO, which speaks only the extended protocol (one
/// statement per query). Knows comments, quoted strings and identifiers, and dollar-quoted bodies.
enum SQLScript {
    static func statements(_ script: String) -> [String] {
        let s = Array(script.unicodeScalars)
        var statements: [String] = []
        var current = String.UnicodeScalarView()
        var i = 0
        func flush() {
            let text = String(current).trimmingCharacters(in: .whitespacesAndNewlines)
            if !text.isEmpty { statements.append(text) }
            current = String.UnicodeScalarView()
        }
        while i < s.count {
            let c = s[i]
            let next: Unicode.Scalar? = i + 1 < s.count ? s[i + 1] : nil
            if c == "-" && next == "-" {
                while i < s.count && s[i] != "\n" { i += 1 }
                continue
            }
            if c == "/" && next == "*" {
                i += 2
                while i + 1 < s.count && !(s[i] == "*" && s[i + 1] == "/") { i += 1 }
                i += 2
                continue
            }
            if c == "'" || c == "\"" {
                current.append(c)
                i += 1
                while i < s.count {
                    current.append(s[i])
                    if s[i] == c {
                        if i + 1 < s.count && s[i + 1] == c {
                            current.append(s[i + 1])
                            i += 2
                            continue
                        }
                        i += 1
                        break
                    }
                    i += 1
                }
                continue
            }
            if c == "$", let tagEnd = dollarTagEnd(s, from: i) {
                let tag = Array(s[i...tagEnd])
                current.append(contentsOf: tag)
                i = tagEnd + 1
                while i < s.count {
                    if s[i] == "$", i + tag.count <= s.count, Array(s[i..<i + tag.count]) == tag {
                        current.append(contentsOf: tag)
                        i += tag.count
                        break
                    }
                    current.append(s[i])
                    i += 1
                }
                continue
            }
            if c == ";" {
                flush()
                i += 1
                continue
            }
            current.append(c)
            i += 1
        }
        flush()
        return statements
    }

    /// `$tag$` or `$$` starting at `i`: the index of its closing `$`.
    private static func dollarTagEnd(_ s: [Unicode.Scalar], from i: Int) -> Int? {
        var j = i + 1
        while j < s.count {
            let c = s[j]
            if c == "$" { return j }
            guard c == "_" || c.properties.isAlphabetic || (j > i + 1 && ("0"..."9").contains(c)) else { return nil }
            j += 1
        }
        return nil
    }
}
