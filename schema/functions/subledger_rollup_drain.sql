-- Applies the oldest queued report cells (schema 0029, docs/reports.md "Rollups"): at most `max_rows` rows of
-- `report_rollup_queue`, summed per cell so that each rollup table gets one upsert however many appends the
-- batch holds, then deleted; all in the caller's transaction, so a batch applies wholly or not at all (a
-- killed worker leaves the rows queued for the next one). The caller holds the rollup lock
-- (`ReportRollupWorker`). Returns how many rows were applied; 0: the queue is empty.
CREATE OR REPLACE FUNCTION subledger_rollup_drain(max_rows integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    ids int8[];
    t text;
    selected text;
    grouped text;
    conflict text;
    sums text;
BEGIN
    SELECT array_agg(q.id) INTO ids FROM (SELECT id FROM report_rollup_queue ORDER BY id LIMIT max_rows) q;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    -- Every summed table: its primary key's columns are the cell, the others add up.
    FOREACH t IN ARRAY ARRAY['report_revenue_months', 'report_trial_days', 'report_run_days', 'report_churn_periods',
                             'report_retention_cells', 'report_mrr_days', 'report_paid_days', 'report_revenue_days',
                             'report_mrr_hours', 'report_paid_hours'] LOOP
        SELECT string_agg(CASE WHEN a.attnum = ANY (i.indkey::int2[]) THEN format('r.%I', a.attname)
                               ELSE format('sum(r.%I)::%s', a.attname, format_type(a.atttypid, a.atttypmod)) END,
                          ', ' ORDER BY a.attnum),
               string_agg(format('r.%I', a.attname), ', ' ORDER BY a.attnum) FILTER (WHERE a.attnum = ANY (i.indkey::int2[])),
               string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum) FILTER (WHERE a.attnum = ANY (i.indkey::int2[])),
               string_agg(format('%1$I = t.%1$I + excluded.%1$I', a.attname), ', ' ORDER BY a.attnum)
                   FILTER (WHERE NOT a.attnum = ANY (i.indkey::int2[]))
          INTO selected, grouped, conflict, sums
          FROM pg_attribute a JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
         WHERE a.attrelid = t::regclass AND a.attnum > 0 AND NOT a.attisdropped;
        EXECUTE format(
            'INSERT INTO %1$I AS t SELECT %2$s FROM report_rollup_queue q, jsonb_populate_recordset(NULL::%1$I, q.cells -> %1$L) r '
            'WHERE q.id = ANY ($1) GROUP BY %3$s ON CONFLICT (%4$s) DO UPDATE SET %5$s',
            t, selected, grouped, conflict, sums) USING ids;
    END LOOP;
    -- Revenue moves are rows of their own queue (schema 0017), in the order they were queued.
    INSERT INTO report_revenue_pending (change, source_event_id, entitlements, kind, currency, gross, commission,
                                        occurred_us, start_us, end_us, stop_us, refund_at_us, refund_amount, refund_cut,
                                        held_from_us, handed_over_us, tax)
        SELECT r.change, r.source_event_id, r.entitlements, r.kind, r.currency, r.gross, r.commission, r.occurred_us, r.start_us,
               r.end_us, r.stop_us, r.refund_at_us, r.refund_amount, r.refund_cut, r.held_from_us, r.handed_over_us, r.tax
        FROM report_rollup_queue q, jsonb_populate_recordset(NULL::report_revenue_pending, q.cells -> 'report_revenue_pending') r
        WHERE q.id = ANY (ids) ORDER BY q.id;
    UPDATE report_rollup_state
       SET applied_position = greatest(applied_position, (SELECT max(q.position) FROM report_rollup_queue q WHERE q.id = ANY (ids)));
    DELETE FROM report_rollup_queue WHERE id = ANY (ids);
    RETURN cardinality(ids);
END $$;
