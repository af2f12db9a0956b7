import LedgerStore
import PostgresNIO

/// A paid invoice's ledger transaction id (`stripe_invoices`, schema 0025), for the proration credits and
/// refunds that name only the invoice. First recorded stands.
enum StripeInvoices {
    static func record(invoice: String, transaction: String, by origin: String, on tx: StoreTransaction) async throws {
        try await tx.connection.query(
            """
            INSERT INTO stripe_invoices (invoice_id, transaction_id, linked_by) VALUES (\(invoice), \(transaction), \(origin))
            ON CONFLICT (invoice_id) DO NOTHING
            """, logger: tx.logger)
    }

    static func transaction(of invoice: String, on tx: StoreTransaction) async throws -> String? {
        for try await t in try await tx.connection.query(
            "SELECT transaction_id FROM stripe_invoices WHERE invoice_id = \(invoice)", logger: tx.logger
        ).decode(String.self) {
            return t
        }
        return nil
    }
}
