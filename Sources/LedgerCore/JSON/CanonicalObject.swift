/// Writes a canonical JSON object whose keys the caller gives already in canonical (UTF-8 byte) order.
///
/// For fixed shapes on hot paths (event envelopes, entitlement reads): the same bytes as
/// `JSONValue.object(...).canonicalBytes()` without building and sorting a dictionary. The caller owns the
/// order; tests compare both paths.
public struct CanonicalObject {
    private var out: [UInt8] = [UInt8(ascii: "{")]
    private var empty = true

    public init(capacity: Int = 512) { out.reserveCapacity(capacity) }

    private mutating func key(_ key: StaticString) {
        if !empty { out.append(UInt8(ascii: ",")) }
        empty = false
        out.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { out.append(contentsOf: $0) }
        out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
    }

    public mutating func member(_ name: StaticString, _ value: JSONValue) {
        key(name)
        value.write(into: &out)
    }

    /// A value the caller has already written as canonical JSON.
    public mutating func member(_ name: StaticString, canonical bytes: [UInt8]) {
        key(name)
        out.append(contentsOf: bytes)
    }

    public mutating func member(_ name: StaticString, string value: String) {
        key(name)
        JSONValue.writeString(value, into: &out)
    }

    /// A string, or `null` when nil.
    public mutating func member(_ name: StaticString, string value: String?) {
        key(name)
        if let value { JSONValue.writeString(value, into: &out) } else { out.append(contentsOf: "null".utf8) }
    }

    public mutating func member(_ name: StaticString, bool value: Bool) {
        key(name)
        out.append(contentsOf: (value ? "true" : "false").utf8)
    }

    public mutating func member(_ name: StaticString, integer value: Int64) {
        key(name)
        out.append(contentsOf: String(value).utf8)
    }

    /// An array of objects, each written by `body` into a nested writer that shares this one's buffer.
    public mutating func member<S: Sequence>(
        _ name: StaticString, objects items: S, _ body: (S.Element, inout CanonicalObject) -> Void
    ) {
        key(name)
        out.append(UInt8(ascii: "["))
        var first = true
        for item in items {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            // The buffer moves into the nested writer and back, never copied (a copy per item made a
            // thousand-event answer quadratic).
            var nested = CanonicalObject(taking: &out)
            body(item, &nested)
            nested.out.append(UInt8(ascii: "}"))
            swap(&out, &nested.out)
        }
        out.append(UInt8(ascii: "]"))
    }

    private init(taking buffer: inout [UInt8]) {
        out = []
        swap(&out, &buffer)
        out.append(UInt8(ascii: "{"))
    }

    public mutating func finish() -> [UInt8] {
        out.append(UInt8(ascii: "}"))
        return out
    }
}
