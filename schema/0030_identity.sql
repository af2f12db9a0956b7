-- Identity (docs/identity.md): who owns a purchase, merges and the transfer policy.

-- A merged subscriber's reads say where it went: written with its other state by every projection write.
ALTER TABLE subscriber_state ADD COLUMN merged_into text;

-- Appends naming a merged subscriber are refused: found by this small index, not by reading its stream.
CREATE INDEX events_merged ON events (subscriber_id) WHERE type = 'merged';

-- Per subscriber, whether its purchases may leave it (the ledger-wide default is `serve --transfer-policy`).
CREATE TABLE transfer_policies (
    subscriber_id text        PRIMARY KEY,
    policy        text        NOT NULL CHECK (policy IN ('transfer', 'transfer_if_no_active', 'keep')),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE, DELETE ON transfer_policies TO subledger_app;

-- The inserts both projection writes share (schema 0016, 0020), with merged_into.
CREATE OR REPLACE FUNCTION subledger_projection_insert(
    window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb, rollup_cells jsonb
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_array_length(window_rows) > 0 THEN
        INSERT INTO windows SELECT * FROM jsonb_populate_recordset(NULL::windows, window_rows);
    END IF;
    INSERT INTO subscriber_state SELECT * FROM jsonb_populate_recordset(NULL::subscriber_state, state_rows)
        ON CONFLICT (subscriber_id) DO UPDATE SET version = excluded.version, will_renew = excluded.will_renew,
            unmatched_refunds = excluded.unmatched_refunds, merged_into = excluded.merged_into;
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
