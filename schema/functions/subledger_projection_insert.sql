-- The inserts both projection writes share (`subledger_projection_write`, `subledger_projection_patch`). A
-- table with no rows to insert (or NULL rows) costs no statement.
CREATE OR REPLACE FUNCTION subledger_projection_insert(
    window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb, rollup_cells text
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_array_length(window_rows) > 0 THEN
        INSERT INTO windows SELECT * FROM jsonb_populate_recordset(NULL::windows, window_rows);
    END IF;
    IF state_rows IS NOT NULL THEN
        INSERT INTO subscriber_state SELECT * FROM jsonb_populate_recordset(NULL::subscriber_state, state_rows)
            ON CONFLICT (subscriber_id) DO UPDATE SET version = excluded.version, will_renew = excluded.will_renew,
                unmatched_refunds = excluded.unmatched_refunds, merged_into = excluded.merged_into,
                first_seen_us = excluded.first_seen_us;
    END IF;
    IF jsonb_array_length(run_rows) > 0 THEN
        INSERT INTO report_runs SELECT * FROM jsonb_populate_recordset(NULL::report_runs, run_rows);
    END IF;
    IF jsonb_array_length(transaction_rows) > 0 THEN
        INSERT INTO report_transactions SELECT * FROM jsonb_populate_recordset(NULL::report_transactions, transaction_rows);
    END IF;
    IF jsonb_array_length(trial_rows) > 0 THEN
        INSERT INTO report_trials SELECT * FROM jsonb_populate_recordset(NULL::report_trials, trial_rows);
    END IF;
    -- `rollup_cells` is no longer written (schema 0034): `ReportRollupWorker` computes the report cells as it
    -- follows the log (`subledger_rollup_follow`). Cells a server of an earlier version sends are dropped, so
    -- that nothing counts twice.
END $$;
