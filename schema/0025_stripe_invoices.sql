-- Stripe's invoice → ledger transaction map gets its own table (issue 34, item 1): until now it lived in
-- store_links as store 'stripe.invoice', with the transaction id in subscriber_id. The rows move here, once.
CREATE TABLE stripe_invoices (
    invoice_id      text        PRIMARY KEY,
    transaction_id  text        NOT NULL,
    linked_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    linked_by       text        NOT NULL
);

INSERT INTO stripe_invoices (invoice_id, transaction_id, linked_at, linked_by)
SELECT account_id, subscriber_id, linked_at, linked_by FROM store_links WHERE store = 'stripe.invoice';
DELETE FROM store_links WHERE store = 'stripe.invoice';

REVOKE ALL ON stripe_invoices FROM PUBLIC;
GRANT SELECT, INSERT ON stripe_invoices TO subledger_app;
