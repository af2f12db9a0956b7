import AppleStore
import ArgumentParser
import AsyncHTTPClient
import Foundation
import LedgerCore
import LedgerStore
import Logging
import PostgresNIO
import StoreAdapters

/// `subledger apple backfill` and `subledger apple sync`: the App Store Server API, for what notifications
/// did not bring.
struct Apple: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Recover and import App Store history with the App Store Server API (docs/apple.md); sign test notifications.",
        subcommands: [Backfill.self, Sync.self, AppleTestNotification.self])

    struct Backfill: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch Apple's notification history and apply every notification the ledger has not seen.",
            discussion: """
                Each notification is verified like a pushed one and goes through the same intake: those already \
                seen append nothing; a late one lands at its own time. Apple keeps 180 days of history.
                """)

        @OptionGroup var database: DatabaseOptions
        @OptionGroup var apple: AppleAPIOptions

        @Option(help: "Start of the history to read (RFC 3339 or YYYY-MM-DD; at most 180 days ago).")
        var since: String

        @Option(help: "End of the history to read (default: now).")
        var until: String?

        func run() async throws {
            let logger = database.makeLogger("subledger.apple")
            let now = AppleAPIOptions.now()
            let from = try AppleAPIOptions.time(since, "since")
            let to = try until.map { try AppleAPIOptions.time($0, "until") } ?? now
            guard from < to else { throw ValidationError("--since must be before --until") }
            let summary = try await apple.withClient(logger: logger) { client in
                try await withPostgresClient(try await database.url().clientConfiguration(maximumConnections: 4), logger: logger) { pg in
                    try await AppleAPIOptions.withIntake(pg, logger: logger) { intake in
                        let backfill = AppleBackfill(client: client, reader: try apple.reader(), intake: intake, logger: logger)
                        return try await backfill.run(since: from, until: to, now: now) { progress in
                            FileHandle.standardError.write(Data("page \(progress.pages): \(progress)\n".utf8))
                        }
                    }
                }
            }
            print("backfill \(from.rfc3339) – \(to.rfc3339): \(summary)")
            if summary.failed > 0 { throw CommandFailure("\(summary.failed) notifications failed (see the warnings above)") }
        }
    }

    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Import subscriptions' transaction history (purchases, renewals, refunds) the ledger lacks.",
            discussion: """
                With --original-transaction-id (repeatable) those subscriptions, linked to --subscriber when given; \
                with only --subscriber every subscription already linked to it; with --all-from FILE one original \
                transaction id per line (an existing app's import), resumable with --resume-after ID.
                """)

        @OptionGroup var database: DatabaseOptions
        @OptionGroup var apple: AppleAPIOptions

        @Option(name: .customLong("original-transaction-id"), help: "An original transaction id (repeatable).")
        var originalTransactionIDs: [String] = []

        @Option(help: "The subscriber the subscriptions belong to (linked to them).")
        var subscriber: String?

        @Option(name: .customLong("all-from"), help: "A file of original transaction ids, one per line ('-' for standard input).")
        var allFrom: String?

        @Option(name: .customLong("resume-after"), help: "With --all-from: skip the ids up to and including this one.")
        var resumeAfter: String?

        func validate() throws {
            if originalTransactionIDs.isEmpty && subscriber == nil && allFrom == nil {
                throw ValidationError("pass --original-transaction-id, --subscriber or --all-from")
            }
            if let subscriber, !Identifiers.isValidSubscriberID(subscriber) {
                throw ValidationError("--subscriber: not a valid subscriber id")
            }
        }

        func run() async throws {
            let logger = database.makeLogger("subledger.apple")
            var ids = originalTransactionIDs
            if let allFrom {
                let text: String
                if allFrom == "-" {
                    text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
                } else {
                    guard let data = FileManager.default.contents(atPath: allFrom) else { throw CommandFailure("cannot read \(allFrom)") }
                    text = String(decoding: data, as: UTF8.self)
                }
                var listed = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                if let resumeAfter, let at = listed.firstIndex(of: resumeAfter) { listed.removeFirst(at + 1) }
                ids += listed
            }
            let given = ids
            try await apple.withClient(logger: logger) { client in
                try await withPostgresClient(try await database.url().clientConfiguration(maximumConnections: 4), logger: logger) { pg in
                    try await AppleAPIOptions.withIntake(pg, logger: logger) { intake in
                        var ids = given
                        if ids.isEmpty, let subscriber {
                            ids = try await intake.links.accounts(store: AppleNotificationMapper.store, subscriber: subscriber)
                            guard !ids.isEmpty else { throw CommandFailure("no App Store subscription is linked to \(subscriber)") }
                        }
                        let sync = AppleSync(
                            client: client, verifier: try apple.verifier(), intake: intake, bundleID: apple.bundleID, logger: logger)
                        for (i, id) in ids.enumerated() {
                            do {
                                let summary = try await sync.sync(originalTransactionID: id, subscriber: subscriber, now: AppleAPIOptions.now())
                                print("[\(i + 1)/\(ids.count)] \(id): \(summary)")
                            } catch {
                                throw CommandFailure("\(id): \(error) (resume with --resume-after \(i == 0 ? "''" : ids[i - 1]))")
                            }
                        }
                        return true
                    }
                }
            }
        }
    }
}

/// The in-app purchase key that signs App Store Server API requests, and the API's base URL; each option
/// also an environment variable. Shared by `serve` and the `apple` commands.
struct AppleAPIKeyOptions: ParsableArguments {
    @Option(name: .customLong("apple-issuer-id"), help: "Issuer id of the in-app purchase key (default: $SUBLEDGER_APPLE_ISSUER_ID).")
    var issuerID: String?

    @Option(name: .customLong("apple-key-id"), help: "Key id of the in-app purchase key (default: $SUBLEDGER_APPLE_KEY_ID).")
    var keyID: String?

    @Option(name: .customLong("apple-private-key"), help: "The key's .p8 file (default: $SUBLEDGER_APPLE_PRIVATE_KEY).")
    var privateKey: String?

    @Option(
        name: .customLong("apple-api-base-url"),
        help:
            "App Store Server API base URL (default: $SUBLEDGER_APPLE_API_BASE_URL, else Apple's production URL; the apple commands' --environment sandbox picks Apple's sandbox URL)."
    )
    var baseURL: String?

    var env: EnvironmentFallback { EnvironmentFallback() }

    /// Whether a base URL is given (by option or environment) instead of Apple's own hosts.
    var hasBaseURL: Bool { env.string(baseURL, "SUBLEDGER_APPLE_API_BASE_URL") != nil }

    /// Whether a key is configured at all (by option or environment).
    var isConfigured: Bool {
        [
            env.string(issuerID, "SUBLEDGER_APPLE_ISSUER_ID"), env.string(keyID, "SUBLEDGER_APPLE_KEY_ID"),
            env.string(privateKey, "SUBLEDGER_APPLE_PRIVATE_KEY"),
        ].contains { $0 != nil }
    }

    func credentials(bundleID: String?) throws -> AppStoreAPICredentials {
        func value(_ option: String?, _ name: String, _ variable: String) throws -> String {
            guard let v = env.string(option, variable) else {
                throw ValidationError("--\(name) (or \(variable)) is required to call the App Store Server API")
            }
            return v
        }
        let path = try value(privateKey, "apple-private-key", "SUBLEDGER_APPLE_PRIVATE_KEY")
        guard let pem = FileManager.default.contents(atPath: path).map({ String(decoding: $0, as: UTF8.self) }) else {
            throw ValidationError("--apple-private-key \(path): cannot read the file")
        }
        guard let bundleID, !bundleID.isEmpty else {
            throw ValidationError("--apple-bundle-id (or SUBLEDGER_APPLE_BUNDLE_ID) is required to call the App Store Server API")
        }
        do {
            return try AppStoreAPICredentials(
                issuerID: try value(issuerID, "apple-issuer-id", "SUBLEDGER_APPLE_ISSUER_ID"),
                keyID: try value(keyID, "apple-key-id", "SUBLEDGER_APPLE_KEY_ID"), bundleID: bundleID, privateKeyPEM: pem)
        } catch let error as AppStoreAPICredentials.Invalid {
            throw ValidationError("--apple-private-key \(path): \(error)")
        }
    }

    func url(sandbox: Bool) -> String {
        env.string(baseURL, "SUBLEDGER_APPLE_API_BASE_URL")
            ?? (sandbox ? AppStoreServerAPIClient.sandboxURL : AppStoreServerAPIClient.productionURL)
    }
}

/// What the `apple` commands need besides the key: the bundle, Apple's host, the roots that sign payloads.
struct AppleAPIOptions: ParsableArguments {
    @OptionGroup var key: AppleAPIKeyOptions

    @Option(name: .customLong("apple-bundle-id"), help: "The app's bundle id (default: $SUBLEDGER_APPLE_BUNDLE_ID).")
    var bundleIDOption: String?

    @Option(help: "production or sandbox: which of Apple's API hosts to call.")
    var environment = "production"

    @Option(
        name: .customLong("apple-root-cert"),
        help: "Trust this root for signed payloads instead of Apple Root CA G3 (repeatable; default: $SUBLEDGER_APPLE_ROOT_CERTS).")
    var rootCerts: [String] = []

    var bundleID: String? { EnvironmentFallback().string(bundleIDOption, "SUBLEDGER_APPLE_BUNDLE_ID") }

    func validate() throws {
        guard environment == "production" || environment == "sandbox" else {
            throw ValidationError("--environment must be production or sandbox")
        }
    }

    /// The clock lives at the edges (LedgerCore has none).
    static func now() -> Timestamp {
        Timestamp(microseconds: Int64(Date().timeIntervalSince1970 * 1_000_000))
    }

    static func time(_ text: String, _ name: String) throws -> Timestamp {
        if let t = try? Timestamp(rfc3339: text) { return t }
        if let t = try? Timestamp(rfc3339: text + "T00:00:00Z") { return t }
        throw ValidationError("--\(name): '\(text)' is neither RFC 3339 nor YYYY-MM-DD")
    }

    func verifier() throws -> AppleJWSVerifier {
        let roots = try AppleRootFiles.load(rootCerts)
        return try AppleJWSVerifier(rootsDER: roots.isEmpty ? [try AppleJWSVerifier.appleRootG3DER()] : roots)
    }

    func reader() throws -> AppleNotificationReader {
        AppleNotificationReader(verifier: try verifier(), bundleID: bundleID)
    }

    /// Runs `body` with a client of the configured API host, shutting its HTTP client down after.
    func withClient<T: Sendable>(logger: Logger, _ body: (AppStoreServerAPIClient) async throws -> T) async throws -> T {
        let credentials = try key.credentials(bundleID: bundleID)
        let url = key.url(sandbox: environment == "sandbox")
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            let result = try await body(AppStoreServerAPIClient(http: http, credentials: credentials, baseURL: url, logger: logger))
            try await http.shutdown()
            return result
        } catch {
            try? await http.shutdown()
            throw error
        }
    }

    /// An intake whose append engine runs for the duration of `body`.
    static func withIntake<T>(_ client: PostgresClient, logger: Logger, _ body: (EventIntake) async throws -> T) async throws -> T {
        try await EventStore(client: client, logger: logger).running { store in
            try await body(
                EventIntake(store: store, catalog: CatalogStore(client: client, logger: logger), database: Database(client: client, logger: logger)))
        }
    }
}

/// Root certificates from DER or PEM files (`--apple-root-cert`, or `SUBLEDGER_APPLE_ROOT_CERTS`, comma-separated).
enum AppleRootFiles {
    static func load(_ given: [String]) throws -> [[UInt8]] {
        try EnvironmentFallback().list(given, "SUBLEDGER_APPLE_ROOT_CERTS").map { path in
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ValidationError("--apple-root-cert \(path): cannot read the file")
            }
            if let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN CERTIFICATE-----") {
                let body = text.components(separatedBy: "\n").filter { !$0.hasPrefix("-----") }.joined()
                guard let der = Data(base64Encoded: body) else { throw ValidationError("--apple-root-cert \(path): bad PEM") }
                return Array(der)
            }
            return Array(data)
        }
    }
}
