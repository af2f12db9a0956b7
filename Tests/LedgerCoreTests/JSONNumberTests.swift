import LedgerCore
import Testing

@Suite("JSON numbers")
struct JSONNumberTests {
    @Test(
        "canonical spelling",
        arguments: [
            ("0", "0"), ("-0", "0"), ("-0.0", "0"), ("0.000", "0"), ("0e10", "0"), ("-0E-3", "0"),
            ("1", "1"), ("-1", "-1"), ("100", "100"), ("1.50", "1.5"), ("1.0", "1"), ("1e3", "1000"), ("1E3", "1000"),
            ("1e+3", "1000"), ("15e-1", "1.5"), ("0.001", "0.001"), ("1e-3", "0.001"), ("25e-3", "0.025"),
            ("5e-1", "0.5"), ("-1.230e1", "-12.3"), ("120e-1", "12"), ("123.456e2", "12345.6"), ("0.5e1", "5"),
            ("1e0", "1"), ("1e-0", "1"), ("1e007", "10000000"), ("1e0000000003", "1000"), ("-9.99", "-9.99"),
            ("999", "999"), ("9.99e2", "999"), ("0.30", "0.3"), ("10.010", "10.01"),
            ("12345678901234567890123", "12345678901234567890123"),
            ("-0.00000000000000000001", "-0.00000000000000000001"),
        ])
    func canonical(text: String, canonical: String) throws {
        let n = try #require(JSONNumber(jsonText: Substring(text)))
        #expect(n.canonical == canonical)
        #expect(n.description == canonical)
        // Canonical text is itself a JSON number with the same canonical text.
        #expect(JSONNumber(jsonText: Substring(canonical))?.canonical == canonical)
    }

    @Test(
        "not RFC 8259 numbers, or out of range",
        arguments: [
            "", " 1", "1 ", "01", "00", "-01", "1.", ".5", "+1", "-", "--1", "1e", "1e+", "1e-", "1.e3", "1..2", "1e1.5",
            "1e1e1", "0x1", "1_000", "Infinity", "-Infinity", "NaN", "١", "1e100000", "1e-100000", "1e1000000",
            "1e999999999", "1e1000", "1e-1002",
        ])
    func rejected(text: String) {
        #expect(JSONNumber(jsonText: Substring(text)) == nil, "accepted \(text.debugDescription)")
    }

    @Test("magnitude limits: at most 1000 digits and the point at most 1000 places away")
    func magnitudeLimits() throws {
        #expect(JSONNumber.maxMagnitude == 1000)
        let big = try #require(JSONNumber(jsonText: "1e999"))
        #expect(big.canonical == "1" + String(repeating: "0", count: 999))
        #expect(JSONNumber(jsonText: "1e1000") == nil)

        let small = try #require(JSONNumber(jsonText: "1e-1000"))
        #expect(small.canonical == "0." + String(repeating: "0", count: 999) + "1")
        #expect(JSONNumber(jsonText: "1e-1001") != nil)
        #expect(JSONNumber(jsonText: "1e-1002") == nil)

        let manyDigits = "0." + String(repeating: "7", count: 1000)
        #expect(JSONNumber(jsonText: Substring(manyDigits))?.canonical == manyDigits)
        #expect(JSONNumber(jsonText: Substring("0." + String(repeating: "7", count: 1001))) == nil)

        // Insignificant zeros do not count towards the limit.
        let padded = "1." + String(repeating: "0", count: 5000)
        #expect(JSONNumber(jsonText: Substring(padded))?.canonical == "1")
    }

    @Test("equal values compare equal whatever their spelling")
    func equality() throws {
        let a = try #require(JSONNumber(jsonText: "1.50"))
        let b = try #require(JSONNumber(jsonText: "15e-1"))
        let c = try #require(JSONNumber(jsonText: "1.5"))
        #expect(a == b && b == c)
        #expect(a.hashValue == b.hashValue)
        #expect(JSONNumber(jsonText: "1.5") != JSONNumber(jsonText: "1.51"))
        #expect(JSONNumber(jsonText: "-0") == JSONNumber(0))
        #expect(JSONNumber(jsonText: "1e2") == JSONNumber(100))
    }

    @Test("integers from Int64", arguments: [Int64.min, -1, 0, 1, 999, Int64.max])
    func fromInt64(value: Int64) {
        let n = JSONNumber(value)
        #expect(n.canonical == String(value))
        #expect(n.int64Value == value)
        #expect(JSONNumber(jsonText: Substring(String(value))) == n)
    }

    @Test(
        "int64Value only for integers that fit",
        arguments: [
            ("9223372036854775807", Int64.max), ("-9223372036854775808", Int64.min), ("1e2", 100), ("1.0", 1),
            ("-0", 0), ("1000e-3", Int64(1)),
        ] as [(String, Int64)])
    func int64Values(text: String, value: Int64) throws {
        #expect(try #require(JSONNumber(jsonText: Substring(text))).int64Value == value)
    }

    @Test(
        "int64Value is nil for fractions and overflows",
        arguments: [
            "9223372036854775808", "-9223372036854775809", "1.5", "0.001", "1e30",
        ])
    func int64ValueNil(text: String) throws {
        #expect(try #require(JSONNumber(jsonText: Substring(text))).int64Value == nil)
    }

    @Test("the parser keeps numbers in canonical form")
    func throughParser() throws {
        let v = try JSONParser.parse("[1.50, 1e3, -0, 0.001, 15e-1, 100]")
        #expect(v.canonicalString() == "[1.5,1000,0,0.001,1.5,100]")
    }
}
