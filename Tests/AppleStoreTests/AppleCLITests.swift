@preconcurrency import Crypto
import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
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
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let out = Pipe()
        process.standardOutput = out
        process.standardError = out
        try process.run()
        let data = try await Task.detached { out.fileHandleForReading.readDataToEndOfFile() }.value
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
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
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("apple-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let keyFile = dir.appendingPathComponent("SubscriptionKey.p8")
        try world.key.pemRepresentation.write(to: keyFile, atomically: true, encoding: .utf8)
        let rootFile = dir.appendingPathComponent("root.der")
        try Data(world.signer.rootDER).write(to: rootFile)

        try await world.run { api, _, client in
            let base = ProcessInfo.processInfo.environment["DATABASE_URL"] ?? ""
            let database = try await client.query("SELECT current_database()", logger: TestDatabase.logger).collect()[0].decode(String.self)
            let url = String(base[..<(base.lastIndex(of: "/") ?? base.endIndex)]) + "/" + database
            let environment = [
                "DATABASE_URL": url, "SUBLEDGER_APPLE_ISSUER_ID": world.standIn.issuerID, "SUBLEDGER_APPLE_KEY_ID": world.standIn.keyID,
                "SUBLEDGER_APPLE_PRIVATE_KEY": keyFile.path, "SUBLEDGER_APPLE_BUNDLE_ID": W.bundleID,
                "SUBLEDGER_APPLE_API_BASE_URL": api.configuredBaseURL, "SUBLEDGER_APPLE_ROOT_CERTS": rootFile.path,
            ]
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
}
