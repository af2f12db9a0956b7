import ArgumentParser
import Foundation
import GoogleStore
import LedgerCore
import LedgerStore

/// Google Play's flags, shared by `serve` and `google reconcile` (each also an environment variable).
struct GoogleOptions: ParsableArguments {
    @Option(
        name: .customLong("google-package-name"),
        help: "A Google Play package name this ledger serves; repeatable (default: $SUBLEDGER_GOOGLE_PACKAGE_NAMES, comma-separated).")
    var googlePackageNames: [String] = []

    @Option(
        name: .customLong("google-service-account-file"),
        help: "Google service-account JSON key file for the Play Developer API (default: $SUBLEDGER_GOOGLE_SERVICE_ACCOUNT_FILE).")
    var googleServiceAccountFile: String?

    @Option(
        name: .customLong("google-api-base-url"),
        help: "Play Developer API base URL (default: $SUBLEDGER_GOOGLE_API_BASE_URL, else https://androidpublisher.googleapis.com).")
    var googleAPIBaseURL: String?

    @Option(
        name: .customLong("google-pubsub-audience"),
        help: "The audience of the Pub/Sub push subscription's OIDC tokens (default: $SUBLEDGER_GOOGLE_PUBSUB_AUDIENCE).")
    var googlePubsubAudience: String?

    @Option(
        name: .customLong("google-pubsub-service-account"),
        help: "The service account email Pub/Sub pushes as (default: $SUBLEDGER_GOOGLE_PUBSUB_SERVICE_ACCOUNT).")
    var googlePubsubServiceAccount: String?

    @Option(
        name: .customLong("google-oidc-jwks"),
        help: "URL or file of Google's OIDC signing keys (default: $SUBLEDGER_GOOGLE_OIDC_JWKS, else https://www.googleapis.com/oauth2/v3/certs).")
    var googleOIDCJWKS: String?

    /// Google Play's configuration from the flags, else the environment.
    func configuration() throws -> GooglePlayConfiguration {
        let env = EnvironmentFallback()
        func value(_ flag: String?, _ name: String) -> String? {
            env.string(flag?.trimmingCharacters(in: .whitespaces), name)
        }
        var account: GoogleServiceAccount?
        if let path = value(googleServiceAccountFile, "SUBLEDGER_GOOGLE_SERVICE_ACCOUNT_FILE") {
            do { account = try GoogleServiceAccount.load(path: path) } catch { throw ValidationError("--google-service-account-file: \(error)") }
        }
        return GooglePlayConfiguration(
            packageNames: Set(env.list(googlePackageNames, "SUBLEDGER_GOOGLE_PACKAGE_NAMES")), serviceAccount: account,
            apiBaseURL: value(googleAPIBaseURL, "SUBLEDGER_GOOGLE_API_BASE_URL") ?? GooglePlayConfiguration.defaultAPIBaseURL,
            pubsubAudience: value(googlePubsubAudience, "SUBLEDGER_GOOGLE_PUBSUB_AUDIENCE"),
            pubsubServiceAccount: value(googlePubsubServiceAccount, "SUBLEDGER_GOOGLE_PUBSUB_SERVICE_ACCOUNT"),
            oidcJWKS: value(googleOIDCJWKS, "SUBLEDGER_GOOGLE_OIDC_JWKS") ?? GoogleKeySource.defaultURL)
    }
}

struct Google: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Google Play operations.", subcommands: [GoogleReconcile.self, GoogleImport.self])
}

struct GoogleReconcile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reconcile",
        abstract: "Read voided purchases (purchases.voidedpurchases.list) and record the refunds whose notification was missed.")

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var google: GoogleOptions

    @Option(help: "Earliest voiding time to read, RFC 3339 (default: Google's 30 days).")
    var since: String?

    func run() async throws {
        let logger = database.makeLogger("subledger.google")
        let since: Timestamp?
        do { since = try self.since.map { try Timestamp(rfc3339: $0) } } catch { throw ValidationError("--since: \(error)") }
        var configuration = try google.configuration()
        guard configuration.serviceAccount != nil, !configuration.packageNames.isEmpty else {
            throw ValidationError("set --google-package-name and --google-service-account-file (or their environment variables)")
        }
        configuration.reconcileInterval = nil
        let config = configuration
        let (read, new) = try await withPostgresClient(try await database.url().clientConfiguration(maximumConnections: 4), logger: logger) {
            client in
            let db = Database(client: client, logger: logger)
            return try await EventStore(database: db).running { store in
                let intake = EventIntake(store: store, catalog: CatalogStore(database: db), database: db)
                return try await GooglePlay(configuration: config, intake: intake, logger: logger).reconcile(since: since)
            }
        }
        print("read \(read) voided purchases; \(new) new")
    }
}
