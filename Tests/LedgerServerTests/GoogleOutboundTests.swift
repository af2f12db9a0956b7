import AsyncHTTPClient
import Foundation
import GoogleStore
import LedgerCore
import LedgerTestSupport
import StoreAdapters
import Testing

/// The Google clients against a hostile or broken Google (the stand-in of GoogleStoreAPITests, no ledger):
/// what they log and keep, and how often they ask.
@Suite("Google outbound calls")
struct GoogleOutboundTests {
    static let secret = "SECRET-4711-do-not-log"

    @Test("an access token that cannot be a header is never logged nor kept; the next call asks for a new one")
    func unusableAccessToken() async throws {
        let google = try GooglePlayStandIn()
        google.state.withLock { $0.issuedToken = "ya29.\(Self.secret)\r\nX-Injected: 1" }
        let recorder = LogRecorder()
        try await google.serve { port in
            let api = GooglePlayAPI(
                baseURL: "http://127.0.0.1:\(port)", account: try GoogleServiceAccount(json: google.serviceAccountJSON(port: port)),
                http: .shared, logger: recorder.logger(), backoff: [.milliseconds(10), .milliseconds(10)])
            var errors: [String] = []
            for _ in 0..<2 {
                do {
                    _ = try await api.subscription(package: GooglePlayStandIn.package, token: "tok-1")
                    Issue.record("a call with an unusable access token succeeded")
                } catch {
                    errors.append("\(error)")
                }
            }
            #expect(errors.count == 2)
            #expect(errors.allSatisfy { !$0.contains(Self.secret) && $0.contains("not a valid bearer token") })
            #expect(!recorder.all.contains { $0.contains(Self.secret) })
            // Not kept: each call asked the token endpoint again, and Google's API was never called with it.
            #expect(google.state.withLock { $0.tokenRequests } == 2)
            #expect(google.state.withLock { $0.apiCalls } == 0)

            // A good token later is used at once.
            google.state.withLock { $0.issuedToken = nil }
            google.set("tok-1", GoogleStoreAPITests.purchase(order: "GPA.1", expiry: "2026-04-01T10:00:00Z"))
            _ = try await api.subscription(package: GooglePlayStandIn.package, token: "tok-1")
            #expect(google.state.withLock { $0.tokenRequests } == 3)
        }
    }

    @Test("bearer tokens: RFC 6750's b64token, bounded")
    func bearerTokenSyntax() {
        for good in ["ya29.a0AfH6SMB-x_y~z+w/v", "abc==", String(repeating: "a", count: OutboundHTTP.maxBearerTokenBytes)] {
            #expect(OutboundHTTP.isBearerToken(good), "\(good.prefix(40))")
        }
        for bad in [
            "", "a\r\nb", "a b", "a\tb", "ab=c", "=", "tök", "a\u{0}", "a,b", "a\"b",
            String(repeating: "a", count: OutboundHTTP.maxBearerTokenBytes + 1),
        ] {
            #expect(!OutboundHTTP.isBearerToken(bad), "\(bad.debugDescription.prefix(40))")
        }
    }

    @Test("before the first good JWKS fetch, 60 concurrent verifications make one fetch; after a failure none for a back-off")
    func jwksThrottle() async throws {
        let google = try GooglePlayStandIn()
        google.state.withLock { $0.jwksDown = true }
        try await google.serve { port in
            let keys = GoogleKeySource(
                location: "http://127.0.0.1:\(port)/certs", http: .shared, logger: LogRecorder().logger(), firstRetry: .seconds(3),
                maxRetry: .seconds(6))
            func burst() async -> Int {
                await withTaskGroup(of: Bool.self) { group in
                    for _ in 0..<60 { group.addTask { (try? await keys.keys(for: "oidc-1")) == nil } }
                    return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
                }
            }
            #expect(await burst() == 60)
            #expect(google.state.withLock { $0.jwksRequests } == 1)
            // During the back-off the same failure, without a fetch and without waiting for the back-off (3 s: long
            // enough that a loaded machine is still inside it; the bound is well under it).
            let started = ContinuousClock.now
            #expect(await burst() == 60)
            #expect(ContinuousClock.now - started < .seconds(2))
            #expect(google.state.withLock { $0.jwksRequests } == 1)

            // Once the back-off has passed, one fetch again; the keys are then kept.
            google.state.withLock { $0.jwksDown = false }
            try await Task.sleep(until: started.advanced(by: .milliseconds(3100)), clock: .continuous)
            #expect(await burst() == 0)
            #expect(google.state.withLock { $0.jwksRequests } == 2)
            #expect(try await keys.keys(for: "oidc-1").keys["oidc-1"] != nil)
            // An unknown key id refreshes at most every 30 s: no fetch now.
            _ = try await keys.keys(for: "unknown")
            #expect(google.state.withLock { $0.jwksRequests } == 2)
        }
    }
}
