-- One batch of `ReportRollupWorker` as it follows the log (schema 0034, docs/reports.md "Rollups"): the events
-- after `from_position` up to `through` change the touched subscribers' report facts (the rows named in
-- `deletions` go, the given rows come, as `subledger_projection_patch` does) and the rollup cells by `cells`
-- (the change of those subscribers' facts, as text; NULL: no cell changes), and the cursor moves to
-- `through`; all in the caller's transaction, under the rollup lock. Returns false, having written nothing,
-- when the cursor is not at `from_position` (another writer moved it, or a rebuild reset it). No
-- `SET enable_seqscan = off` here (the patch sets it for its deletions only): on the one-row state table it made
-- every statement's estimated cost huge enough for JIT compilation, 50–70 ms a statement.
CREATE OR REPLACE FUNCTION subledger_rollup_follow(
    from_position int8, through int8, deletions jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb, cells text
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    queued int8;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM report_rollup_state WHERE complete AND applied_position = from_position) THEN
        RETURN false;
    END IF;
    PERFORM subledger_projection_patch(deletions, NULL, NULL, run_rows, transaction_rows, trial_rows, NULL);
    IF cells IS NOT NULL THEN
        -- The summing upserts of the drain, on this batch's cells alone: the row lives only inside this
        -- transaction (appends queue nothing since schema 0034).
        INSERT INTO report_rollup_queue (position, cells) VALUES (through, cells) RETURNING id INTO queued;
        PERFORM subledger_rollup_drain_rows(ARRAY[queued]);
    END IF;
    UPDATE report_rollup_state SET applied_position = through;
    RETURN true;
END $$;
