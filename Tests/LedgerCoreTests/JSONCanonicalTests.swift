import LedgerCore
import Testing

@Suite("Canonical JSON writer")
struct JSONCanonicalTests {
    @Test("object keys are sorted by their UTF-8 bytes")
    func keyOrder() {
        let v: JSONValue = [
            "b": 1, "a": 2, "aa": 3, "B": 4, "\u{E9}": 5, "\u{FF61}": 6, "\u{1F600}": 7, "": 8, "a b": 9, "_": 10,
        ]
        // UTF-8 order puts U+FF61 (EF BD A1) before U+1F600 (F0 9F 98 80); UTF-16 order would not.
        #expect(v.canonicalString() == #"{"":8,"B":4,"_":10,"a":2,"a b":9,"aa":3,"b":1,"é":5,"｡":6,"😀":7}"#)
    }

    @Test("CanonicalObject writes arrays of objects, nested and empty, as the sorted object would")
    func canonicalObjectArrays() {
        let rows: [[Int64]] = [[], [1], [2, 3, 4], [], [5]]
        var out = CanonicalObject(capacity: 0)
        out.member("a", string: "x")
        out.member("empty", objects: [Int]()) { _, _ in }
        out.member("rows", objects: rows) { row, o in
            o.member("cells", objects: row) { $1.member("v", integer: $0) }
            o.member("n", integer: Int64(row.count))
        }
        out.member("z", bool: true)
        let expected: JSONValue = .object([
            "a": "x", "empty": .array([]), "z": true,
            "rows": .array(
                rows.map { row in
                    .object([
                        "cells": .array(row.map { .object(["v": .number(JSONNumber($0))]) }),
                        "n": .number(JSONNumber(Int64(row.count))),
                    ])
                }),
        ])
        #expect(out.finish() == expected.canonicalBytes())
    }

    @Test("nested objects are sorted too and arrays keep their order")
    func nested() {
        let v: JSONValue = ["z": [3, 1, 2, ["y": true, "x": false]], "m": ["k2": nil, "k1": [:]]]
        #expect(v.canonicalString() == #"{"m":{"k1":{},"k2":null},"z":[3,1,2,{"x":false,"y":true}]}"#)
    }

    @Test(
        "literals and empty containers",
        arguments: [
            (JSONValue.null, "null"), (.bool(true), "true"), (.bool(false), "false"), (.array([]), "[]"),
            (.object([:]), "{}"), (.string(""), #""""#), (.number(JSONNumber(-42)), "-42"),
        ])
    func literals(value: JSONValue, text: String) {
        #expect(value.canonicalString() == text)
        #expect(value.canonicalBytes() == Array(text.utf8))
    }

    @Test("only quote, backslash and control characters are escaped")
    func escapes() {
        let s = "q\"b\\s/n\nr\rt\tb\u{8}f\u{C}x\u{1}y\u{1F}d\u{7F}\u{E9}\u{2028}\u{1F600}"
        var expected = Array(#""q\"b\\s/n\nr\rt\tb\u0008f\u000cx\u0001y\u001fd"#.utf8)
        expected += [0x7F] + Array("\u{E9}\u{2028}\u{1F600}".utf8) + [0x22]
        #expect(JSONValue.string(s).canonicalBytes() == expected)
    }

    @Test("every control character gets an escape the parser reads back")
    func controlCharacters() throws {
        for scalar in 1..<0x20 {
            let s = String(Character(Unicode.Scalar(UInt8(scalar))))
            let bytes = JSONValue.string(s).canonicalBytes()
            #expect(!bytes.dropFirst().dropLast().contains { $0 < 0x20 }, "raw control byte for \(scalar)")
            #expect(try JSONParser.parse(bytes) == .string(s))
        }
    }

    @Test("non-ASCII text is written raw, never normalised")
    func nonASCIIRaw() {
        // Decomposed "é" stays decomposed: the hash is over bytes, not over Unicode equivalence.
        #expect(JSONValue.string("e\u{301}").canonicalBytes() == [0x22, 0x65, 0xCC, 0x81, 0x22])
        #expect(JSONValue.string("\u{E9}").canonicalBytes() == [0x22, 0xC3, 0xA9, 0x22])
        #expect(JSONValue.string("日本").canonicalString() == "\"日本\"")
    }

    static let documents = [
        #"{"b": [1.0, 2e0, -0], "a": {"y": null, "x": "\u00e9"}}"#,
        #"[]"#,
        #"[[[[]]], {}, "", 0]"#,
        #"{"s": "\"\\\/\b\f\n\r\t\u0001\u001f", "emoji": "\ud83d\ude00", "raw": "😀 é ｡"}"#,
        #"{"numbers": [0.001, 1e-3, 123.4500, 1E+2, 12345678901234567890.5, -7]}"#,
        #"{"subscriber_id": "alice", "data": {"entitlements": ["pro", "plus"], "price_minor": 999}}"#,
        #""just a string""#,
        "true",
        "  42  ",
    ]

    @Test("parse → write → parse is the identity, and writing is idempotent", arguments: documents)
    func roundTrip(text: String) throws {
        let value = try JSONParser.parse(text)
        let canonical = value.canonicalBytes()
        let reparsed = try JSONParser.parse(canonical)
        #expect(reparsed == value)
        #expect(reparsed.canonicalBytes() == canonical)
        #expect(value.canonicalString() == String(decoding: canonical, as: UTF8.self))
        // No insignificant whitespace survives (the documents have none inside strings).
        if !text.contains("\"") {
            #expect(!canonical.contains(0x20))
        }
    }

    @Test(
        "differently formatted equal documents have the same canonical bytes",
        arguments: [
            (#"{"b": [1.0, 2e0], "a": {"y": null, "x": "\u00e9"}}"#, #"{"a":{"x":"é","y":null},"b":[1,2]}"#),
            (#"{ "a" : "\/" }"#, #"{"a":"/"}"#),
            (#"["\u0041\u0062"]"#, #"["Ab"]"#),
            ("[1.50, 15e-1, 0.15E1]", "[1.5,1.5,1.5]"),
            ("{\n\t\"price_minor\": 9.99e2,\r\n\t\"currency\": \"USD\"\n}", #"{"currency":"USD","price_minor":999}"#),
            (#"{"k":"\ud83d\ude00"}"#, #"{"k":"😀"}"#),
            ("[-0, 0.0, 0e5]", "[0,0,0]"),
        ])
    func equalDocuments(a: String, b: String) throws {
        let va = try JSONParser.parse(a)
        let vb = try JSONParser.parse(b)
        #expect(va == vb)
        #expect(va.canonicalBytes() == vb.canonicalBytes())
        #expect(vb.canonicalString() == b)
    }

    @Test(
        "different documents have different canonical bytes",
        arguments: [
            ("[1,2]", "[2,1]"), (#"{"a":1}"#, #"{"a":"1"}"#), ("1.5", "1.50001"), (#"{"a":null}"#, "{}"),
            (#"{"a":true}"#, #"{"a":"true"}"#), (#""a""#, #""A""#), ("[[]]", "[{}]"), (#"{"a":{"b":1}}"#, #"{"a.b":1}"#),
        ])
    func differentDocuments(a: String, b: String) throws {
        let va = try JSONParser.parse(a)
        let vb = try JSONParser.parse(b)
        #expect(va != vb)
        #expect(va.canonicalBytes() != vb.canonicalBytes())
    }

    @Test("write(into:) appends to what is already there")
    func writeInto() {
        var out = Array("prefix:".utf8)
        JSONValue.array([1, "x"]).write(into: &out)
        #expect(String(decoding: out, as: UTF8.self) == #"prefix:[1,"x"]"#)
    }

    @Test(
        "type names for error messages",
        arguments: [
            (JSONValue.null, "null"), (.bool(false), "boolean"), (.number(JSONNumber(1)), "number"), (.string(""), "string"),
            (.array([]), "array"), (.object([:]), "object"),
        ])
    func typeNames(value: JSONValue, name: String) {
        #expect(value.typeName == name)
    }

    @Test("accessors answer only for their own case")
    func accessors() {
        let s: JSONValue = "x"
        #expect(s.stringValue == "x" && s.numberValue == nil && s.objectValue == nil)
        let n: JSONValue = 3
        #expect(n.numberValue == JSONNumber(3) && n.stringValue == nil && n.boolValue == nil)
        let a: JSONValue = [1]
        #expect(a.arrayValue == [1] && a.objectValue == nil)
        let o: JSONValue = ["k": 1]
        #expect(o.objectValue == ["k": 1] && o.arrayValue == nil)
        let b: JSONValue = true
        #expect(b.boolValue == true && b.stringValue == nil)
    }
}
