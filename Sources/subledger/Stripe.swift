import ArgumentParser
import Foundation
import LedgerCore
import LedgerServer
import LedgerStore
import StoreAdapters
import StripeStore

/// `subledger stripe backfill`: Stripe's history, from its list APIs.
struct Stripe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stripe operations (docs/stripe.md).", subcommands: [StripeBackfillCommand.self])
}

struct StripeBackfillCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backfill",
        abstract: "Read Stripe's customers, subscriptions, invoices, refunds, charges and disputes and record them as their webhooks would.",
        discussion: """
            Each object is turned into the webhook event Stripe sends for it and taken in by the same mapper and \
            intake as POST /v1/stores/stripe/webhooks: a backfill and the webhooks of the same history store each \
            fact once, in either order, and running it again stores nothing. Needs --stripe-api-key (or \
            SUBLEDGER_STRIPE_API_KEY), a secret or restricted key that may read those objects.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup(title: "Stripe") var stripe: StripeOptions

    @Option(help: "Read only objects created at or after this time (RFC 3339 or YYYY-MM-DD; default: the whole history).")
    var since: String?

    /// Checked while parsing, so that what is missing is said with this command's usage.
    func validate() throws {
        if let since { _ = try AppleAPIOptions.time(since, "since") }
        guard try stripe.configuration().apiKey != nil else { throw Self.noKey }
    }

    static let noKey = ValidationError("set --stripe-api-key (or SUBLEDGER_STRIPE_API_KEY): the backfill reads Stripe's API")

    func run() async throws {
        let interactive = isatty(STDERR_FILENO) == 1
        var progress: StripeBackfill.Progress?
        if interactive {
            progress = { collection, s in
                let line = "\r\(collection): \(s.read) objects read, \(s.applied) applied, \(s.pending) pending   "
                FileHandle.standardError.write(Data(line.utf8))
            }
        }
        let summary = try await execute(progress: progress)
        if interactive { FileHandle.standardError.write(Data("\n".utf8)) }
        for problem in summary.problems { print("  \(problem)") }
        print(Self.describe(summary))
        if summary.refused + summary.unmapped > 0 {
            throw CommandFailure(
                "\(summary.refused) refused and \(summary.unmapped) unmapped (listed above); fix them (e.g. add the products to the catalog) and run the backfill again"
            )
        }
    }

    static func describe(_ s: StripeBackfill.Summary) -> String {
        "read \(s.read) objects: \(s.applied) applied, \(s.duplicate) duplicate, \(s.ignored) ignored, \(s.pending) pending, "
            + "\(s.refused) refused, \(s.unmapped) unmapped"
    }

    /// The backfill itself, for `run` and the tests.
    func execute(progress: StripeBackfill.Progress? = nil) async throws -> StripeBackfill.Summary {
        let logger = database.makeLogger("subledger.stripe")
        let configuration = try stripe.configuration()
        guard let key = configuration.apiKey else { throw Self.noKey }
        let from = try since.map { try AppleAPIOptions.time($0, "since") }
        // 429 (Stripe's rate limit) and 5xx are retried: six attempts, 0.5 s doubling, or Stripe's Retry-After.
        let client = StripeAPIClient(apiKey: key, baseURL: configuration.apiBaseURL, attempts: 6)
        return try await withPostgresClient(try await database.url().clientConfiguration(maximumConnections: 4), logger: logger) { pg in
            try await database.requireCurrentSchema(pg, logger: logger)
            return try await AppleAPIOptions.withIntake(pg, logger: logger) { intake in
                try await StripeBackfill(client: client, intake: intake, options: configuration.settings.mapping, logger: logger)
                    .run(since: from, now: AppleAPIOptions.now(), progress: progress)
            }
        }
    }
}
