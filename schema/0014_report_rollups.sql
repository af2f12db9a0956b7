-- Report rollups (issue 21, docs/reports.md "Rollups"): the report facts summed per calendar period, kept by
-- the same projection write as the facts, so a report reads a few rows per period however large the ledger.
-- The server computes each cell exactly (LedgerCore's ReportRollup); an append adds the difference its
-- subscribers' facts made, and a rebuild writes the sums afresh. Times are microseconds since the Unix epoch
-- at UTC midnight (the start of the day, ISO week or month); entitlement '' is all entitlements together.

-- Per month: the change of the transactions' cumulative revenue figures across the month, and how many
-- transactions move in it. Sums of 64-bit amounts: numeric.
CREATE TABLE report_revenue_months (
    entitlement           text    NOT NULL,
    month_us              int8    NOT NULL,
    currency              text    NOT NULL,
    transactions          int8    NOT NULL,
    billings              numeric NOT NULL,
    commission            numeric NOT NULL,
    refunds               numeric NOT NULL,
    refunded_unrecognized numeric NOT NULL,
    refunds_recognized    numeric NOT NULL,
    recognized            numeric NOT NULL,
    settled_deferred      numeric NOT NULL, -- the deferred balance left by the transactions settling in the month
    PRIMARY KEY (entitlement, month_us, currency)
);

-- Per day: trials started (by their start) and how many of them converted.
CREATE TABLE report_trial_days (
    entitlement text NOT NULL,
    day_us      int8 NOT NULL,
    started     int8 NOT NULL,
    converted   int8 NOT NULL,
    PRIMARY KEY (entitlement, day_us)
);

-- Per day: paid runs started and ended ("active just before midnight b" = starts before b − ends before b).
CREATE TABLE report_run_days (
    entitlement text NOT NULL,
    day_us      int8 NOT NULL,
    starts      int8 NOT NULL,
    ends        int8 NOT NULL,
    PRIMARY KEY (entitlement, day_us)
);

-- Per interval and period: subscribers who became active (new or reactivated) or churned (by reason).
CREATE TABLE report_churn_periods (
    entitlement         text NOT NULL,
    period_interval     text NOT NULL CHECK (period_interval IN ('day', 'week', 'month')),
    period_us           int8 NOT NULL,
    new                 int8 NOT NULL,
    reactivated         int8 NOT NULL,
    churned_refund      int8 NOT NULL,
    churned_involuntary int8 NOT NULL,
    churned_voluntary   int8 NOT NULL,
    churned_other       int8 NOT NULL,
    PRIMARY KEY (entitlement, period_interval, period_us)
);

-- Per cohort month and later month boundary: +1 where a run starts covering the boundary, −1 after its last;
-- month_us = cohort_us holds the cohort's size.
CREATE TABLE report_retention_cells (
    entitlement text NOT NULL,
    cohort_us   int8 NOT NULL,
    month_us    int8 NOT NULL,
    delta       int8 NOT NULL,
    PRIMARY KEY (entitlement, cohort_us, month_us)
);

-- Per day and currency: numerators of the monthly amounts (per reduced denominator, summed exactly) whose
-- service starts that day, and of those whose service ends; MRR just before midnight b is started − ended
-- over the days before b.
CREATE TABLE report_mrr_days (
    entitlement text    NOT NULL,
    day_us      int8    NOT NULL,
    currency    text    NOT NULL,
    denominator numeric NOT NULL,
    started     numeric NOT NULL,
    ended       numeric NOT NULL,
    PRIMARY KEY (entitlement, day_us, currency, denominator)
);

-- Per day and currency: a subscriber's paid coverage (the union of its transactions' service) starting and
-- ending: MRR's count of paying subscribers.
CREATE TABLE report_paid_days (
    entitlement text NOT NULL,
    day_us      int8 NOT NULL,
    currency    text NOT NULL,
    starts      int8 NOT NULL,
    ends        int8 NOT NULL,
    PRIMARY KEY (entitlement, day_us, currency)
);

-- Transactions whose revenue would take more month cells than `ReportRollup.maxRevenueCells` (a window of
-- years, dozens of entitlements) are read from the facts beside the rollup.
ALTER TABLE report_transactions ADD COLUMN revenue_rolled_up boolean NOT NULL DEFAULT true;
CREATE INDEX report_transactions_not_rolled_up ON report_transactions (settled_us) WHERE NOT revenue_rolled_up;

-- MRR reads the transactions whose service ends within the instant's own day.
CREATE INDEX report_transactions_service_end ON report_transactions (service_end_us);

GRANT SELECT, INSERT, UPDATE, DELETE
    ON report_revenue_months, report_trial_days, report_run_days, report_churn_periods, report_retention_cells,
       report_mrr_days, report_paid_days
    TO subledger_app;

-- Whether the rollups hold the whole ledger: true on an empty ledger, false after this migration on a
-- ledger with events until a rebuild (`subledger migrate` runs one); reports fall back to the facts meanwhile.
CREATE TABLE report_rollup_state (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    complete boolean NOT NULL
);
INSERT INTO report_rollup_state (complete) SELECT NOT EXISTS (SELECT 1 FROM events);
GRANT SELECT, UPDATE ON report_rollup_state TO subledger_app;

CREATE OR REPLACE FUNCTION subledger_projection_tables() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY['windows', 'subscriber_state', 'report_runs', 'report_transactions', 'report_trials',
                 'report_revenue_months', 'report_trial_days', 'report_run_days', 'report_churn_periods',
                 'report_retention_cells', 'report_mrr_days', 'report_paid_days']
$$;

-- Adds cells to the rollups: `cells` is an object of arrays named like the tables, each element an object
-- named like the table's columns (numbers beyond 64 bits as JSON strings). Empty arrays cost no statement.
CREATE FUNCTION subledger_rollup_add(cells jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_array_length(coalesce(cells -> 'report_revenue_months', '[]')) > 0 THEN
        INSERT INTO report_revenue_months AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_revenue_months, cells -> 'report_revenue_months')
            ON CONFLICT (entitlement, month_us, currency) DO UPDATE SET
                transactions = t.transactions + excluded.transactions, billings = t.billings + excluded.billings,
                commission = t.commission + excluded.commission, refunds = t.refunds + excluded.refunds,
                refunded_unrecognized = t.refunded_unrecognized + excluded.refunded_unrecognized,
                refunds_recognized = t.refunds_recognized + excluded.refunds_recognized,
                recognized = t.recognized + excluded.recognized,
                settled_deferred = t.settled_deferred + excluded.settled_deferred;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_trial_days', '[]')) > 0 THEN
        INSERT INTO report_trial_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_trial_days, cells -> 'report_trial_days')
            ON CONFLICT (entitlement, day_us) DO UPDATE SET
                started = t.started + excluded.started, converted = t.converted + excluded.converted;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_run_days', '[]')) > 0 THEN
        INSERT INTO report_run_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_run_days, cells -> 'report_run_days')
            ON CONFLICT (entitlement, day_us) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_churn_periods', '[]')) > 0 THEN
        INSERT INTO report_churn_periods AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_churn_periods, cells -> 'report_churn_periods')
            ON CONFLICT (entitlement, period_interval, period_us) DO UPDATE SET
                new = t.new + excluded.new, reactivated = t.reactivated + excluded.reactivated,
                churned_refund = t.churned_refund + excluded.churned_refund,
                churned_involuntary = t.churned_involuntary + excluded.churned_involuntary,
                churned_voluntary = t.churned_voluntary + excluded.churned_voluntary,
                churned_other = t.churned_other + excluded.churned_other;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_retention_cells', '[]')) > 0 THEN
        INSERT INTO report_retention_cells AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_retention_cells, cells -> 'report_retention_cells')
            ON CONFLICT (entitlement, cohort_us, month_us) DO UPDATE SET delta = t.delta + excluded.delta;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_mrr_days', '[]')) > 0 THEN
        INSERT INTO report_mrr_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_mrr_days, cells -> 'report_mrr_days')
            ON CONFLICT (entitlement, day_us, currency, denominator) DO UPDATE SET
                started = t.started + excluded.started, ended = t.ended + excluded.ended;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_paid_days', '[]')) > 0 THEN
        INSERT INTO report_paid_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_paid_days, cells -> 'report_paid_days')
            ON CONFLICT (entitlement, day_us, currency) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    END IF;
END $$;

-- The projection write and the one-trip append take the rollups' change as one more argument.
DROP FUNCTION subledger_append(bigint, bigint, text[], bigint[], bytea[], timestamptz, text[], bigint[], bigint[],
    uuid[], text[], text[], text[], text[], text[], text[], text[], bytea[], bytea[], bytea[], jsonb, jsonb, jsonb,
    jsonb, jsonb);
DROP FUNCTION subledger_projection_write(text[], jsonb, jsonb, jsonb, jsonb, jsonb);

CREATE FUNCTION subledger_projection_write(
    subscribers text[], window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb,
    rollup_cells jsonb
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM report_runs WHERE subscriber_id = ANY(subscribers);
    DELETE FROM report_transactions WHERE subscriber_id = ANY(subscribers);
    DELETE FROM report_trials WHERE subscriber_id = ANY(subscribers);
    DELETE FROM windows WHERE subscriber_id = ANY(subscribers);
    INSERT INTO windows SELECT * FROM jsonb_populate_recordset(NULL::windows, window_rows);
    INSERT INTO subscriber_state SELECT * FROM jsonb_populate_recordset(NULL::subscriber_state, state_rows)
        ON CONFLICT (subscriber_id) DO UPDATE SET version = excluded.version, auto_renew = excluded.auto_renew,
            lapsed = excluded.lapsed, unmatched_refunds = excluded.unmatched_refunds;
    INSERT INTO report_runs SELECT * FROM jsonb_populate_recordset(NULL::report_runs, run_rows);
    INSERT INTO report_transactions SELECT * FROM jsonb_populate_recordset(NULL::report_transactions, transaction_rows);
    INSERT INTO report_trials SELECT * FROM jsonb_populate_recordset(NULL::report_trials, trial_rows);
    PERFORM subledger_rollup_add(rollup_cells);
END $$;

CREATE FUNCTION subledger_append(
    lock_key bigint, expected_position bigint,
    head_subscribers text[], head_versions bigint[], head_hashes bytea[],
    new_recorded_at timestamptz,
    e_subscribers text[], e_versions bigint[], e_positions bigint[], e_ids uuid[], e_types text[], e_occurred text[],
    e_sources text[], e_environments text[], e_keys text[], e_data text[], e_metadata text[],
    e_fingerprints bytea[], e_prev_hashes bytea[], e_hashes bytea[],
    window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb, rollup_cells jsonb
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    last_position bigint;
    last_recorded timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    SELECT e.position, e.recorded_at INTO last_position, last_recorded FROM events e ORDER BY e.position DESC LIMIT 1;
    IF coalesce(last_position, 0) <> expected_position OR new_recorded_at < last_recorded THEN
        RETURN false;
    END IF;
    IF EXISTS (
        SELECT 1 FROM unnest(head_subscribers, head_versions, head_hashes) AS x(subscriber, version, hash)
        LEFT JOIN LATERAL (
            SELECT e.version, e.hash FROM events e WHERE e.subscriber_id = x.subscriber ORDER BY e.version DESC LIMIT 1
        ) head ON true
        WHERE coalesce(head.version, 0) <> x.version OR (head.version IS NOT NULL AND head.hash <> x.hash)
    ) THEN
        RETURN false;
    END IF;
    INSERT INTO events (subscriber_id, version, position, event_id, type, occurred_at, recorded_at, source,
                        environment, idempotency_key, data, metadata, fingerprint, prev_hash, hash)
    SELECT s, v, p, id, t, o::timestamptz, new_recorded_at, src, env, k, d::jsonb, m::jsonb, f, ph, h
    FROM unnest(e_subscribers, e_versions, e_positions, e_ids, e_types, e_occurred, e_sources, e_environments,
                e_keys, e_data, e_metadata, e_fingerprints, e_prev_hashes, e_hashes)
         AS u(s, v, p, id, t, o, src, env, k, d, m, f, ph, h);
    PERFORM subledger_projection_write(head_subscribers, window_rows, state_rows, run_rows, transaction_rows,
                                       trial_rows, rollup_cells);
    RETURN true;
END $$;
