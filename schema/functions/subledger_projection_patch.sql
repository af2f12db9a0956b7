-- Only the projection rows that changed: the stored rows named in `deletions` go, the given rows come. Right
-- only while the stored rows are the believed streams' fold, which `subledger_append` checks first.
CREATE OR REPLACE FUNCTION subledger_projection_patch(
    deletions jsonb, window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb,
    rollup_cells text
) RETURNS void LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    IF jsonb_array_length(coalesce(deletions -> 'windows', '[]')) > 0 THEN
        DELETE FROM windows w USING jsonb_to_recordset(deletions -> 'windows') AS d(subscriber_id text, seq integer)
        WHERE w.subscriber_id = d.subscriber_id AND w.seq = d.seq;
    END IF;
    IF jsonb_array_length(coalesce(deletions -> 'report_runs', '[]')) > 0 THEN
        DELETE FROM report_runs r
        USING jsonb_to_recordset(deletions -> 'report_runs') AS d(entitlement text, subscriber_id text, start_us int8)
        WHERE r.entitlement = d.entitlement AND r.subscriber_id = d.subscriber_id AND r.start_us = d.start_us;
    END IF;
    IF jsonb_array_length(coalesce(deletions -> 'report_transactions', '[]')) > 0 THEN
        DELETE FROM report_transactions t USING jsonb_to_recordset(deletions -> 'report_transactions') AS d(source_event_id uuid)
        WHERE t.source_event_id = d.source_event_id;
    END IF;
    IF jsonb_array_length(coalesce(deletions -> 'report_trials', '[]')) > 0 THEN
        DELETE FROM report_trials t
        USING jsonb_to_recordset(deletions -> 'report_trials') AS d(source_event_id uuid, entitlement text)
        WHERE t.source_event_id = d.source_event_id AND t.entitlement = d.entitlement;
    END IF;
    PERFORM subledger_projection_insert(window_rows, state_rows, run_rows, transaction_rows, trial_rows, rollup_cells);
END $$;
