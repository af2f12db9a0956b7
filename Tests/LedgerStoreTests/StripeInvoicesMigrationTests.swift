import LedgerCore
import LedgerStore
import LedgerTestSupport
import PostgresNIO
import Testing

@Suite("Schema 0025: Stripe's invoices move out of store_links")
struct StripeInvoicesMigrationTests {
    @Test("rows of store 'stripe.invoice' become stripe_invoices rows, the other links stay")
    func moves() async throws {
        try await TestDatabase.with { client, _ in
            // Back to the schema before 0025, with a ledger that linked invoices the old way.
            try await client.query("DROP TABLE stripe_invoices")
            try await client.query("DELETE FROM schema_migrations WHERE version = 25")
            try await client.query(
                """
                INSERT INTO store_links (store, account_id, subscriber_id, linked_by) VALUES
                    ('stripe.invoice', 'in_1', 'pi_1', 'invoice'), ('stripe.invoice', 'in_2', 'in_2', 'invoice'),
                    ('stripe', 'cus_A', 'web-a', 'message'), ('stripe.invoice_payment', 'pi_9', 'in_9', 'invoice_payment')
                """)
            let runner = MigrationRunner(client: client, schema: try TestDatabase.schema(), logger: TestDatabase.logger)
            #expect(try await runner.migrate().migrations.map(\.version) == [25])
            let moved = try await client.query("SELECT invoice_id, transaction_id, linked_by FROM stripe_invoices ORDER BY invoice_id")
                .collect().map { try $0.decode((String, String, String).self) }
            #expect(moved.map(\.0) == ["in_1", "in_2"] && moved.map(\.1) == ["pi_1", "in_2"] && moved.allSatisfy { $0.2 == "invoice" })
            let left = try await client.query("SELECT store FROM store_links ORDER BY store").collect().map { try $0.decode(String.self) }
            #expect(left == ["stripe", "stripe.invoice_payment"])
        }
    }
}
