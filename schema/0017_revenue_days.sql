-- Revenue per day (issue 21, docs/reports.md "Rollups"): day and week grids read day cells instead of every
-- transaction of their range (two years by week on ten million events took longer than the statement
-- timeout). A monthly transaction moves in about thirty days, too many cells to write under the append lock,
-- so an append writes each changed transaction once into `report_revenue_pending` (+1 added, −1 taken off)
-- and a background worker (`RevenueDayWorker`) turns the queue into day cells; a report adds what is still
-- queued, so it includes every committed event. The rebuild writes the day cells afresh and leaves the queue
-- empty.

-- Per day, like report_revenue_months per month.
CREATE TABLE report_revenue_days (
    entitlement           text    NOT NULL,
    day_us                int8    NOT NULL,
    currency              text    NOT NULL,
    transactions          int8    NOT NULL,
    billings              numeric NOT NULL,
    commission            numeric NOT NULL,
    refunds               numeric NOT NULL,
    refunded_unrecognized numeric NOT NULL,
    refunds_recognized    numeric NOT NULL,
    recognized            numeric NOT NULL,
    settled_deferred      numeric NOT NULL,
    PRIMARY KEY (entitlement, day_us, currency)
);

-- Transactions whose day cells are still to be added (`change` > 0) or taken off (< 0): the revenue columns
-- of report_transactions. A random id per row, so that the worker deletes exactly the rows it applied.
CREATE TABLE report_revenue_pending (
    pending_id      uuid    PRIMARY KEY,
    change          int8    NOT NULL,
    source_event_id uuid    NOT NULL,
    entitlements    text[]  NOT NULL,
    kind            text    NOT NULL,
    currency        text    NOT NULL,
    gross           int8    NOT NULL,
    commission      int8    NOT NULL,
    occurred_us     int8    NOT NULL,
    start_us        int8    NOT NULL,
    end_us          int8,
    stop_us         int8,
    refund_at_us    int8[]  NOT NULL,
    refund_amount   int8[]  NOT NULL,
    refund_cut      boolean[] NOT NULL
);

-- Transactions whose revenue would take more day cells than `ReportRollup.maxRevenueDayCells` are read from
-- the facts by day and week grids.
ALTER TABLE report_transactions ADD COLUMN revenue_rolled_up_days boolean NOT NULL DEFAULT true;
CREATE INDEX report_transactions_not_rolled_up_days ON report_transactions (settled_us) WHERE NOT revenue_rolled_up_days;

GRANT SELECT, INSERT, UPDATE, DELETE ON report_revenue_days, report_revenue_pending TO subledger_app;

-- A ledger with events has no day cells until a rebuild (`subledger migrate` runs one).
UPDATE report_rollup_state SET complete = false WHERE EXISTS (SELECT 1 FROM events);

CREATE OR REPLACE FUNCTION subledger_projection_tables() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY['windows', 'subscriber_state', 'report_runs', 'report_transactions', 'report_trials',
                 'report_revenue_months', 'report_trial_days', 'report_run_days', 'report_churn_periods',
                 'report_retention_cells', 'report_mrr_days', 'report_paid_days', 'report_revenue_days',
                 'report_revenue_pending']
$$;

CREATE OR REPLACE FUNCTION subledger_rollup_add(cells jsonb) RETURNS void LANGUAGE plpgsql AS $$
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
    IF jsonb_array_length(coalesce(cells -> 'report_revenue_days', '[]')) > 0 THEN
        INSERT INTO report_revenue_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_revenue_days, cells -> 'report_revenue_days')
            ON CONFLICT (entitlement, day_us, currency) DO UPDATE SET
                transactions = t.transactions + excluded.transactions, billings = t.billings + excluded.billings,
                commission = t.commission + excluded.commission, refunds = t.refunds + excluded.refunds,
                refunded_unrecognized = t.refunded_unrecognized + excluded.refunded_unrecognized,
                refunds_recognized = t.refunds_recognized + excluded.refunds_recognized,
                recognized = t.recognized + excluded.recognized,
                settled_deferred = t.settled_deferred + excluded.settled_deferred;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_revenue_pending', '[]')) > 0 THEN
        INSERT INTO report_revenue_pending
            SELECT * FROM jsonb_populate_recordset(NULL::report_revenue_pending, cells -> 'report_revenue_pending');
    END IF;
END $$;

