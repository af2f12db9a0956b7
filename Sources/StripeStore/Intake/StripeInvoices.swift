import LedgerStore
import PostgresNIO

/// A paid invoice's ledger transaction id (`stripe_invoices`, schema 0025), for the proration credits and
/// refunds that name only the invoice. First recorded stands.
enum StripeInvoices {
    /// Records the lookup keys of prices (linked in `store_links` under `store`, as `StoreTransaction.link` of
    /// one id would: an id linked already keeps its key) and an invoice's transaction, in one statement.
    static func record(
        prices: [(price: String, product: String)], store: String, invoice: (invoice: String, transaction: String)?,
        on tx: StoreTransaction
    ) async throws {
        guard !prices.isEmpty || invoice != nil else { return }
        try await tx.connection.query(
            """
            WITH prices AS (
                INSERT INTO store_links (store, account_id, subscriber_id, linked_by)
                SELECT \(store), p.price, p.product, 'price'
                FROM unnest(\(prices.map(\.price))::text[], \(prices.map(\.product))::text[]) WITH ORDINALITY AS p(price, product, i)
                ORDER BY p.i
                ON CONFLICT (store, account_id) DO NOTHING
            )
            INSERT INTO stripe_invoices (invoice_id, transaction_id, linked_by)
            SELECT \(invoice?.invoice), \(invoice?.transaction), 'invoice' WHERE \(invoice != nil)
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
