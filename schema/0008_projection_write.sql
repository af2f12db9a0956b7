-- An append replaces its subscribers' projection rows (windows, state and the three report-fact tables) in
-- one round trip instead of six: the rows arrive as JSON arrays of objects named like the tables' columns.
-- The deletes run before the inserts (a function's statements run in order; CTEs of one statement would
-- not), so a window keeps its (subscriber_id, seq) key. SECURITY INVOKER: the caller's table privileges
-- apply, as they would to the statements themselves.
CREATE FUNCTION subledger_projection_write(
    subscribers text[], window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb
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
END $$;
