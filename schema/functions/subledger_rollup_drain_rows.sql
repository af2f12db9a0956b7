-- Applies the given rows of `report_rollup_queue` (docs/reports.md "Rollups"), summed per cell so that each
-- rollup table gets one upsert however many rows there are, then deletes them; all in the caller's
-- transaction, so they apply wholly or not at all. The caller holds the rollup lock (`ReportRollupWorker`):
-- `subledger_rollup_follow` queues its batch's cells as one row and applies it here.
CREATE OR REPLACE FUNCTION subledger_rollup_drain_rows(ids int8[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    batch jsonb[];
BEGIN
    -- The rows are text (schema 0033): each is parsed once here, and every statement below reads the parsed batch.
    SELECT array_agg(q.cells::jsonb ORDER BY q.id) INTO batch FROM report_rollup_queue q WHERE q.id = ANY (ids);
    -- Every summed table: its primary key's columns are the cell, the others add up. Written out (generated
    -- from the catalog once) so that PL/pgSQL keeps their plans: built per batch with EXECUTE, the catalog
    -- lookups and planning cost 2 ms a batch. A migration that adds a column to one of these tables adds it here.
    INSERT INTO report_revenue_months AS t (entitlement, month_us, currency, transactions, billings, commission,
        refunds, refunded_unrecognized, refunds_recognized, recognized, settled_deferred, handover, tax)
        SELECT r.entitlement, r.month_us, r.currency, sum(r.transactions)::bigint, sum(r.billings)::numeric,
            sum(r.commission)::numeric, sum(r.refunds)::numeric, sum(r.refunded_unrecognized)::numeric,
            sum(r.refunds_recognized)::numeric, sum(r.recognized)::numeric, sum(r.settled_deferred)::numeric,
            sum(r.handover)::numeric, sum(r.tax)::numeric
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_revenue_months, q.cells ->
            'report_revenue_months') r
        GROUP BY r.entitlement, r.month_us, r.currency
        ON CONFLICT (entitlement, month_us, currency) DO UPDATE SET transactions = t.transactions +
            excluded.transactions, billings = t.billings + excluded.billings, commission = t.commission +
            excluded.commission, refunds = t.refunds + excluded.refunds, refunded_unrecognized =
            t.refunded_unrecognized + excluded.refunded_unrecognized, refunds_recognized =
            t.refunds_recognized + excluded.refunds_recognized, recognized = t.recognized +
            excluded.recognized, settled_deferred = t.settled_deferred + excluded.settled_deferred, handover =
            t.handover + excluded.handover, tax = t.tax + excluded.tax;
    INSERT INTO report_trial_days AS t (entitlement, day_us, started, converted)
        SELECT r.entitlement, r.day_us, sum(r.started)::bigint, sum(r.converted)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_trial_days, q.cells ->
            'report_trial_days') r
        GROUP BY r.entitlement, r.day_us
        ON CONFLICT (entitlement, day_us) DO UPDATE SET started = t.started + excluded.started, converted =
            t.converted + excluded.converted;
    INSERT INTO report_run_days AS t (entitlement, day_us, starts, ends)
        SELECT r.entitlement, r.day_us, sum(r.starts)::bigint, sum(r.ends)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_run_days, q.cells -> 'report_run_days') r
        GROUP BY r.entitlement, r.day_us
        ON CONFLICT (entitlement, day_us) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends +
            excluded.ends;
    INSERT INTO report_churn_periods AS t (entitlement, period_interval, period_us, new, reactivated,
        churned_refund, churned_involuntary, churned_voluntary, churned_other, transferred_in, transferred_out)
        SELECT r.entitlement, r.period_interval, r.period_us, sum(r.new)::bigint, sum(r.reactivated)::bigint,
            sum(r.churned_refund)::bigint, sum(r.churned_involuntary)::bigint,
            sum(r.churned_voluntary)::bigint, sum(r.churned_other)::bigint, sum(r.transferred_in)::bigint,
            sum(r.transferred_out)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_churn_periods, q.cells ->
            'report_churn_periods') r
        GROUP BY r.entitlement, r.period_interval, r.period_us
        ON CONFLICT (entitlement, period_interval, period_us) DO UPDATE SET new = t.new + excluded.new,
            reactivated = t.reactivated + excluded.reactivated, churned_refund = t.churned_refund +
            excluded.churned_refund, churned_involuntary = t.churned_involuntary +
            excluded.churned_involuntary, churned_voluntary = t.churned_voluntary +
            excluded.churned_voluntary, churned_other = t.churned_other + excluded.churned_other,
            transferred_in = t.transferred_in + excluded.transferred_in, transferred_out = t.transferred_out +
            excluded.transferred_out;
    INSERT INTO report_retention_cells AS t (entitlement, cohort_us, month_us, delta)
        SELECT r.entitlement, r.cohort_us, r.month_us, sum(r.delta)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_retention_cells, q.cells ->
            'report_retention_cells') r
        GROUP BY r.entitlement, r.cohort_us, r.month_us
        ON CONFLICT (entitlement, cohort_us, month_us) DO UPDATE SET delta = t.delta + excluded.delta;
    INSERT INTO report_mrr_days AS t (entitlement, day_us, currency, denominator, started, ended)
        SELECT r.entitlement, r.day_us, r.currency, r.denominator, sum(r.started)::numeric, sum(r.ended)::numeric
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_mrr_days, q.cells -> 'report_mrr_days') r
        GROUP BY r.entitlement, r.day_us, r.currency, r.denominator
        ON CONFLICT (entitlement, day_us, currency, denominator) DO UPDATE SET started = t.started +
            excluded.started, ended = t.ended + excluded.ended;
    INSERT INTO report_paid_days AS t (entitlement, day_us, currency, starts, ends)
        SELECT r.entitlement, r.day_us, r.currency, sum(r.starts)::bigint, sum(r.ends)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_paid_days, q.cells -> 'report_paid_days') r
        GROUP BY r.entitlement, r.day_us, r.currency
        ON CONFLICT (entitlement, day_us, currency) DO UPDATE SET starts = t.starts + excluded.starts, ends =
            t.ends + excluded.ends;
    INSERT INTO report_revenue_days AS t (entitlement, day_us, currency, transactions, billings, commission,
        refunds, refunded_unrecognized, refunds_recognized, recognized, settled_deferred, handover, tax)
        SELECT r.entitlement, r.day_us, r.currency, sum(r.transactions)::bigint, sum(r.billings)::numeric,
            sum(r.commission)::numeric, sum(r.refunds)::numeric, sum(r.refunded_unrecognized)::numeric,
            sum(r.refunds_recognized)::numeric, sum(r.recognized)::numeric, sum(r.settled_deferred)::numeric,
            sum(r.handover)::numeric, sum(r.tax)::numeric
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_revenue_days, q.cells ->
            'report_revenue_days') r
        GROUP BY r.entitlement, r.day_us, r.currency
        ON CONFLICT (entitlement, day_us, currency) DO UPDATE SET transactions = t.transactions +
            excluded.transactions, billings = t.billings + excluded.billings, commission = t.commission +
            excluded.commission, refunds = t.refunds + excluded.refunds, refunded_unrecognized =
            t.refunded_unrecognized + excluded.refunded_unrecognized, refunds_recognized =
            t.refunds_recognized + excluded.refunds_recognized, recognized = t.recognized +
            excluded.recognized, settled_deferred = t.settled_deferred + excluded.settled_deferred, handover =
            t.handover + excluded.handover, tax = t.tax + excluded.tax;
    INSERT INTO report_mrr_hours AS t (entitlement, hour_us, currency, denominator, started, ended)
        SELECT r.entitlement, r.hour_us, r.currency, r.denominator, sum(r.started)::numeric, sum(r.ended)::numeric
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_mrr_hours, q.cells -> 'report_mrr_hours') r
        GROUP BY r.entitlement, r.hour_us, r.currency, r.denominator
        ON CONFLICT (entitlement, hour_us, currency, denominator) DO UPDATE SET started = t.started +
            excluded.started, ended = t.ended + excluded.ended;
    INSERT INTO report_paid_hours AS t (entitlement, hour_us, currency, starts, ends)
        SELECT r.entitlement, r.hour_us, r.currency, sum(r.starts)::bigint, sum(r.ends)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_paid_hours, q.cells ->
            'report_paid_hours') r
        GROUP BY r.entitlement, r.hour_us, r.currency
        ON CONFLICT (entitlement, hour_us, currency) DO UPDATE SET starts = t.starts + excluded.starts, ends =
            t.ends + excluded.ends;
    INSERT INTO report_mrr_rate_days AS t (entitlement, day_us, currency, occurred_day_us, denominator, started, ended)
        SELECT r.entitlement, r.day_us, r.currency, r.occurred_day_us, r.denominator, sum(r.started)::numeric,
            sum(r.ended)::numeric
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_mrr_rate_days, q.cells ->
            'report_mrr_rate_days') r
        GROUP BY r.entitlement, r.day_us, r.currency, r.occurred_day_us, r.denominator
        ON CONFLICT (entitlement, day_us, currency, occurred_day_us, denominator) DO UPDATE SET started = t.started +
            excluded.started, ended = t.ended + excluded.ended;
    INSERT INTO report_paid_any_days AS t (entitlement, day_us, starts, ends)
        SELECT r.entitlement, r.day_us, sum(r.starts)::bigint, sum(r.ends)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_paid_any_days, q.cells ->
            'report_paid_any_days') r
        GROUP BY r.entitlement, r.day_us
        ON CONFLICT (entitlement, day_us) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    INSERT INTO report_mrr_dimension_days AS t (entitlement, dimension, day_us, currency, value, denominator, started, ended)
        SELECT r.entitlement, r.dimension, r.day_us, r.currency, r.value, r.denominator, sum(r.started)::numeric,
            sum(r.ended)::numeric
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_mrr_dimension_days, q.cells ->
            'report_mrr_dimension_days') r
        GROUP BY r.entitlement, r.dimension, r.day_us, r.currency, r.value, r.denominator
        ON CONFLICT (entitlement, dimension, day_us, currency, value, denominator) DO UPDATE SET started = t.started +
            excluded.started, ended = t.ended + excluded.ended;
    INSERT INTO report_paid_dimension_days AS t (entitlement, dimension, day_us, currency, value, starts, ends)
        SELECT r.entitlement, r.dimension, r.day_us, r.currency, r.value, sum(r.starts)::bigint, sum(r.ends)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_paid_dimension_days, q.cells ->
            'report_paid_dimension_days') r
        GROUP BY r.entitlement, r.dimension, r.day_us, r.currency, r.value
        ON CONFLICT (entitlement, dimension, day_us, currency, value) DO UPDATE SET starts = t.starts + excluded.starts,
            ends = t.ends + excluded.ends;
    INSERT INTO report_mrr_rate_hours AS t (entitlement, hour_us, currency, occurred_day_us, denominator, started, ended)
        SELECT r.entitlement, r.hour_us, r.currency, r.occurred_day_us, r.denominator, sum(r.started)::numeric,
            sum(r.ended)::numeric
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_mrr_rate_hours, q.cells ->
            'report_mrr_rate_hours') r
        GROUP BY r.entitlement, r.hour_us, r.currency, r.occurred_day_us, r.denominator
        ON CONFLICT (entitlement, hour_us, currency, occurred_day_us, denominator) DO UPDATE SET started = t.started +
            excluded.started, ended = t.ended + excluded.ended;
    INSERT INTO report_paid_any_hours AS t (entitlement, hour_us, starts, ends)
        SELECT r.entitlement, r.hour_us, sum(r.starts)::bigint, sum(r.ends)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_paid_any_hours, q.cells ->
            'report_paid_any_hours') r
        GROUP BY r.entitlement, r.hour_us
        ON CONFLICT (entitlement, hour_us) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    INSERT INTO report_refund_days AS t (entitlement, day_us, currency, store, country, product_id, refunds, amount,
        refunded_transactions, paid_transactions)
        SELECT r.entitlement, r.day_us, r.currency, r.store, r.country, r.product_id, sum(r.refunds)::bigint,
            sum(r.amount)::numeric, sum(r.refunded_transactions)::bigint, sum(r.paid_transactions)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_refund_days, q.cells -> 'report_refund_days') r
        GROUP BY r.entitlement, r.day_us, r.currency, r.store, r.country, r.product_id
        ON CONFLICT (entitlement, day_us, currency, store, country, product_id) DO UPDATE SET refunds = t.refunds +
            excluded.refunds, amount = t.amount + excluded.amount, refunded_transactions = t.refunded_transactions +
            excluded.refunded_transactions, paid_transactions = t.paid_transactions + excluded.paid_transactions;
    INSERT INTO report_refund_repeats AS t (entitlement, period_interval, period_us, currency, store, country, product_id,
        repeats)
        SELECT r.entitlement, r.period_interval, r.period_us, r.currency, r.store, r.country, r.product_id,
            sum(r.repeats)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_refund_repeats, q.cells ->
            'report_refund_repeats') r
        GROUP BY r.entitlement, r.period_interval, r.period_us, r.currency, r.store, r.country, r.product_id
        ON CONFLICT (entitlement, period_interval, period_us, currency, store, country, product_id) DO UPDATE SET
            repeats = t.repeats + excluded.repeats;
    INSERT INTO report_conversion_days AS t (entitlement, day_us, store, country, product_id, wait_days, subscribers)
        SELECT r.entitlement, r.day_us, r.store, r.country, r.product_id, r.wait_days, sum(r.subscribers)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_conversion_days, q.cells ->
            'report_conversion_days') r
        GROUP BY r.entitlement, r.day_us, r.store, r.country, r.product_id, r.wait_days
        ON CONFLICT (entitlement, day_us, store, country, product_id, wait_days) DO UPDATE SET subscribers =
            t.subscribers + excluded.subscribers;
    INSERT INTO report_conversion_holders AS t (entitlement, day_us, store, country, product_id, held, wait_days, subscribers)
        SELECT r.entitlement, r.day_us, r.store, r.country, r.product_id, r.held, r.wait_days, sum(r.subscribers)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_conversion_holders, q.cells ->
            'report_conversion_holders') r
        GROUP BY r.entitlement, r.day_us, r.store, r.country, r.product_id, r.held, r.wait_days
        ON CONFLICT (entitlement, day_us, store, country, product_id, held, wait_days) DO UPDATE SET subscribers =
            t.subscribers + excluded.subscribers;
    INSERT INTO report_ltv_cells AS t (entitlement, cohort_us, currency, store, country, product_id, month_us, members,
        gross, proceeds)
        SELECT r.entitlement, r.cohort_us, r.currency, r.store, r.country, r.product_id, r.month_us,
            sum(r.members)::bigint, sum(r.gross)::numeric, sum(r.proceeds)::numeric
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_ltv_cells, q.cells -> 'report_ltv_cells') r
        GROUP BY r.entitlement, r.cohort_us, r.currency, r.store, r.country, r.product_id, r.month_us
        ON CONFLICT (entitlement, cohort_us, currency, store, country, product_id, month_us) DO UPDATE SET members =
            t.members + excluded.members, gross = t.gross + excluded.gross, proceeds = t.proceeds + excluded.proceeds;
    INSERT INTO report_mrr_movement AS t (entitlement, dimension, period_interval, period_us, value, currency, part,
        denominator, amount)
        SELECT r.entitlement, r.dimension, r.period_interval, r.period_us, r.value, r.currency, r.part, r.denominator,
            sum(r.amount)::numeric
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_mrr_movement, q.cells -> 'report_mrr_movement') r
        GROUP BY r.entitlement, r.dimension, r.period_interval, r.period_us, r.value, r.currency, r.part, r.denominator
        ON CONFLICT (entitlement, dimension, period_interval, period_us, value, currency, part, denominator) DO UPDATE SET
            amount = t.amount + excluded.amount;
    INSERT INTO report_revenue_month_dims AS t (entitlement, month_us, currency, store, country, product_id, transactions,
        billings, tax, commission, refunds, refunded_unrecognized, refunds_recognized, recognized, settled_deferred, handover)
        SELECT r.entitlement, r.month_us, r.currency, r.store, r.country, r.product_id, sum(r.transactions)::bigint,
            sum(r.billings)::numeric, sum(r.tax)::numeric, sum(r.commission)::numeric, sum(r.refunds)::numeric,
            sum(r.refunded_unrecognized)::numeric, sum(r.refunds_recognized)::numeric, sum(r.recognized)::numeric,
            sum(r.settled_deferred)::numeric, sum(r.handover)::numeric
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_revenue_month_dims, q.cells ->
            'report_revenue_month_dims') r
        GROUP BY r.entitlement, r.month_us, r.currency, r.store, r.country, r.product_id
        ON CONFLICT (entitlement, month_us, currency, store, country, product_id) DO UPDATE SET transactions =
            t.transactions + excluded.transactions, billings = t.billings + excluded.billings, tax = t.tax + excluded.tax,
            commission = t.commission + excluded.commission, refunds = t.refunds + excluded.refunds,
            refunded_unrecognized = t.refunded_unrecognized + excluded.refunded_unrecognized, refunds_recognized =
            t.refunds_recognized + excluded.refunds_recognized, recognized = t.recognized + excluded.recognized,
            settled_deferred = t.settled_deferred + excluded.settled_deferred, handover = t.handover + excluded.handover;
    INSERT INTO report_trial_day_dims AS t (entitlement, day_us, store, country, product_id, started, converted)
        SELECT r.entitlement, r.day_us, r.store, r.country, r.product_id, sum(r.started)::bigint, sum(r.converted)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_trial_day_dims, q.cells -> 'report_trial_day_dims') r
        GROUP BY r.entitlement, r.day_us, r.store, r.country, r.product_id
        ON CONFLICT (entitlement, day_us, store, country, product_id) DO UPDATE SET started = t.started + excluded.started,
            converted = t.converted + excluded.converted;
    INSERT INTO report_churn_active_days AS t (entitlement, grants, store, country, product_id, day_us, starts, ends)
        SELECT r.entitlement, r.grants, r.store, r.country, r.product_id, r.day_us, sum(r.starts)::bigint, sum(r.ends)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_churn_active_days, q.cells ->
            'report_churn_active_days') r
        GROUP BY r.entitlement, r.grants, r.day_us, r.store, r.country, r.product_id
        ON CONFLICT (entitlement, grants, day_us, store, country, product_id) DO UPDATE SET starts = t.starts +
            excluded.starts, ends = t.ends + excluded.ends;
    INSERT INTO report_churn_moves AS t (entitlement, grants, store, country, product_id, period_interval, period_us, new,
        reactivated, churned_refund, churned_involuntary, churned_voluntary, churned_other, transferred_in, transferred_out)
        SELECT r.entitlement, r.grants, r.store, r.country, r.product_id, r.period_interval, r.period_us, sum(r.new)::bigint,
            sum(r.reactivated)::bigint, sum(r.churned_refund)::bigint, sum(r.churned_involuntary)::bigint,
            sum(r.churned_voluntary)::bigint, sum(r.churned_other)::bigint, sum(r.transferred_in)::bigint,
            sum(r.transferred_out)::bigint
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_churn_moves, q.cells -> 'report_churn_moves') r
        GROUP BY r.entitlement, r.grants, r.period_interval, r.period_us, r.store, r.country, r.product_id
        ON CONFLICT (entitlement, grants, period_interval, period_us, store, country, product_id) DO UPDATE SET new =
            t.new + excluded.new, reactivated = t.reactivated + excluded.reactivated, churned_refund = t.churned_refund +
            excluded.churned_refund, churned_involuntary = t.churned_involuntary + excluded.churned_involuntary,
            churned_voluntary = t.churned_voluntary + excluded.churned_voluntary, churned_other = t.churned_other +
            excluded.churned_other, transferred_in = t.transferred_in + excluded.transferred_in, transferred_out =
            t.transferred_out + excluded.transferred_out;
    -- Revenue moves are rows of their own queue (schema 0017), in the order they were queued.
    INSERT INTO report_revenue_pending (change, source_event_id, entitlements, kind, currency, gross, commission,
                                        occurred_us, start_us, end_us, stop_us, refund_at_us, refund_amount, refund_cut,
                                        held_from_us, handed_over_us, tax, country, store, product_id)
        SELECT r.change, r.source_event_id, r.entitlements, r.kind, r.currency, r.gross, r.commission, r.occurred_us, r.start_us,
               r.end_us, r.stop_us, r.refund_at_us, r.refund_amount, r.refund_cut, r.held_from_us, r.handed_over_us, r.tax,
               r.country, coalesce(r.store, ''), coalesce(r.product_id, '')
        FROM unnest(batch) WITH ORDINALITY AS q(cells, n), jsonb_populate_recordset(NULL::report_revenue_pending, q.cells -> 'report_revenue_pending') r
        ORDER BY q.n;
    UPDATE report_rollup_state
       SET applied_position = greatest(applied_position, (SELECT max(q.position) FROM report_rollup_queue q WHERE q.id = ANY (ids)));
    DELETE FROM report_rollup_queue WHERE id = ANY (ids);
END $$;
