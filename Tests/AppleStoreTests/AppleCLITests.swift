import AppleStore
@preconcurrency import Crypto
import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

/// `subledger apple backfill` as a user runs it: the real binary, its flags and environment variables,
/// against the stand-in API and a test database.
@Suite("subledger apple commands, end to end")
struct AppleCLITests {
    typealias W = AppleWorld

    static var binary: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".build/debug/subledger")
    }

    /// Runs the binary with `arguments` and extra environment; returns its exit status and output.
    static func run(_ arguments: [String], environment: [String: String]) async throws -> (Int32, String) {
        try await runChildProcess(binary, arguments, environment: environment)
    }

    /// A folder with the world's in-app purchase key and test root, as an operator would keep them.
    static func keyFiles(_ world: W) throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("apple-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try world.key.pemRepresentation.write(to: dir.appendingPathComponent("SubscriptionKey.p8"), atomically: true, encoding: .utf8)
        try Data(world.signer.rootDER).write(to: dir.appendingPathComponent("root.der"))
        return dir
    }

    /// The binary's environment: the test database, the key from `keys`, the stand-in's URL.
    static func environment(_ world: W, keys dir: URL, api: AppStoreServerAPIClient, client: PostgresClient) async throws -> [String: String] {
        let base = ProcessInfo.processInfo.environment["DATABASE_URL"] ?? ""
        let database = try await client.query("SELECT current_database()", logger: TestDatabase.logger).collect()[0].decode(String.self)
        return [
            "DATABASE_URL": String(base[..<(base.lastIndex(of: "/") ?? base.endIndex)]) + "/" + database,
            "SUBLEDGER_APPLE_ISSUER_ID": world.standIn.issuerID, "SUBLEDGER_APPLE_KEY_ID": world.standIn.keyID,
            "SUBLEDGER_APPLE_PRIVATE_KEY": dir.appendingPathComponent("SubscriptionKey.p8").path, "SUBLEDGER_APPLE_BUNDLE_ID": W.bundleID,
            "SUBLEDGER_APPLE_API_BASE_URL": api.configuredBaseURL, "SUBLEDGER_APPLE_ROOT_CERTS": dir.appendingPathComponent("root.der").path,
        ]
    }

    @Test("apple backfill with the key from SUBLEDGER_APPLE_* applies what was missed, then nothing")
    func backfill() async throws {
        try #require(FileManager.default.fileExists(atPath: Self.binary.path), "build the subledger product first")
        let world = try W()
        let token = UUID().uuidString.lowercased()
        // Recent enough for the default 180-day limit on signatures.
        let now = Timestamp(microseconds: Int64(Date().timeIntervalSince1970 * 1_000_000))
        let start = Timestamp(microseconds: now.microseconds - 40 * 86_400_000_000)
        let payloads = (0..<2).map { i in
            let from = Timestamp(microseconds: start.microseconds + Int64(i) * 30 * 86_400_000_000)
            let to = Timestamp(microseconds: from.microseconds + 30 * 86_400_000_000)
            return world.notification(
                i == 0 ? "SUBSCRIBED" : "DID_RENEW", at: Timestamp(microseconds: from.microseconds + 1_000_000),
                transaction: W.transaction("\(7000 + i)", original: "7000", from: from, to: to, token: token))
        }
        world.standIn.state.withLock { $0.notificationPages = [payloads] }
        let dir = try Self.keyFiles(world)
        defer { try? FileManager.default.removeItem(at: dir) }

        try await world.run { api, _, client in
            let environment = try await Self.environment(world, keys: dir, api: api, client: client)
            let since = String(Timestamp(microseconds: start.microseconds - 86_400_000_000).rfc3339.prefix(10))
            let (status, output) = try await Self.run(["apple", "backfill", "--since", since], environment: environment)
            #expect(status == 0, "\(output)")
            #expect(output.contains("seen 2, new 2"), "\(output)")
            #expect(try await eventCount(client, token) == 2)
            let (again, second) = try await Self.run(["apple", "backfill", "--since", since], environment: environment)
            #expect(again == 0 && second.contains("new 0") && second.contains("already known 2"), "\(second)")
            #expect(try await eventCount(client, token) == 2)
            // Without the key: a clear error naming what is missing, nothing read.
            var noKey = environment
            noKey["SUBLEDGER_APPLE_PRIVATE_KEY"] = ""
            let (refused, message) = try await Self.run(["apple", "backfill", "--since", since], environment: noKey)
            #expect(refused != 0 && message.contains("--apple-private-key"), "\(message)")
        }
    }

    @Test("reconcile apple: a missed renewal and auto-renew off are appended and listed; a second run finds nothing; Apple refusing fails")
    func reconcile() async throws {
        try #require(FileManager.default.fileExists(atPath: Self.binary.path), "build the subledger product first")
        let world = try W()
        let token = UUID().uuidString.lowercased()
        let now = Timestamp(microseconds: Int64(Date().timeIntervalSince1970 * 1_000_000))
        @Sendable func days(_ n: Int64) -> Timestamp { Timestamp(microseconds: now.microseconds + n * 86_400_000_000) }
        let first = W.transaction("8000", original: "8000", from: days(-40), to: days(-10), token: token)
        let renewal = W.transaction("8001", original: "8000", from: days(-10), to: days(20), token: token)
        world.standIn.state.withLock { s in
            s.statuses["8000"] = [
                "status": 1, "signedTransactionInfo": .string(world.signedTransaction(renewal, signedAt: days(-1))),
                "signedRenewalInfo": .string(
                    world.signer.sign([
                        "originalTransactionId": "8000", "productId": "pro.monthly", "autoRenewProductId": "pro.monthly", "autoRenewStatus": 0,
                        "signedDate": W.ms(days(-1)), "environment": "Production",
                    ])),
            ]
            s.transactionPages["8000"] = [[first, renewal].map { world.signedTransaction($0, signedAt: days(-1)) }]
        }
        let dir = try Self.keyFiles(world)
        defer { try? FileManager.default.removeItem(at: dir) }

        try await world.run { api, intake, client in
            let draft = try AppleNotificationMapper.transactionDraft(first, environment: .production, meta: ["store": "apple"])
            _ = try await intake.append(drafts: [draft], subscriber: token, source: "apple")
            let environment = try await Self.environment(world, keys: dir, api: api, client: client)
            let (status, output) = try await Self.run(["reconcile", "apple"], environment: environment)
            #expect(status == 0, "\(output)")
            #expect(output.contains("succeeded; 1 purchases compared, 3 differences (3 repaired, 0 not), 2 events appended"), "\(output)")
            #expect(output.contains("\(token) 8000 auto_renew: ledger true, store false; repaired by "), "\(output)")
            #expect(try await eventCount(client, token) == 3)
            let (again, second) = try await Self.run(
                ["reconcile", "apple", "--since", String(days(-60).rfc3339.prefix(10))], environment: environment)
            #expect(again == 0 && second.contains("1 purchases compared, 0 differences"), "\(second)")
            #expect(try await eventCount(client, token) == 3)
            // Apple refusing every attempt (429 until the retries run out): the run fails and says so.
            world.standIn.state.withLock { $0.throttled = Array(repeating: 0, count: 10) }
            let (down, message) = try await Self.run(["reconcile", "apple"], environment: environment)
            #expect(down != 0 && message.contains("failed") && message.contains("App Store Server API: HTTP 429"), "\(message)")
        }
    }
}
