import Crypto

/// A Merkle tree hash over stream heads, as RFC 6962 defines it (certificate transparency): leaves are
/// hashed with a 0x00 prefix, inner nodes with 0x01, and a tree of n leaves splits at the largest power of
/// two below n. An auditor can recompute it from the heads with any SHA-256 tool.
public enum MerkleTree {
    public static func root(_ leaves: [[UInt8]]) -> [UInt8] {
        guard !leaves.isEmpty else { return Array(SHA256.hash(data: [UInt8]())) }
        return node(leaves.map(leafHash)[...])
    }

    /// The leaf of one stream head: `subscriber_id ‖ 0x00 ‖ version (8 bytes, big-endian) ‖ head hash`.
    public static func streamHeadLeaf(subscriberID: String, version: Int64, hash: [UInt8]) -> [UInt8] {
        var bytes = Array(subscriberID.utf8)
        bytes.append(0)
        withUnsafeBytes(of: version.bigEndian) { bytes.append(contentsOf: $0) }
        bytes += hash
        return bytes
    }

    static func leafHash(_ data: [UInt8]) -> [UInt8] {
        var h = SHA256()
        h.update(data: [0x00])
        h.update(data: data)
        return Array(h.finalize())
    }

    private static func node(_ hashes: ArraySlice<[UInt8]>) -> [UInt8] {
        if hashes.count == 1 { return hashes.first! }
        var split = 1
        while split * 2 < hashes.count { split *= 2 }
        var h = SHA256()
        h.update(data: [0x01])
        h.update(data: node(hashes.prefix(split)))
        h.update(data: node(hashes.dropFirst(split)))
        return Array(h.finalize())
    }
}
