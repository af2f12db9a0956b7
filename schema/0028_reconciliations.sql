-- Reconciliation against the stores (issue 36, item 3; docs/switching.md "Reconcile"): every run of
-- `subledger reconcile <store>` or of serve's schedule, what it compared, each difference it found, what it
-- appended to repair it and what it could not repair. Runs are records: never deleted by the ledger.
CREATE TABLE reconciliation_runs (
    run_id          uuid        PRIMARY KEY,
    -- Orders runs newest first (a page's cursor), whatever the clocks of the instances that ran them.
    seq             bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    store           text        NOT NULL CHECK (store IN ('apple', 'google', 'stripe')),
    trigger         text        NOT NULL CHECK (trigger IN ('cli', 'schedule')),
    instance        text        NOT NULL,
    since           timestamptz,
    -- Google: the start of the voided purchases read (the previous run's start, at most 30 days back).
    voided_since    timestamptz,
    status          text        NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    error           text,
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    purchases       integer     NOT NULL DEFAULT 0,
    differences     integer     NOT NULL DEFAULT 0,
    repaired        integer     NOT NULL DEFAULT 0,
    unrepaired      integer     NOT NULL DEFAULT 0,
    events_appended integer     NOT NULL DEFAULT 0
);

CREATE INDEX reconciliation_runs_store ON reconciliation_runs (store, seq);

CREATE TABLE reconciliation_differences (
    run_id          uuid        NOT NULL REFERENCES reconciliation_runs (run_id),
    ordinal         integer     NOT NULL CHECK (ordinal >= 1),
    subscriber_id   text        NOT NULL,
    purchase_id     text        NOT NULL,
    field           text        NOT NULL,
    ledger_value    text,
    store_value     text,
    outcome         text        NOT NULL CHECK (outcome IN ('repaired', 'unrepaired')),
    event_ids       uuid[]      NOT NULL DEFAULT '{}',
    reason          text,
    PRIMARY KEY (run_id, ordinal)
);

-- One instance reconciles a store at a time: the holder renews its lease while it runs; a dead one's lease
-- lapses and the next schedule takes it.
CREATE TABLE reconciliation_leases (
    store           text        PRIMARY KEY,
    holder          text        NOT NULL,
    run_id          uuid,
    expires_at      timestamptz NOT NULL
);

REVOKE ALL ON reconciliation_runs, reconciliation_differences, reconciliation_leases FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON reconciliation_runs TO subledger_app;
GRANT SELECT, INSERT ON reconciliation_differences TO subledger_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON reconciliation_leases TO subledger_app;
