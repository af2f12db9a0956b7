/// An exact decimal number from JSON text, kept in one canonical spelling.
///
/// `1.50`, `1.5` and `15e-1` are the same number and render as `1.5`; PostgreSQL's `numeric` (inside
/// `jsonb`) keeps the value exactly, so the canonical text is stable across storage.
public struct JSONNumber: Sendable, Hashable, CustomStringConvertible {
    /// Digits and exponents beyond this are refused: nothing in a ledger needs them and they would make
    /// canonical text (and PostgreSQL's `numeric`) arbitrarily large.
    public static let maxMagnitude = 1000

    /// Canonical decimal text: no exponent, no leading zeros, no trailing fractional zeros, `-0` is `0`.
    public let canonical: String

    public init(_ value: Int64) {
        self.canonical = String(value)
    }

    /// Report sums are 128-bit; JSON numbers have no width, so they are written exactly.
    public init(wide value: Int128) {
        self.canonical = String(value)
    }

    /// Parses JSON number text (RFC 8259 grammar); nil if it is not one or is out of range.
    public init?(jsonText text: Substring) {
        var bytes = Array(text.utf8)[...]
        var negative = false
        if bytes.first == UInt8(ascii: "-") {
            negative = true
            bytes = bytes.dropFirst()
        }
        let intPart = bytes.prefix(while: Self.isDigit)
        guard !intPart.isEmpty, intPart.count == 1 || intPart.first != UInt8(ascii: "0") else { return nil }
        bytes = bytes.dropFirst(intPart.count)
        var fracPart: ArraySlice<UInt8> = []
        if bytes.first == UInt8(ascii: ".") {
            bytes = bytes.dropFirst()
            fracPart = bytes.prefix(while: Self.isDigit)
            guard !fracPart.isEmpty else { return nil }
            bytes = bytes.dropFirst(fracPart.count)
        }
        var exponent = 0
        if let e = bytes.first, e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
            bytes = bytes.dropFirst()
            var expNegative = false
            if let s = bytes.first, s == UInt8(ascii: "+") || s == UInt8(ascii: "-") {
                expNegative = s == UInt8(ascii: "-")
                bytes = bytes.dropFirst()
            }
            let expDigits = bytes.prefix(while: Self.isDigit)
            guard !expDigits.isEmpty else { return nil }
            bytes = bytes.dropFirst(expDigits.count)
            let significant = expDigits.drop(while: { $0 == UInt8(ascii: "0") })
            guard significant.count <= 6 else { return nil }
            for d in significant { exponent = exponent * 10 + Int(d - UInt8(ascii: "0")) }
            if expNegative { exponent = -exponent }
        }
        guard bytes.isEmpty else { return nil }

        var digits = Array(intPart) + Array(fracPart)
        exponent -= fracPart.count
        let leading = digits.prefix(while: { $0 == UInt8(ascii: "0") }).count
        digits.removeFirst(leading)
        while let last = digits.last, last == UInt8(ascii: "0") {
            digits.removeLast()
            exponent += 1
        }
        guard !digits.isEmpty else {
            self.canonical = "0"
            return
        }
        let pointPosition = digits.count + exponent
        guard digits.count <= Self.maxMagnitude, abs(pointPosition) <= Self.maxMagnitude,
            abs(exponent) <= 2 * Self.maxMagnitude
        else { return nil }

        var out: [UInt8] = negative ? [UInt8(ascii: "-")] : []
        if exponent >= 0 {
            out += digits
            out += repeatElement(UInt8(ascii: "0"), count: exponent)
        } else if pointPosition > 0 {
            out += digits[..<pointPosition]
            out.append(UInt8(ascii: "."))
            out += digits[pointPosition...]
        } else {
            out += [UInt8(ascii: "0"), UInt8(ascii: ".")]
            out += repeatElement(UInt8(ascii: "0"), count: -pointPosition)
            out += digits
        }
        self.canonical = String(decoding: out, as: UTF8.self)
    }

    /// The value as an integer, if it is one and fits.
    public var int64Value: Int64? { Int64(canonical) }

    public var description: String { canonical }

    private static func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }
}
