import Foundation

/// Base64url without padding (RFC 7515), as JWS, JWT and the stores' tokens spell their parts.
public enum Base64URL {
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Decodes base64url (the standard alphabet's `+` and `/` too), with or without its `=` padding; nil for
    /// anything else. Byte by byte: every App Store notification decodes three JWS of several KiB, and going
    /// through Foundation's string replacement cost a quarter of the server's CPU per notification.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        // On contiguous bytes: a generic walk of `utf8` from another module is a witness call per byte.
        if let decoded = text.utf8.withContiguousStorageIfAvailable({ decode(bytes: $0) }) { return decoded }
        var copy = String(text)
        return copy.withUTF8 { decode(bytes: $0) }
    }

    private static func decode(bytes utf8: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 4 * 3 + 2)
        var quartet: UInt32 = 0
        var digits = 0
        var padding = 0
        for c in utf8 {
            if c == UInt8(ascii: "=") {
                padding += 1
                continue
            }
            guard padding == 0, let v = value(c) else { return nil }
            quartet = quartet << 6 | UInt32(v)
            digits += 1
            if digits == 4 {
                out.append(UInt8(truncatingIfNeeded: quartet >> 16))
                out.append(UInt8(truncatingIfNeeded: quartet >> 8))
                out.append(UInt8(truncatingIfNeeded: quartet))
                quartet = 0
                digits = 0
            }
        }
        guard padding == 0 || (padding <= 2 && digits + padding == 4) else { return nil }
        switch digits {
        case 0: break
        case 2: out.append(UInt8(truncatingIfNeeded: quartet >> 4))
        case 3:
            out.append(UInt8(truncatingIfNeeded: quartet >> 10))
            out.append(UInt8(truncatingIfNeeded: quartet >> 2))
        default: return nil
        }
        return out
    }

    private static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): c - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): c - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"), UInt8(ascii: "+"): 62
        case UInt8(ascii: "_"), UInt8(ascii: "/"): 63
        default: nil
        }
    }
}
