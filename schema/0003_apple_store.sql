-- App Store adapter: the inbox of signed notifications (deduplicated by notificationUUID, kept even when
-- no subscriber is known yet) and the links from Apple's original transaction ids to subscribers.

CREATE TABLE apple_notifications (
    notification_uuid       uuid        PRIMARY KEY,
    received_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    notification_type       text        NOT NULL,
    subtype                 text,
    environment             text        NOT NULL,
    original_transaction_id text,
    subscriber_id           text,
    -- 'applied': its events are in the ledger; 'pending': waiting for a subscriber link;
    -- 'notice': a type the ledger keeps as a store notice only (no event).
    status                  text        NOT NULL CHECK (status IN ('applied', 'pending', 'notice')),
    signed_payload          text        NOT NULL,
    payload                 jsonb       NOT NULL
);
CREATE INDEX apple_notifications_pending ON apple_notifications (original_transaction_id) WHERE status = 'pending';

CREATE TABLE apple_links (
    original_transaction_id text        PRIMARY KEY,
    subscriber_id           text        NOT NULL,
    linked_at               timestamptz NOT NULL DEFAULT clock_timestamp(),
    linked_by               text        NOT NULL  -- 'app_account_token' or 'receipt'
);

GRANT SELECT, INSERT, UPDATE ON apple_notifications TO subledger_app;
GRANT SELECT, INSERT ON apple_links TO subledger_app;
