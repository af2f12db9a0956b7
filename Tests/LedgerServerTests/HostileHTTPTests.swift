import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import NIOCore
import Testing

@Suite("Hostile bodies to every write route")
struct HostileHTTPTests {
    @Test("garbage, 10 MB, deep nesting, invalid UTF-8, huge numbers: a clear 4xx, the server stays up, nothing stored")
    func hostileBodies() async throws {
        try await APIHarness.run(maxBodyBytes: 8 * 1024 * 1024) { http, api in
            let bodies: [(String, ByteBuffer)] = [
                ("empty", ByteBuffer()),
                ("garbage", ByteBuffer(string: "\u{1}\u{2}not json")),
                ("10 MB", ByteBuffer(repeating: UInt8(ascii: "a"), count: 10 * 1024 * 1024)),
                ("deep", ByteBuffer(string: String(repeating: "[", count: 50_000))),
                ("invalid UTF-8", ByteBuffer(bytes: [0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x3A, 0x31, 0x7D])),
                ("huge number", ByteBuffer(string: #"{"subscriber_id":"a","expected_version":1e999999}"#)),
                ("NaN", ByteBuffer(string: #"{"signedPayload": NaN, "subscriber_id": "x", "status": NaN}"#)),
                ("wrong types", ByteBuffer(string: #"{"signedPayload": 5, "subscriber_id": ["x"], "status": "0", "events": {}}"#)),
                (
                    "garbage JWS",
                    ByteBuffer(
                        string: #"{"signedPayload": "eyJhbGciOiJub25lIn0.e30.", "subscriber_id": "x", "status": 0, "latest_receipt_info": "x"}"#)
                ),
                (
                    "far dates",
                    ByteBuffer(
                        string:
                            #"{"subscriber_id":"x","status":0,"latest_receipt_info":[{"transaction_id":"1","original_transaction_id":"1","product_id":"p","purchase_date_ms":"99999999999999999"}]}"#
                    )
                ),
            ]
            for path in ["/v1/events", "/v1/stores/apple/notifications", "/v1/stores/apple/receipts", "/v1/catalog/products/p"] {
                for (name, requestBody) in bodies {
                    let method: HTTPRequest.Method = path.hasPrefix("/v1/catalog") ? .put : .post
                    let role: APIRole = path.hasPrefix("/v1/catalog") ? .admin : .writer
                    let r = try await http.execute(uri: path, method: method, headers: api.headers(role), body: requestBody)
                    #expect((400..<500).contains(r.status.code), "\(path) \(name): \(r.status)")
                    #expect(r.errorCode != nil, "\(path) \(name)")
                }
            }
            #expect(try await http.execute(uri: "/health", method: .get).status == .ok)
            #expect(try await http.execute(uri: "/v1/events", method: .get, headers: api.headers(.auditor)).events.isEmpty)
            let products = try await http.execute(uri: "/v1/catalog/products", method: .get, headers: api.headers(.admin))
            #expect(try products.json.objectValue?["products"] == [])
        }
    }
}
