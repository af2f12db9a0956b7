import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import NIOCore
import Testing

@Suite("Authentication, roles and operations routes")
struct AuthAndOperationsTests {
    @Test("every /v1 route needs a valid key (401) and the right role (403)")
    func rolesPerRoute() async throws {
        try await APIHarness.run { http, api in
            let routes: [(HTTPRequest.Method, String, APIRole.Permission)] = [
                (.post, "/v1/events", .append),
                (.get, "/v1/events", .audit),
                (.get, "/v1/subscribers/s1/events", .audit),
            ]
            for (method, uri, permission) in routes {
                let requestBody = method == .post ? body(.object(eventJSON(key: "\(uri)"))) : ByteBuffer()
                let anonymous = try await http.execute(uri: uri, method: method, headers: api.headers(nil), body: requestBody)
                #expect(anonymous.status == .unauthorized, "\(uri)")
                #expect(anonymous.errorCode == "unauthorized")
                #expect(anonymous.headers[.wwwAuthenticate] == "Bearer")

                var wrong = api.headers(nil)
                wrong[.authorization] = "Bearer slk_" + String(repeating: "0", count: 64)
                let unknown = try await http.execute(uri: uri, method: method, headers: wrong, body: requestBody)
                #expect(unknown.status == .unauthorized, "\(uri)")

                var basic = api.headers(nil)
                basic[.authorization] = "Basic dXNlcjpwYXNz"
                #expect(try await http.execute(uri: uri, method: method, headers: basic, body: requestBody).status == .unauthorized)

                for role in APIRole.allCases {
                    let response = try await http.execute(uri: uri, method: method, headers: api.headers(role), body: requestBody)
                    if role.allows(permission) {
                        #expect(response.status.code < 300, "\(role) \(method) \(uri): \(response.status)")
                    } else {
                        #expect(response.status == .forbidden, "\(role) \(method) \(uri)")
                        #expect(response.errorCode == "forbidden")
                    }
                }
            }
        }
    }

    @Test("health, readiness and the JSON 404")
    func operations() async throws {
        try await APIHarness.run { http, _ in
            #expect(try await http.execute(uri: "/health", method: .get).status == .ok)
            let ready = try await http.execute(uri: "/ready", method: .get)
            #expect(ready.status == .ok)
            #expect(try ready.json.objectValue?["schema"] == "current")
            let missing = try await http.execute(uri: "/v2/nothing", method: .get)
            #expect(missing.status == .notFound)
            #expect(missing.errorCode == "not_found")
            #expect(try await http.execute(uri: "/metrics", method: .get).status == .ok)
        }
    }
}
