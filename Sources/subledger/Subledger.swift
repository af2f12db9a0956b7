import ArgumentParser

/// The ledger's command line: each subcommand is a thin shell over LedgerStore and LedgerServer.
/// The command line; `main.swift` runs it.
struct Subledger: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subledger",
        abstract: "An event-sourced subscription ledger on PostgreSQL.",
        subcommands: [
            Serve.self, Migrate.self, Keys.self, Rebuild.self, Verify.self, SealCheckpoint.self, ImportCommands.self, Apple.self,
            DeprecatedAppleTestNotification.self, Google.self, Stripe.self, FX.self, Reconcile.self,
        ]
    )
}
