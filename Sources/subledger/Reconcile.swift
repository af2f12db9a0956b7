import AppleStore
import ArgumentParser
import Foundation
import GoogleStore
import LedgerCore
import LedgerStore
import Logging
import PostgresNIO
import StripeStore

/// `subledger reconcile apple|google|stripe [--since DATE]`: one reconciliation run against a store's API,
/// recorded like the schedule's (docs/switching.md "Reconcile").
struct Reconcile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Compare every purchase the ledger knows from a store with the store's API, append what the ledger lacks, record the run.",
        subcommands: [AppleCommand.self, GoogleCommand.self, StripeCommand.self])

    /// Differences printed after a run (the rest: GET /v1/reconciliations/{id}).
    static let shown = 50

    struct Common: ParsableArguments {
        @OptionGroup var database: DatabaseOptions

        @Option(help: "Compare only purchases with a transaction or paid period at or after this time (RFC 3339 or YYYY-MM-DD; default: all).")
        var since: String?

        var logger: Logger { database.makeLogger("subledger.reconcile") }

        func sinceTime() throws -> Timestamp? { try since.map { try AppleAPIOptions.time($0, "since") } }

        /// Runs `store`'s reconciliation once, prints it, and fails when the run failed.
        func run(_ store: @escaping @Sendable (EventIntake, Database) throws -> any StoreReconciliation) async throws {
            let since = try sinceTime()
            let logger = self.logger
            let (run, differences) = try await withPostgresClient(try await database.url().clientConfiguration(maximumConnections: 4), logger: logger)
            {
                client in
                let db = Database(client: client, logger: logger)
                return try await EventStore(database: db).running { events in
                    let intake = EventIntake(store: events, catalog: CatalogStore(database: db), database: db)
                    let records = ReconciliationStore(database: db)
                    let reconciler = Reconciler(intake: intake, records: records, logger: logger)
                    let run: ReconciliationStore.Run
                    do {
                        run = try await reconciler.run(try store(intake, db), since: since, trigger: .cli)
                    } catch let busy as ReconciliationStore.Busy {
                        throw CommandFailure("\(busy)")
                    }
                    return (run, try await records.differences(runID: run.id, afterOrdinal: 0, limit: Reconcile.shown))
                }
            }
            print(
                "reconciliation \(run.id.lowercasedString) of \(run.store): \(run.status.rawValue); \(run.purchases) purchases compared, "
                    + "\(run.differences) differences (\(run.repaired) repaired, \(run.unrepaired) not), \(run.eventsAppended) events appended")
            for d in differences {
                let outcome =
                    d.repaired ? "repaired by \(d.eventIDs.map(\.lowercasedString).joined(separator: ","))" : "NOT repaired: \(d.reason ?? "")"
                print(
                    "  \(d.subscriberID) \(d.purchaseID) \(d.field): ledger \(d.ledgerValue ?? "null"), store \(d.storeValue ?? "null"); \(outcome)")
            }
            if run.differences > differences.count {
                print("  … \(run.differences - differences.count) more: GET /v1/reconciliations/\(run.id.lowercasedString)")
            }
            if run.status == .failed { throw CommandFailure("the reconciliation failed: \(run.error ?? "unknown error")") }
        }
    }

    struct AppleCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "apple", abstract: "Reconcile App Store subscriptions (Get All Subscription Statuses, transaction history).")

        @OptionGroup var common: Common
        @OptionGroup var apple: AppleAPIOptions

        func run() async throws {
            let logger = common.logger
            let env: LedgerEnvironment = apple.environment == "sandbox" ? .sandbox : .production
            let (verifier, bundleID) = (try apple.verifier(), apple.bundleID)
            try await apple.withClient(logger: logger) { client in
                try await common.run { _, _ in
                    AppleReconciliation(client: client, verifier: verifier, bundleID: bundleID, environment: env)
                }
            }
        }
    }

    struct GoogleCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "google", abstract: "Reconcile Google Play subscriptions (subscriptionsv2.get, voidedpurchases.list since the last run).")

        @OptionGroup var common: Common
        @OptionGroup var google: GoogleOptions

        func run() async throws {
            var config = try google.configuration()
            guard config.serviceAccount != nil, !config.packageNames.isEmpty else {
                throw ValidationError("set --google-package-name and --google-service-account-file (or their environment variables)")
            }
            config.reconcileInterval = nil
            let (play, logger) = (config, common.logger)
            try await common.run { intake, db in
                GoogleReconciliation(
                    play: GooglePlay(configuration: play, intake: intake, logger: logger), marks: StoreSyncMarks(database: db), logger: logger)
            }
        }
    }

    struct StripeCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "stripe", abstract: "Reconcile Stripe subscriptions (subscriptions, their latest charge and refunds).")

        @OptionGroup var common: Common
        @OptionGroup var stripe: StripeOptions

        func run() async throws {
            let configuration = try stripe.configuration()
            guard let key = configuration.apiKey else { throw ValidationError("set --stripe-api-key (or SUBLEDGER_STRIPE_API_KEY)") }
            let (client, options) = (StripeAPIClient(apiKey: key, baseURL: configuration.apiBaseURL), configuration.settings.mapping)
            try await common.run { _, _ in StripeReconciliation(client: client, options: options) }
        }
    }
}
