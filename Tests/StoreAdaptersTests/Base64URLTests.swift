import Foundation
import StoreAdapters
import Testing

@Suite("Base64url")
struct Base64URLTests {
    @Test("decodes what Foundation encodes, in either alphabet, padded or not; refuses what is not base64")
    func decode() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let standard = Data(bytes).base64EncodedString()
            let url = Base64URL.encode(bytes)
            #expect(Base64URL.decode(url) == bytes)
            #expect(Base64URL.decode(standard) == bytes, "padded, standard alphabet")
            #expect(Base64URL.decode(url + String(repeating: "=", count: (4 - url.count % 4) % 4)) == bytes, "padded")
        }
        for bad in ["a", "ab=c", "abc==", "ab===", "a b", "ab.c", "é", "abcd=", "===="] {
            #expect(Base64URL.decode(bad) == nil, "\(bad)")
        }
        #expect(Base64URL.decode("") == [])
    }
}
