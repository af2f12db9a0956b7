import Foundation
import GoogleStore
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing

@testable import subledger

/// `subledger google import` through its command's code, against the Google stand-in (the service account's
/// OAuth token, `subscriptionsv2.get`, `products.get`, `orders.get` in the discovery document's shapes) and
/// the real application on PostgreSQL.
@Suite("subledger google import", .serialized)
struct GoogleImportTests {
    typealias G = GoogleStoreAPITests

    static func order(_ n: Int) -> String { "GPA.3000-0000-0000-0000\(n)" }

    /// Four purchases Google knows: with the app's account id (a), without (b, e), a one-time product (c),
    /// and one the file names by its order id (d).
    static func purchases(_ c: G.Context) {
        let month: G.Item = ("pro.monthly", "2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z", "9")
        let purchases: [(Int, String, String?)] = [(1, "tok-a", "user-a"), (2, "tok-b", nil), (4, "tok-d", "user-d"), (5, "tok-e", nil)]
        for (n, token, account) in purchases {
            c.google.set(token, G.purchase(order: order(n), expiry: "2026-04-01T10:00:00Z", account: account))
            c.google.order(order(n), G.order(order(n), token: token, [month]))
        }
        c.google.set("tok-c", G.productPurchase(order(3), token: "tok-c", account: nil))
    }

    static func run(_ c: G.Context, _ lines: [String], _ extra: [String] = []) async throws -> GoogleImport.Summary {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("google-import-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let account = dir.appendingPathComponent("service-account.json")
        try Data(c.google.serviceAccountJSON(port: c.port)).write(to: account)
        let file = dir.appendingPathComponent("purchases.csv")
        try (lines.joined(separator: "\n") + "\n").write(to: file, atomically: true, encoding: .utf8)
        let u = c.url
        let url = "postgres://\(u.username):\(u.password ?? "")@\(u.host):\(u.port)/\(u.database)"
        let command = try GoogleImport.parse(
            [
                "--database-url", url, "--google-package-name", GooglePlayStandIn.package, "--google-service-account-file", account.path,
                "--google-api-base-url", "http://127.0.0.1:\(c.port)", "--log-level", "error", file.path,
                "--bad-rows", dir.appendingPathComponent("bad.txt").path,
            ] + extra)
        return try await command.execute()
    }

    static let csv = [
        "purchase_token,order_id,product_id,subscriber_id", "tok-a,,,", "tok-b,,pro.monthly,user-b", "tok-c,,lifetime.pro,user-c",
        ",\(order(4)),,", "tok-unknown,,,user-x", "tok-e,,,",
    ]

    @Test("a CSV of tokens and order ids: each verified and recorded; a bad line stops the import naming it; re-imports add nothing")
    func csvImport() async throws {
        try await G.run { c in
            Self.purchases(c)
            do {
                _ = try await Self.run(c, Self.csv)
                Issue.record("the unknown token did not stop the import")
            } catch let failure as CommandFailure {
                #expect(failure.description.contains("line 6"), "\(failure)")
            }
            // The lines before the bad one are recorded, under the subscriber each names or Google's account id.
            for user in ["user-a", "user-b", "user-c", "user-d"] {
                #expect(try await G.active(c, user, at: "2026-03-15T00:00:00Z"), "\(user)")
            }
            #expect(try await G.events(c, "user-d").first?["data"]?.objectValue?["transaction_id"] == .string(Self.order(4)))
            let before = try await Self.all(c)
            let skipped = try await Self.run(c, Self.csv, ["--skip-bad-rows"])
            #expect(skipped.lines == 6 && skipped.recorded == 4 && skipped.created == 0 && skipped.alreadyPresent == 4, "\(skipped)")
            #expect(skipped.badRows.count == 2)
            #expect(
                skipped.badRows.first?.contains("line 6") == true && skipped.badRows.last?.contains("line 7: no subscriber") == true, "\(skipped)")
            #expect(try await Self.all(c) == before)
            // Google's notification for an imported purchase adds nothing either.
            _ = try await G.send(c, G.push(id: "ia", at: "2026-03-01T10:00:01Z", type: 4, token: "tok-a"))
            #expect(try await Self.all(c) == before)
        }
    }

    @Test("one token or order id a line, comments and blank lines skipped; a line with two values is bad")
    func plainLines() async throws {
        try await G.run { c in
            Self.purchases(c)
            let summary = try await Self.run(c, ["# purchases", "tok-a", "", Self.order(4), "tok-a,user-a"], ["--skip-bad-rows"])
            #expect(summary.lines == 3 && summary.recorded == 2 && summary.created == 2, "\(summary)")
            #expect(summary.badRows.count == 1 && summary.badRows[0].contains("line 5"), "\(summary)")
            #expect(try await G.active(c, "user-a", at: "2026-03-15T00:00:00Z"))
            #expect(try await G.active(c, "user-d", at: "2026-03-15T00:00:00Z"))
        }
    }

    @Test("Google unreachable (after the client's retries) stops the import naming the line; running it again records it")
    func unreachable() async throws {
        try await G.run { c in
            Self.purchases(c)
            c.google.setDown(true)
            do {
                _ = try await Self.run(c, ["tok-a"])
                Issue.record("an unreachable Google did not stop the import")
            } catch let failure as CommandFailure {
                #expect(failure.description.contains("line 1") && failure.description.contains("run the import again"), "\(failure)")
            }
            #expect(try await Self.all(c).isEmpty)
            c.google.setDown(false)
            let summary = try await Self.run(c, ["tok-a"])
            #expect(summary.recorded == 1 && summary.created == 1, "\(summary)")
        }
    }

    static func all(_ c: G.Context) async throws -> [String] {
        try await TestDatabase.run(c.url.clientConfiguration(maximumConnections: 1)) { client in
            try await client.query("SELECT subscriber_id || ' ' || idempotency_key FROM events ORDER BY position", logger: TestDatabase.logger)
                .collect().map { try $0.decode(String.self) }
        }
    }
}
