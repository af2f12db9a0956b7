-- Applies the oldest queued report cells (schema 0029): at most `max_rows` rows of `report_rollup_queue`, in the
-- caller's transaction, under the rollup lock. Since schema 0034 appends queue nothing (`ReportRollupWorker`
-- follows the log: `subledger_rollup_follow`); this empties what a server of an earlier version left.
-- Returns how many rows were applied; 0: the queue is empty.
CREATE OR REPLACE FUNCTION subledger_rollup_drain(max_rows integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    ids int8[];
BEGIN
    SELECT array_agg(q.id ORDER BY q.id) INTO ids FROM (SELECT id FROM report_rollup_queue ORDER BY id LIMIT max_rows) q;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM subledger_rollup_drain_rows(ids);
    RETURN cardinality(ids);
END $$;
