-- Projections kept by the append transaction (ledger-semantics section 3) and the product catalog.
-- Projections are derived data: `subledger rebuild` recomputes them from `events` at any time.

CREATE TABLE windows (
    subscriber_id   text        NOT NULL,
    seq             integer     NOT NULL,  -- order within the subscriber: (entitlement, start, source position)
    entitlement     text        NOT NULL,
    start_at        timestamptz NOT NULL,
    end_at          timestamptz,           -- after cuts; NULL = never ends; = start_at when void
    granted_end     timestamptz,           -- as granted, before any cut
    kind            text        NOT NULL CHECK (kind IN ('paid', 'trial', 'intro', 'promo', 'free', 'lifetime', 'credit', 'grace')),
    product_id      text,
    transaction_id  text,
    source_event_id uuid        NOT NULL,
    source_position bigint      NOT NULL,
    environment     text        NOT NULL CHECK (environment IN ('production', 'sandbox')),
    cut_at          timestamptz,
    cut_by          uuid,
    cut_cause       text,
    PRIMARY KEY (subscriber_id, seq)
);
CREATE INDEX windows_entitlement_start ON windows (entitlement, start_at);

-- Per subscriber: how far the projection has folded, and the renewal state the windows do not show.
CREATE TABLE subscriber_state (
    subscriber_id     text    PRIMARY KEY,
    version           bigint  NOT NULL,
    auto_renew        jsonb   NOT NULL,  -- {"pro": true}
    lapsed            jsonb   NOT NULL,  -- ["pro"]
    unmatched_refunds jsonb   NOT NULL   -- ["<refund event id>"]
);

GRANT SELECT, INSERT, UPDATE, DELETE ON windows, subscriber_state TO subledger_app;

-- The catalog keeps every revision: a PUT adds one, nothing is edited (events written with an earlier
-- revision keep what it said: events are self-describing).
CREATE TABLE products (
    product_id      text        NOT NULL,
    revision        integer     NOT NULL CHECK (revision >= 1),
    entitlements    text[]      NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('auto_renewable', 'non_renewing', 'free', 'lifetime')),
    period          text,
    duration        text,
    price_minor     bigint      NOT NULL CHECK (price_minor >= 0),
    currency        text        NOT NULL,
    commission_rate numeric     NOT NULL CHECK (commission_rate >= 0 AND commission_rate <= 1),
    recorded_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (product_id, revision)
);
CREATE TRIGGER products_reject_update_delete BEFORE UPDATE OR DELETE ON products
    FOR EACH ROW EXECUTE FUNCTION subledger_reject_change();
CREATE TRIGGER products_reject_truncate BEFORE TRUNCATE ON products
    FOR EACH STATEMENT EXECUTE FUNCTION subledger_reject_change();
ALTER TABLE products ENABLE ALWAYS TRIGGER products_reject_update_delete;
ALTER TABLE products ENABLE ALWAYS TRIGGER products_reject_truncate;
REVOKE ALL ON products FROM PUBLIC;
GRANT SELECT, INSERT ON products TO subledger_app;
