import LedgerCore
import Testing

@Suite("JSON parser")
struct JSONParserTests {
    private func parseError(_ text: String, maxDepth: Int = JSONParser.defaultMaxDepth) -> JSONParseError? {
        parseError(bytes: Array(text.utf8), maxDepth: maxDepth)
    }

    private func parseError(bytes: [UInt8], maxDepth: Int = JSONParser.defaultMaxDepth) -> JSONParseError? {
        do {
            _ = try JSONParser.parse(bytes, maxDepth: maxDepth)
            return nil
        } catch {
            return error
        }
    }

    @Test("parses every kind of value")
    func parsesAllKinds() throws {
        let v = try JSONParser.parse(
            #" { "s": "x", "n": -1.5e2, "t": true, "f": false, "z": null, "a": [1, [], {}], "o": {"k": "v"} } "#)
        let expected: JSONValue = [
            "s": "x", "n": -150, "t": true, "f": false, "z": nil, "a": [1, [], [:]], "o": ["k": "v"],
        ]
        #expect(v == expected)
        #expect(v.objectValue?["s"]?.stringValue == "x")
        #expect(v.objectValue?["n"]?.numberValue?.canonical == "-150")
        #expect(v.objectValue?["t"]?.boolValue == true)
        #expect(v.objectValue?["a"]?.arrayValue?.count == 3)
        #expect(v.objectValue?["z"] == .null)
    }

    @Test(
        "top-level scalars are documents",
        arguments: [
            ("1", JSONValue.number(JSONNumber(1))), ("\"x\"", .string("x")), ("null", .null), ("true", .bool(true)),
            ("false", .bool(false)), ("[]", .array([])), ("{}", .object([:])), (" \t\r\n 7 \n", .number(JSONNumber(7))),
        ])
    func topLevelScalars(text: String, expected: JSONValue) throws {
        #expect(try JSONParser.parse(text) == expected)
    }

    @Test("decodes escapes")
    func escapes() throws {
        #expect(try JSONParser.parse(#""\"\\\/\b\f\n\r\t""#) == .string("\"\\/\u{8}\u{C}\n\r\t"))
        #expect(try JSONParser.parse(#""\u00e9\u00E9""#) == .string("\u{E9}\u{E9}"))
        #expect(try JSONParser.parse(#""\u0041\u007f\u0001""#) == .string("A\u{7F}\u{1}"))
        #expect(try JSONParser.parse(#""\uD83D\uDE00""#) == .string("\u{1F600}"))
        #expect(try JSONParser.parse(#""\udbff\udfff""#) == .string("\u{10FFFF}"))
        #expect(try JSONParser.parse(#""\uFFFF""#) == .string("\u{FFFF}"))
    }

    @Test(
        "keeps raw UTF-8 text byte for byte",
        arguments: [
            [0xC3, 0xA9], [0xE2, 0x82, 0xAC], [0xF0, 0x9F, 0x98, 0x80], [0xED, 0x9F, 0xBF], [0xEE, 0x80, 0x80],
            [0xEF, 0xBF, 0xBF], [0xF4, 0x8F, 0xBF, 0xBF], [0xC2, 0x80], [0x65, 0xCC, 0x81],
        ] as [[UInt8]])
    func validUTF8(sequence: [UInt8]) throws {
        let v = try JSONParser.parse([0x22] + sequence + [0x22])
        let s = try #require(v.stringValue)
        #expect(Array(s.utf8) == sequence)
    }

    @Test(
        "rejects malformed documents",
        arguments: [
            ("", "unexpected end of input"),
            ("   \n", "unexpected end of input"),
            ("01", "number"),
            ("-01", "number"),
            ("00", "number"),
            ("1.", "number"),
            ("1.e5", "number"),
            (".5", "unexpected character"),
            ("+1", "unexpected character"),
            ("-", "number"),
            ("--1", "number"),
            ("1e", "number"),
            ("1e+", "number"),
            ("1..2", "number"),
            ("0x10", "unexpected text after"),
            ("NaN", "unexpected character"),
            ("nan", "invalid literal"),
            ("Infinity", "unexpected character"),
            ("-Infinity", "number"),
            ("[1, NaN]", "unexpected character"),
            ("1e100000", "out-of-range"),
            ("1e-100000", "out-of-range"),
            ("1e1000000", "out-of-range"),
            ("tru", "invalid literal"),
            ("nul", "invalid literal"),
            ("True", "unexpected character"),
            ("undefined", "unexpected character"),
            ("[1,]", "unexpected character"),
            ("[,1]", "unexpected character"),
            ("[1 2]", "expected ',' or ']'"),
            ("[1", "unexpected end of input in array"),
            ("[", "unexpected end of input"),
            ("{", "expected a string key"),
            (#"{"a":1,}"#, "expected a string key"),
            ("{a:1}", "expected a string key"),
            ("{'a':1}", "expected a string key"),
            (#"{"a" 1}"#, "expected ':'"),
            (#"{"a":}"#, "unexpected character"),
            (#"{"a":1 "b":2}"#, "expected ',' or '}'"),
            (#"{"a":1"#, "unexpected end of input in object"),
            (#""abc"#, "unterminated string"),
            (#""abc\"#, "unterminated escape"),
            ("'a'", "unexpected character"),
            (#""\x41""#, "invalid escape"),
            (#""\'""#, "invalid escape"),
            (#""\u12G4""#, "invalid \\u escape"),
            (#""\u12""#, "truncated \\u escape"),
            (#""\u0000""#, "NUL"),
            (#"{"\u0000":1}"#, "NUL"),
            (#""\uD800""#, "unpaired surrogate"),
            (#""\uDC00""#, "unpaired surrogate"),
            (#""\uDFFF\uD800""#, "unpaired surrogate"),
            (#""\uD800\u0041""#, "unpaired surrogate"),
            (#""\uD800\uD800""#, "unpaired surrogate"),
            (#""\uD800x""#, "unpaired surrogate"),
            (#""\uD800\n""#, "unpaired surrogate"),
            ("\"a\tb\"", "unescaped control character"),
            ("\"a\nb\"", "unescaped control character"),
            ("\"\u{1F}\"", "unescaped control character"),
            ("1 2", "unexpected text after"),
            ("[1]]", "unexpected text after"),
            ("{} {}", "unexpected text after"),
            ("\"a\" x", "unexpected text after"),
            ("null,", "unexpected text after"),
            ("\u{C}1", "unexpected character"),
            ("\u{A0}1", "unexpected character"),
            ("\u{FEFF}{}", "unexpected character"),
        ])
    func rejects(text: String, reason: String) throws {
        let error = try #require(parseError(text), "accepted \(text.debugDescription)")
        #expect(error.reason.contains(reason), "\(text.debugDescription): \(error)")
        #expect(error.description.contains("at byte \(error.offset)"))
        #expect(error.offset >= 0 && error.offset <= text.utf8.count)
    }

    @Test(
        "rejects ill-formed UTF-8 inside strings",
        arguments: [
            [0xC0, 0x80],  // overlong NUL
            [0xC1, 0xBF],  // overlong
            [0xE0, 0x80, 0x80],  // overlong 3-byte
            [0xE0, 0x9F, 0xBF],  // overlong 3-byte
            [0xF0, 0x80, 0x80, 0x80],  // overlong 4-byte
            [0xF0, 0x8F, 0xBF, 0xBF],  // overlong 4-byte
            [0xED, 0xA0, 0x80],  // UTF-16 surrogate D800
            [0xED, 0xBF, 0xBF],  // UTF-16 surrogate DFFF
            [0xF4, 0x90, 0x80, 0x80],  // beyond U+10FFFF
            [0xF5, 0x80, 0x80, 0x80],
            [0xF8, 0x88, 0x80, 0x80, 0x80],
            [0xFE], [0xFF],
            [0x80],  // lone continuation byte
            [0xBF],
            [0xC3, 0x28],  // bad continuation
            [0xE2, 0x28, 0xA1],
            [0xE2, 0x82, 0x28],
            [0xF0, 0x9F, 0x98, 0x28],
            [0xE2, 0x82],  // truncated, then the closing quote
            [0xF0, 0x9F, 0x98],
            [0xC3],
        ] as [[UInt8]])
    func invalidUTF8(sequence: [UInt8]) throws {
        let error = try #require(parseError(bytes: [0x22, 0x61] + sequence + [0x22]))
        #expect(error.reason.contains("invalid UTF-8"), "\(sequence): \(error)")
        #expect(error.offset == 2)
    }

    @Test("rejects a multi-byte sequence cut off by the end of input")
    func truncatedAtEnd() throws {
        for sequence: [UInt8] in [[0xC3], [0xE2, 0x82], [0xF0, 0x9F, 0x98]] {
            let error = try #require(parseError(bytes: [0x22] + sequence))
            #expect(error.reason.contains("invalid UTF-8"))
        }
    }

    @Test("rejects ill-formed UTF-8 in object keys and outside strings")
    func invalidUTF8Elsewhere() throws {
        let inKey = try #require(parseError(bytes: Array(#"{""#.utf8) + [0xC0, 0x80] + Array(#"":1}"#.utf8)))
        #expect(inKey.reason.contains("invalid UTF-8"))
        #expect(parseError(bytes: [0xC3, 0xA9]) != nil)
        #expect(parseError(bytes: Array("[1,".utf8) + [0xFF] + Array("]".utf8)) != nil)
    }

    @Test("refuses duplicate keys and names the key")
    func duplicateKeys() throws {
        let top = try #require(parseError(#"{"a":1,"a":2}"#))
        #expect(top.reason == #"duplicate key "a""#)
        #expect(top.offset == 7)

        let nested = try #require(parseError(#"{"x":{"b":1,"c":2,"b":1}}"#))
        #expect(nested.reason.contains(#""b""#))

        let sameValue = try #require(parseError(#"{"k":null,"k":null}"#))
        #expect(sameValue.reason.contains("duplicate key"))

        // A key spelled with an escape is the same key.
        let escaped = try #require(parseError(#"{"a":1,"\u0061":2}"#))
        #expect(escaped.reason.contains(#"duplicate key "a""#))

        // Keys that differ only in case are different keys; so are keys in sibling objects.
        let ok = try JSONParser.parse(#"{"a":1,"A":2,"o":{"a":3},"p":{"a":4}}"#)
        #expect(ok.objectValue?.count == 4)
    }

    @Test("keys that are the same text in another Unicode normalization are refused, never silently merged")
    func canonicallyEquivalentKeys() throws {
        // "é" precomposed and decomposed: Swift's String equality treats them as equal, so a dictionary cannot
        // hold both; the parser must refuse rather than keep only one.
        let error = try #require(
            parseError(bytes: Array(#"{""#.utf8) + [0xC3, 0xA9] + Array(#"":1,"e"#.utf8) + [0xCC, 0x81] + Array(#"":2}"#.utf8)))
        #expect(error.reason.contains("duplicate key"))
    }

    @Test("accepts nesting exactly at the limit and refuses one level more")
    func depthLimit() throws {
        let limit = JSONParser.defaultMaxDepth
        #expect(limit == 64)
        let arrays = String(repeating: "[", count: limit) + String(repeating: "]", count: limit)
        #expect(parseError(arrays) == nil)
        let tooDeep = String(repeating: "[", count: limit + 1) + String(repeating: "]", count: limit + 1)
        let error = try #require(parseError(tooDeep))
        #expect(error.reason.contains("nesting deeper than 64"))
        #expect(error.offset == limit)

        let objects = String(repeating: #"{"a":"#, count: limit) + "1" + String(repeating: "}", count: limit)
        #expect(parseError(objects) == nil)
        let deepObjects = String(repeating: #"{"a":"#, count: limit + 1) + "1" + String(repeating: "}", count: limit + 1)
        #expect(parseError(deepObjects)?.reason.contains("nesting") == true)

        let mixed = String(repeating: #"[{"a":"#, count: limit / 2) + "1" + String(repeating: "}]", count: limit / 2)
        #expect(parseError(mixed) == nil)
        let mixedDeep = "[" + mixed + "]"
        #expect(parseError(mixedDeep)?.reason.contains("nesting") == true)
    }

    @Test("depth counts containers, not siblings")
    func depthIsNotWidth() throws {
        let wide = "[" + Array(repeating: "[[]]", count: 10_000).joined(separator: ",") + "]"
        #expect(try JSONParser.parse(wide, maxDepth: 3).arrayValue?.count == 10_000)
        #expect(parseError("[[[]]]", maxDepth: 2)?.reason.contains("nesting deeper than 2") == true)
        #expect(parseError("[[]]", maxDepth: 2) == nil)
        #expect(parseError("1", maxDepth: 0) == nil)
        #expect(parseError("[]", maxDepth: 0) != nil)
    }

    @Test("absurdly deep input is refused without exhausting the stack")
    func hugeDepth() throws {
        let error = try #require(parseError(String(repeating: "[", count: 200_000)))
        #expect(error.reason.contains("nesting"))
    }

    @Test("a String and its UTF-8 bytes parse alike")
    func stringAndBytes() throws {
        let text = #"{"name":"Zoë","n":[1.50,2]}"#
        #expect(try JSONParser.parse(text) == JSONParser.parse(Array(text.utf8)))
        #expect(try JSONParser.parse(text) == JSONParser.parse(text.utf8))
    }
}
