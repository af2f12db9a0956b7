import Hummingbird
import NIOCore

/// RFC 4180 lines for every CSV the service writes (exports and reports), with formula injection
/// neutralised the way OWASP recommends: a cell that a spreadsheet would evaluate (it starts with `=`, `+`,
/// `-`, `@`, a tab or a carriage return) is written with a leading `'`, unless it is a plain decimal number
/// (`-12`, `0.5`), which a spreadsheet reads as the number it is. JSON responses stay verbatim.
enum CSV {
    static func line(_ fields: [String]) -> ByteBuffer {
        var out = ByteBuffer()
        out.reserveCapacity(fields.reduce(2) { $0 + $1.utf8.count + 4 })
        for (i, f) in fields.enumerated() {
            if i > 0 { out.writeInteger(UInt8(ascii: ",")) }
            let guarded = needsGuard(f)
            // Byte checks: all the specials are ASCII, so no grapheme breaking is needed.
            if f.utf8.contains(where: { $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") || $0 == 0x0A || $0 == 0x0D }) {
                out.writeInteger(UInt8(ascii: "\""))
                if guarded { out.writeInteger(UInt8(ascii: "'")) }
                for b in f.utf8 {
                    if b == UInt8(ascii: "\"") { out.writeInteger(b) }
                    out.writeInteger(b)
                }
                out.writeInteger(UInt8(ascii: "\""))
            } else {
                if guarded { out.writeInteger(UInt8(ascii: "'")) }
                out.writeString(f)
            }
        }
        out.writeStaticString("\r\n")
        return out
    }

    /// Whether a spreadsheet could read `field` as a formula.
    static func needsGuard(_ field: String) -> Bool {
        guard let first = field.utf8.first else { return false }
        switch first {
        case UInt8(ascii: "="), UInt8(ascii: "@"), 0x09, 0x0D: return true
        case UInt8(ascii: "+"), UInt8(ascii: "-"): return !isPlainNumber(field)
        default: return false
        }
    }

    /// `-?[0-9]+(\.[0-9]+)?`
    static func isPlainNumber(_ field: String) -> Bool {
        var bytes = field.utf8[...]
        if bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
        let whole = bytes.prefix { $0 >= 0x30 && $0 <= 0x39 }
        guard !whole.isEmpty else { return false }
        bytes = bytes.dropFirst(whole.count)
        if bytes.isEmpty { return true }
        guard bytes.first == UInt8(ascii: ".") else { return false }
        let fraction = bytes.dropFirst()
        return !fraction.isEmpty && fraction.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }

    static func headers(filename: String) -> HTTPFields {
        [.contentType: "text/csv; charset=utf-8", .contentDisposition: "attachment; filename=\"\(filename)\""]
    }
}
