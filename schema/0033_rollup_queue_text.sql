-- The queued report cells as text (issue 38: `subledger_append` for one purchase ≤ 0.35 ms). A purchase queues
-- about 27 KB of cells (MRR movement and churn by store, country and product); as `jsonb` the append parsed them
-- and compressed the result with pglz, about 0.5 ms of a purchase's 1 ms in `subledger_append` on this machine
-- (docs/reports.md "Rollups", BENCHMARKS.md). Nothing reads them until the rollup worker, which parses each row
-- once per batch (`subledger_rollup_drain`); so the append stores the text as sent, compressed with lz4 (several
-- times faster than pglz) and kept in the row when it fits, not moved to the TOAST table.
DROP FUNCTION IF EXISTS subledger_append(bigint, bigint, text[], bigint[], bytea[], timestamptz, text[], bigint[], bigint[],
    uuid[], text[], text[], text[], text[], text[], text[], text[], bytea[], bytea[], bytea[], jsonb, jsonb, jsonb, jsonb,
    jsonb, jsonb, jsonb);
DROP FUNCTION IF EXISTS subledger_projection_patch(jsonb, jsonb, jsonb, jsonb, jsonb, jsonb, jsonb);
DROP FUNCTION IF EXISTS subledger_projection_write(text[], jsonb, jsonb, jsonb, jsonb, jsonb, jsonb);
DROP FUNCTION IF EXISTS subledger_projection_insert(jsonb, jsonb, jsonb, jsonb, jsonb, jsonb);

ALTER TABLE report_rollup_queue ALTER COLUMN cells TYPE text USING cells::text;
ALTER TABLE report_rollup_queue SET (toast_tuple_target = 8160);

-- A PostgreSQL built without lz4 keeps its default compression.
DO $$
BEGIN
    ALTER TABLE report_rollup_queue ALTER COLUMN cells SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 is not available: report_rollup_queue.cells keeps the default compression';
END $$;
