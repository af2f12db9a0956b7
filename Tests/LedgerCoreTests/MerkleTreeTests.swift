import Crypto
import LedgerCore
import Testing

@Suite("Merkle tree (RFC 6962)")
struct MerkleTreeTests {
    func h(_ parts: [UInt8]...) -> [UInt8] { Array(SHA256.hash(data: parts.flatMap { $0 })) }

    @Test("shapes: empty, one, two, three leaves")
    func shapes() {
        let a: [UInt8] = [1]
        let b: [UInt8] = [2]
        let c: [UInt8] = [3]
        #expect(MerkleTree.root([]) == h([]))
        #expect(MerkleTree.root([a]) == h([0], a))
        #expect(MerkleTree.root([a, b]) == h([1], h([0], a), h([0], b)))
        #expect(MerkleTree.root([a, b, c]) == h([1], h([1], h([0], a), h([0], b)), h([0], c)))
    }

    @Test("any change to any head changes the root")
    func sensitivity() {
        let heads = (0..<9).map {
            MerkleTree.streamHeadLeaf(subscriberID: "s\($0)", version: Int64($0), hash: Array(repeating: UInt8($0), count: 32))
        }
        let root = MerkleTree.root(heads)
        for i in heads.indices {
            var changed = heads
            changed[i][changed[i].count - 1] ^= 1
            #expect(MerkleTree.root(changed) != root)
        }
        #expect(MerkleTree.root(heads.reversed()) != root)
        #expect(MerkleTree.streamHeadLeaf(subscriberID: "a", version: 258, hash: []) == [0x61, 0, 0, 0, 0, 0, 0, 0, 1, 2])
    }
}
