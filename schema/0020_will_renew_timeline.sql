-- `will_renew` is a function of the instant asked about (docs/semantics.md section 3, "Entitlement state at
-- a time T"): true while an auto-renewable or grace window covers T, auto-renew is on at T and no expiration
-- or cancellation has ended the subscription by T. The fold computes, per entitlement, the instants at which
-- it turns on and off, and the projection keeps them instead of the last `auto_renew_changed` value and the
-- set of lapsed entitlements (which said nothing about T). `subledger migrate` rebuilds the projections
-- after this migration, which writes the new column for every subscriber; until then a reader takes the old
-- values (`{"pro": true}`) as no timeline at all (will_renew false), never as a wrong one.
ALTER TABLE subscriber_state DROP COLUMN lapsed;
ALTER TABLE subscriber_state RENAME COLUMN auto_renew TO will_renew;
COMMENT ON COLUMN subscriber_state.will_renew IS
    'per entitlement: the instants (RFC 3339) at which will_renew turns on and off, alternately, on first: {"pro": ["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]}';

-- The inserts both projection writes share (schema 0016), with the renamed column.
CREATE OR REPLACE FUNCTION subledger_projection_insert(
    window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb, rollup_cells jsonb
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_array_length(window_rows) > 0 THEN
        INSERT INTO windows SELECT * FROM jsonb_populate_recordset(NULL::windows, window_rows);
    END IF;
    INSERT INTO subscriber_state SELECT * FROM jsonb_populate_recordset(NULL::subscriber_state, state_rows)
        ON CONFLICT (subscriber_id) DO UPDATE SET version = excluded.version, will_renew = excluded.will_renew,
            unmatched_refunds = excluded.unmatched_refunds;
    IF jsonb_array_length(run_rows) > 0 THEN
        INSERT INTO report_runs SELECT * FROM jsonb_populate_recordset(NULL::report_runs, run_rows);
    END IF;
    IF jsonb_array_length(transaction_rows) > 0 THEN
        INSERT INTO report_transactions SELECT * FROM jsonb_populate_recordset(NULL::report_transactions, transaction_rows);
    END IF;
    IF jsonb_array_length(trial_rows) > 0 THEN
        INSERT INTO report_trials SELECT * FROM jsonb_populate_recordset(NULL::report_trials, trial_rows);
    END IF;
    PERFORM subledger_rollup_add(rollup_cells);
END $$;
