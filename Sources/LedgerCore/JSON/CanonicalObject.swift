/// Writes a canonical JSON object whose keys the caller gives already in canonical (UTF-8 byte) order.
///
/// For fixed shapes on hot paths (event envelopes): the same bytes as `JSONValue.object(...).canonicalBytes()`
/// without building and sorting a dictionary. The caller owns the order; tests compare both paths.
struct CanonicalObject {
    private var out: [UInt8] = [UInt8(ascii: "{")]
    private var empty = true

    init() { out.reserveCapacity(512) }

    private mutating func key(_ key: StaticString) {
        if !empty { out.append(UInt8(ascii: ",")) }
        empty = false
        out.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { out.append(contentsOf: $0) }
        out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
    }

    mutating func member(_ name: StaticString, _ value: JSONValue) {
        key(name)
        value.write(into: &out)
    }

    mutating func member(_ name: StaticString, string value: String) {
        key(name)
        JSONValue.writeString(value, into: &out)
    }

    mutating func member(_ name: StaticString, integer value: Int64) {
        key(name)
        out.append(contentsOf: String(value).utf8)
    }

    mutating func finish() -> [UInt8] {
        out.append(UInt8(ascii: "}"))
        return out
    }
}
