-- Report facts (ledger-semantics sections 5 and 6), kept beside the windows by the same per-subscriber fold
-- in the append transaction and by `subledger rebuild`. Derived data: production events only. Times are
-- microseconds since the Unix epoch (int8), exactly what the fold computed.

-- Paid runs per entitlement, and over all entitlements together (entitlement = '').
CREATE TABLE report_runs (
    entitlement    text   NOT NULL,
    subscriber_id  text   NOT NULL,
    start_us       int8   NOT NULL,
    end_us         int8,            -- NULL: the run never ends
    first_start_us int8   NOT NULL, -- the subscriber's first paid run for this entitlement key
    lapse          text   CHECK (lapse IN ('refund', 'involuntary', 'voluntary', 'other')),
    PRIMARY KEY (entitlement, subscriber_id, start_us)
);
CREATE INDEX report_runs_subscriber ON report_runs (subscriber_id);

-- Paid transactions (purchase/renewal with a price, no trial offer): billing, recognition and refunds.
CREATE TABLE report_transactions (
    source_event_id uuid    PRIMARY KEY,
    subscriber_id   text    NOT NULL,
    entitlements    text[]  NOT NULL,
    kind            text    NOT NULL CHECK (kind IN ('paid', 'intro', 'promo', 'lifetime')),
    currency        text    NOT NULL,
    gross           int8    NOT NULL,
    commission      int8    NOT NULL,
    occurred_us     int8    NOT NULL,
    start_us        int8    NOT NULL,
    end_us          int8,            -- as granted; NULL for lifetime
    stop_us         int8,            -- cut short by a refund or cancellation here
    service_end_us  int8,            -- stop or end: when paid service ends (MRR)
    settled_us      int8    NOT NULL, -- after this nothing about the transaction moves
    refund_at_us    int8[]  NOT NULL,
    refund_amount   int8[]  NOT NULL,
    monthly_num     numeric,         -- the price per month as an exact fraction (MRR); NULL for lifetime
    monthly_den     numeric
);
CREATE INDEX report_transactions_subscriber ON report_transactions (subscriber_id);
CREATE INDEX report_transactions_settled ON report_transactions (settled_us);
CREATE INDEX report_transactions_service ON report_transactions (start_us, service_end_us);

-- Trial windows, one row per trial transaction and entitlement.
CREATE TABLE report_trials (
    source_event_id uuid    NOT NULL,
    entitlement     text    NOT NULL,
    subscriber_id   text    NOT NULL,
    start_us        int8    NOT NULL,
    end_us          int8    NOT NULL,
    converted       boolean NOT NULL,
    PRIMARY KEY (source_event_id, entitlement)
);
CREATE INDEX report_trials_subscriber ON report_trials (subscriber_id);
CREATE INDEX report_trials_start ON report_trials (start_us);

GRANT SELECT, INSERT, UPDATE, DELETE ON report_runs, report_transactions, report_trials TO subledger_app;
