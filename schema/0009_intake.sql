-- One intake for every store (issue 14), and refunds that do not cut access.

-- Refunds with `cut: false` (money back, access continues): report facts say which refunds cut. One flag
-- per refund, parallel to refund_at_us and refund_amount; rows written before this migration hold only
-- cutting refunds, so a missing flag reads as true. `subledger migrate` rebuilds the facts afterwards.
ALTER TABLE report_transactions ADD COLUMN refund_cut bool[] NOT NULL DEFAULT '{}';

-- Every store's inbox: each verified message, deduplicated by the store's own id, recorded before anything
-- is derived from it and kept whatever happens next ('received': recorded, not yet resolved (a store API
-- must be asked); 'applied': its events are in the ledger; 'pending': waiting for a subscriber link;
-- 'notice': nothing to append; 'ignored': verified but not for this ledger (another app); 'failed': could
-- not be resolved after its retries, kept for an operator).
CREATE TABLE store_inbox (
    store           text        NOT NULL,
    message_id      text        NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind            text        NOT NULL,
    subtype         text,
    environment     text        NOT NULL,
    account_id      text,
    subscriber_id   text,
    status          text        NOT NULL CHECK (status IN ('received', 'applied', 'pending', 'notice', 'ignored', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    last_error      text,
    raw             text        NOT NULL,
    payload         jsonb       NOT NULL,
    PRIMARY KEY (store, message_id)
);
CREATE INDEX store_inbox_pending ON store_inbox (store, account_id) WHERE status = 'pending';
CREATE INDEX store_inbox_due ON store_inbox (next_attempt_at) WHERE status = 'received';

-- A store's own account id (Apple original transaction, Google purchase token, Stripe customer) → subscriber.
CREATE TABLE store_links (
    store           text        NOT NULL,
    account_id      text        NOT NULL,
    subscriber_id   text        NOT NULL,
    linked_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    linked_by       text        NOT NULL,
    PRIMARY KEY (store, account_id)
);
CREATE INDEX store_links_subscriber ON store_links (subscriber_id);

INSERT INTO store_inbox (store, message_id, received_at, kind, subtype, environment, account_id, subscriber_id, status, raw, payload)
SELECT 'apple', notification_uuid::text, received_at, notification_type, subtype, environment, original_transaction_id,
       subscriber_id, status, signed_payload, payload
FROM apple_notifications;
INSERT INTO store_links (store, account_id, subscriber_id, linked_at, linked_by)
SELECT 'apple', original_transaction_id, subscriber_id, linked_at, linked_by FROM apple_links;
DROP TABLE apple_notifications;
DROP TABLE apple_links;

GRANT SELECT, INSERT, UPDATE ON store_inbox TO subledger_app;
GRANT SELECT, INSERT ON store_links TO subledger_app;
