import AppleStore
import ArgumentParser
import Foundation
import LedgerCore
import StoreAdapters

/// Signs App Store notifications with a local test chain, so a newcomer can try the Apple endpoint with curl
/// against a server started with `--apple-root-cert <ca-dir>/root.der`.
struct AppleTestNotification: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "test-notification",
        abstract: "Print a signed App Store Server Notification V2 body, signed by a local test CA (for trials and tests).")

    @Option(help: "Folder of the test CA (created on first use); trust its root.der with serve --apple-root-cert.")
    var caDir: String

    @Option(help: "notificationType, e.g. SUBSCRIBED, DID_RENEW, REFUND, EXPIRED.")
    var type: String

    @Option(help: "subtype, e.g. INITIAL_BUY, VOLUNTARY.")
    var subtype: String?

    @Option(help: "transactionId") var transactionId: String
    @Option(help: "originalTransactionId (default: the transaction id)") var originalTransactionId: String?
    @Option(help: "productId") var productId: String
    @Option(help: "purchaseDate, RFC 3339") var purchaseDate: String
    @Option(help: "expiresDate, RFC 3339") var expiresDate: String?
    @Option(help: "revocationDate, RFC 3339 (REFUND, REVOKE)") var revocationDate: String?
    @Option(help: "price in milliunits (10990 = 10.99)") var priceMilli: Int64 = 9990
    @Option(help: "ISO 4217 currency") var currency = "USD"
    @Option(help: "appAccountToken (the subscriber id)") var appAccountToken: String?
    @Option(help: "Production or Sandbox") var environment = "Production"
    @Option(help: "bundleId") var bundleId = "com.example.app"
    @Option(help: "signedDate, RFC 3339 (default: purchase date + 1 s)") var signedDate: String?
    @Option(help: "Sign with a new leaf valid only from this time (RFC 3339), under the same test root") var leafNotBefore: String?
    @Option(help: "Sign with a new leaf valid only until this time (RFC 3339), under the same test root") var leafNotAfter: String?
    @Option(
        help:
            "Print this many bodies, one per line: the i-th with transaction ids suffixed -i and a new random appAccountToken (a subscriber each; for load tests such as tools/bench)"
    )
    var count: Int = 1

    func validate() throws {
        let dates: [(String, String?)] = [
            ("purchase-date", purchaseDate), ("expires-date", expiresDate), ("revocation-date", revocationDate),
            ("signed-date", signedDate),
        ]
        for case (let name, let value?) in dates { _ = try Self.time(value, name) }
        guard (1...1_000_000).contains(count) else { throw ValidationError("--count must be between 1 and 1000000") }
    }

    private static func time(_ s: String, _ name: String) throws -> Timestamp {
        do { return try Timestamp(rfc3339: s) } catch { throw ValidationError("--\(name) \(error)") }
    }

    func run() throws {
        let dir = URL(fileURLWithPath: caDir)
        var signer: AppleTestSigner
        if FileManager.default.fileExists(atPath: dir.appendingPathComponent("root.der").path) {
            signer = try AppleTestSigner(directory: dir)
        } else {
            signer = try AppleTestSigner()
            try signer.save(to: dir)
        }
        func time(_ s: String, _ name: String) throws -> Timestamp { try Self.time(s, name) }
        func date(_ t: Timestamp) -> Date { Date(timeIntervalSince1970: Double(t.microseconds) / 1_000_000) }
        if leafNotBefore != nil || leafNotAfter != nil {
            let from = try leafNotBefore.map { try time($0, "leaf-not-before") } ?? Timestamp(microseconds: 946_684_800_000_000)
            let until = try leafNotAfter.map { try time($0, "leaf-not-after") } ?? Timestamp(microseconds: 4_102_444_800_000_000)
            signer = try signer.reissuingLeaf(validFrom: date(from), until: date(until))
        }
        func ms(_ t: Timestamp) -> JSONValue { .number(JSONNumber(t.microseconds / 1000)) }
        let purchased = try time(purchaseDate, "purchase-date")
        let expires = try expiresDate.map { try time($0, "expires-date") }
        let revoked = try revocationDate.map { try time($0, "revocation-date") }
        let signed = try signedDate.map { try time($0, "signed-date") } ?? Timestamp(microseconds: purchased.microseconds + 1_000_000)
        for i in 1...count {
            let suffix = count == 1 ? "" : "-\(i)"
            let original = (originalTransactionId ?? transactionId) + suffix
            var t: [String: JSONValue] = [
                "transactionId": .string(transactionId + suffix), "originalTransactionId": .string(original),
                "productId": .string(productId), "purchaseDate": ms(purchased), "price": .number(JSONNumber(priceMilli)),
                "currency": .string(currency), "type": expires == nil ? "Non-Consumable" : "Auto-Renewable Subscription",
            ]
            if let expires { t["expiresDate"] = ms(expires) }
            if let revoked {
                t["revocationDate"] = ms(revoked)
                t["revocationType"] = "REFUND_FULL"
            }
            if let token = count == 1 ? appAccountToken : UUID().uuidString.lowercased() { t["appAccountToken"] = .string(token) }
            let body = signer.notificationBody(
                type: type, subtype: subtype, signedDate: signed, bundleID: bundleId, environment: environment, transaction: t,
                renewal: ["originalTransactionId": .string(original), "productId": .string(productId), "autoRenewStatus": 1])
            print(body.canonicalString())
        }
    }
}

/// The command's first spelling, `subledger apple-test-notification`, kept working: it says on stderr where
/// the command moved, then runs it.
struct DeprecatedAppleTestNotification: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apple-test-notification", abstract: "Deprecated spelling of `subledger apple test-notification`.",
        shouldDisplay: false)

    @OptionGroup var command: AppleTestNotification

    func run() throws {
        FileHandle.standardError.write(
            Data("subledger: 'apple-test-notification' is deprecated; use 'subledger apple test-notification'\n".utf8))
        try command.run()
    }
}
