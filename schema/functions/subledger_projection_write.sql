-- The projection rows of the given subscribers replaced, table by table (NULL rows: that table is left alone), in one round trip: the general append path and the
-- import's refold. The deletes go through the subscriber indexes whatever the cached generic plan thinks
-- (enable_seqscan off: on a young ledger the generic plan scanned whole tables under the append lock).
-- SECURITY INVOKER: the caller's table privileges apply.
CREATE OR REPLACE FUNCTION subledger_projection_write(
    subscribers text[], window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb,
    rollup_cells text
) RETURNS void LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    -- A table whose rows are NULL is not the caller's to write: the report facts are `ReportRollupWorker`'s
    -- (schema 0034), the append and the rebuild's catch-up write the subscriber's own tables.
    IF cardinality(subscribers) > 0 THEN
        IF run_rows IS NOT NULL THEN
            DELETE FROM report_runs WHERE subscriber_id = ANY(subscribers);
        END IF;
        IF transaction_rows IS NOT NULL THEN
            DELETE FROM report_transactions WHERE subscriber_id = ANY(subscribers);
        END IF;
        IF trial_rows IS NOT NULL THEN
            DELETE FROM report_trials WHERE subscriber_id = ANY(subscribers);
        END IF;
        IF window_rows IS NOT NULL THEN
            DELETE FROM windows WHERE subscriber_id = ANY(subscribers);
        END IF;
    END IF;
    PERFORM subledger_projection_insert(window_rows, state_rows, run_rows, transaction_rows, trial_rows, rollup_cells);
END $$;
