import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import NIOCore
import PostgresNIO
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
                (.get, "/v1/subscribers/s1/entitlements", .readEntitlements),
                (.get, "/v1/subscribers/s1/windows", .readEntitlements),
                (.get, "/v1/subscribers/s1/entitlements?as_of=1", .audit),
                (.get, "/v1/subscribers/s1/windows?as_of=1", .audit),
                (.put, "/v1/catalog/products/p1", .manage),
                (.get, "/v1/catalog/products", .manage),
                (.get, "/v1/catalog/products/p1", .manage),
                (.post, "/v1/stores/apple/notifications", .append),
                (.post, "/v1/stores/apple/receipts", .append),
            ]
            for (method, uri, permission) in routes {
                let requestBody: ByteBuffer =
                    switch uri {
                    case "/v1/events": body(.object(eventJSON(key: "\(uri)")))
                    case "/v1/catalog/products/p1" where method == .put: body(EntitlementsAPITests.product)
                    default: method == .get ? ByteBuffer() : body("{}")
                    }
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
                        #expect(response.status != .unauthorized && response.status != .forbidden, "\(role) \(method) \(uri): \(response.status)")
                        #expect(response.status.code < 500, "\(role) \(method) \(uri): \(response.status)")
                    } else {
                        #expect(response.status == .forbidden, "\(role) \(method) \(uri)")
                        #expect(response.errorCode == "forbidden")
                    }
                }
            }
        }
    }

    @Test("a revoked key is refused like an unknown one once the key cache's TTL has passed")
    func revokedKey() async throws {
        try await Self.withKeyToRevoke(ttl: .milliseconds(300)) { http, headers, revoke in
            #expect(try await http.execute(uri: "/v1/events", method: .get, headers: headers).status == .ok)
            try await revoke()
            try await Task.sleep(for: .milliseconds(400))
            let after = try await http.execute(uri: "/v1/events", method: .get, headers: headers)
            #expect(after.status == .unauthorized)
            #expect(after.errorCode == "unauthorized")
        }
    }

    @Test("in the last quarter of its entry's life, a key is checked again by one request, before the entry expires")
    func keyCheckedAheadOfExpiry() async throws {
        // Long enough that a loaded machine (the test runs beside the whole suite) still sends the request of
        // 0.8 × TTL before the entry expires: with 4 s, 0.8 s of slack was sometimes not enough.
        let ttl = Duration.seconds(10)
        try await Self.withKeyToRevoke(ttl: ttl) { http, headers, revoke in
            let cached = ContinuousClock.now
            #expect(try await http.execute(uri: "/v1/events", method: .get, headers: headers).status == .ok)
            try await revoke()
            // Early in the entry's life the cached key answers (the documented bound is the TTL).
            #expect(try await http.execute(uri: "/v1/events", method: .get, headers: headers).status == .ok)
            try await Task.sleep(until: cached.advanced(by: ttl * 0.8), clock: .continuous)
            let early = try await http.execute(uri: "/v1/events", method: .get, headers: headers)
            #expect(ContinuousClock.now - cached < ttl, "the request came after the entry expired: the check was not early")
            #expect(early.status == .unauthorized)
        }
    }

    /// A server whose key cache keeps entries for `ttl`, the headers of an admin key, and a call that
    /// revokes that key in the database (as `subledger keys revoke` does from another process).
    private static func withKeyToRevoke(
        ttl: Duration, _ body: @escaping @Sendable (any TestClientProtocol, HTTPFields, @Sendable () async throws -> Void) async throws -> Void
    ) async throws {
        try await TestDatabase.withDatabase { url in
            let (key, secret) = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { owner in
                try await APIKeyStore(client: owner, logger: TestDatabase.logger).create(role: .admin, name: "to revoke")
            }
            let client = PostgresClient(configuration: url.clientConfiguration(role: "subledger_app"), backgroundLogger: TestDatabase.logger)
            let app = try buildApplication(
                configuration: ServerConfiguration(keyCacheTTL: ttl), client: client, schema: try TestDatabase.schema(),
                logger: TestDatabase.logger)
            try await app.test(.router) { http in
                try await body(http, [.authorization: "Bearer \(secret)"]) {
                    let revoked = try await TestDatabase.run(url.clientConfiguration(maximumConnections: 2)) { owner in
                        try await APIKeyStore(client: owner, logger: TestDatabase.logger).revoke(keyID: key.keyID)
                    }
                    #expect(revoked)
                }
            }
            return true
        }
    }

    @Test("a binary newer than the schema is not ready, and says what to run in the CLI's words")
    func readinessWithPendingMigration() async throws {
        try await TestDatabase.withDatabase { url in
            var schema = try TestDatabase.schema()
            schema.migrations.append(Migration(version: 9_999, name: "newer", sql: "SELECT 1"))
            let client = PostgresClient(configuration: url.clientConfiguration(role: "subledger_app"), backgroundLogger: TestDatabase.logger)
            let app = try buildApplication(
                configuration: ServerConfiguration(), client: client, schema: schema,
                logger: TestDatabase.logger)
            try await app.test(.router) { http in
                let ready = try await http.execute(uri: "/ready", method: .get)
                #expect(ready.status == .serviceUnavailable)
                #expect(try ready.json.objectValue?["status"] == "not_ready")
                #expect(try ready.json.objectValue?["schema"] == "1 migration(s) pending; run 'subledger migrate' first")
            }
            return true
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
