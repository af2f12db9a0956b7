import Foundation

extension UUID {
    /// The canonical lower-case text form (`8-4-4-4-12` hex digits), as the ledger hashes, stores and shows
    /// event ids. Written directly: `lowercasedString` formats through `snprintf` and then copies.
    public var lowercasedString: String {
        let hex = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(36)
        withUnsafeBytes(of: uuid) { bytes in
            for (i, b) in bytes.enumerated() {
                if i == 4 || i == 6 || i == 8 || i == 10 { out.append(UInt8(ascii: "-")) }
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 0x0F)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
