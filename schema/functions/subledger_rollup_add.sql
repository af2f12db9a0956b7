-- Adds cells to the report rollups (docs/reports.md, "Rollups"): `cells` is an object of arrays named like
-- the tables, each element an object named like the table's columns (numbers beyond 64 bits as JSON
-- strings). Empty arrays cost no statement; revenue moves go to the queue RevenueDayWorker empties.
CREATE OR REPLACE FUNCTION subledger_rollup_add(cells jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_array_length(coalesce(cells -> 'report_revenue_months', '[]')) > 0 THEN
        INSERT INTO report_revenue_months AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_revenue_months, cells -> 'report_revenue_months')
            ON CONFLICT (entitlement, month_us, currency) DO UPDATE SET
                transactions = t.transactions + excluded.transactions, billings = t.billings + excluded.billings,
                tax = t.tax + excluded.tax, commission = t.commission + excluded.commission, refunds = t.refunds + excluded.refunds,
                refunded_unrecognized = t.refunded_unrecognized + excluded.refunded_unrecognized,
                refunds_recognized = t.refunds_recognized + excluded.refunds_recognized,
                recognized = t.recognized + excluded.recognized,
                settled_deferred = t.settled_deferred + excluded.settled_deferred,
                handover = t.handover + excluded.handover;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_trial_days', '[]')) > 0 THEN
        INSERT INTO report_trial_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_trial_days, cells -> 'report_trial_days')
            ON CONFLICT (entitlement, day_us) DO UPDATE SET
                started = t.started + excluded.started, converted = t.converted + excluded.converted;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_run_days', '[]')) > 0 THEN
        INSERT INTO report_run_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_run_days, cells -> 'report_run_days')
            ON CONFLICT (entitlement, day_us) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_churn_periods', '[]')) > 0 THEN
        INSERT INTO report_churn_periods AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_churn_periods, cells -> 'report_churn_periods')
            ON CONFLICT (entitlement, period_interval, period_us) DO UPDATE SET
                new = t.new + excluded.new, reactivated = t.reactivated + excluded.reactivated,
                churned_refund = t.churned_refund + excluded.churned_refund,
                churned_involuntary = t.churned_involuntary + excluded.churned_involuntary,
                churned_voluntary = t.churned_voluntary + excluded.churned_voluntary,
                churned_other = t.churned_other + excluded.churned_other,
                transferred_in = t.transferred_in + excluded.transferred_in,
                transferred_out = t.transferred_out + excluded.transferred_out;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_retention_cells', '[]')) > 0 THEN
        INSERT INTO report_retention_cells AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_retention_cells, cells -> 'report_retention_cells')
            ON CONFLICT (entitlement, cohort_us, month_us) DO UPDATE SET delta = t.delta + excluded.delta;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_mrr_days', '[]')) > 0 THEN
        INSERT INTO report_mrr_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_mrr_days, cells -> 'report_mrr_days')
            ON CONFLICT (entitlement, day_us, currency, denominator) DO UPDATE SET
                started = t.started + excluded.started, ended = t.ended + excluded.ended;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_paid_days', '[]')) > 0 THEN
        INSERT INTO report_paid_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_paid_days, cells -> 'report_paid_days')
            ON CONFLICT (entitlement, day_us, currency) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_revenue_days', '[]')) > 0 THEN
        INSERT INTO report_revenue_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_revenue_days, cells -> 'report_revenue_days')
            ON CONFLICT (entitlement, day_us, currency) DO UPDATE SET
                transactions = t.transactions + excluded.transactions, billings = t.billings + excluded.billings,
                tax = t.tax + excluded.tax, commission = t.commission + excluded.commission, refunds = t.refunds + excluded.refunds,
                refunded_unrecognized = t.refunded_unrecognized + excluded.refunded_unrecognized,
                refunds_recognized = t.refunds_recognized + excluded.refunds_recognized,
                recognized = t.recognized + excluded.recognized,
                settled_deferred = t.settled_deferred + excluded.settled_deferred,
                handover = t.handover + excluded.handover;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_revenue_pending', '[]')) > 0 THEN
        INSERT INTO report_revenue_pending (change, source_event_id, entitlements, kind, currency, gross, commission,
                                            occurred_us, start_us, end_us, stop_us, refund_at_us, refund_amount, refund_cut,
                                            held_from_us, handed_over_us, tax, country, store, product_id)
            SELECT change, source_event_id, entitlements, kind, currency, gross, commission, occurred_us, start_us, end_us,
                   stop_us, refund_at_us, refund_amount, refund_cut, held_from_us, handed_over_us, tax, country, coalesce(store, ''),
                   coalesce(product_id, '')
            FROM jsonb_populate_recordset(NULL::report_revenue_pending, cells -> 'report_revenue_pending');
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_mrr_hours', '[]')) > 0 THEN
        INSERT INTO report_mrr_hours AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_mrr_hours, cells -> 'report_mrr_hours')
            ON CONFLICT (entitlement, hour_us, currency, denominator) DO UPDATE SET
                started = t.started + excluded.started, ended = t.ended + excluded.ended;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_paid_hours', '[]')) > 0 THEN
        INSERT INTO report_paid_hours AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_paid_hours, cells -> 'report_paid_hours')
            ON CONFLICT (entitlement, hour_us, currency) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_refund_days', '[]')) > 0 THEN
        INSERT INTO report_refund_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_refund_days, cells -> 'report_refund_days')
            ON CONFLICT (entitlement, day_us, currency, store, country, product_id) DO UPDATE SET
                refunds = t.refunds + excluded.refunds, amount = t.amount + excluded.amount,
                refunded_transactions = t.refunded_transactions + excluded.refunded_transactions,
                paid_transactions = t.paid_transactions + excluded.paid_transactions;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_refund_repeats', '[]')) > 0 THEN
        INSERT INTO report_refund_repeats AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_refund_repeats, cells -> 'report_refund_repeats')
            ON CONFLICT (entitlement, period_interval, period_us, currency, store, country, product_id) DO UPDATE SET
                repeats = t.repeats + excluded.repeats;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_conversion_days', '[]')) > 0 THEN
        INSERT INTO report_conversion_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_conversion_days, cells -> 'report_conversion_days')
            ON CONFLICT (entitlement, day_us, store, country, product_id, wait_days) DO UPDATE SET
                subscribers = t.subscribers + excluded.subscribers;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_ltv_cells', '[]')) > 0 THEN
        INSERT INTO report_ltv_cells AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_ltv_cells, cells -> 'report_ltv_cells')
            ON CONFLICT (entitlement, cohort_us, currency, store, country, product_id, month_us) DO UPDATE SET
                members = t.members + excluded.members, gross = t.gross + excluded.gross, proceeds = t.proceeds + excluded.proceeds;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_mrr_movement', '[]')) > 0 THEN
        INSERT INTO report_mrr_movement AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_mrr_movement, cells -> 'report_mrr_movement')
            ON CONFLICT (entitlement, dimension, period_interval, period_us, value, currency, part, denominator) DO UPDATE SET
                amount = t.amount + excluded.amount;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_revenue_month_dims', '[]')) > 0 THEN
        INSERT INTO report_revenue_month_dims AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_revenue_month_dims, cells -> 'report_revenue_month_dims')
            ON CONFLICT (entitlement, month_us, currency, store, country, product_id) DO UPDATE SET
                transactions = t.transactions + excluded.transactions, billings = t.billings + excluded.billings,
                tax = t.tax + excluded.tax, commission = t.commission + excluded.commission, refunds = t.refunds + excluded.refunds,
                refunded_unrecognized = t.refunded_unrecognized + excluded.refunded_unrecognized,
                refunds_recognized = t.refunds_recognized + excluded.refunds_recognized,
                recognized = t.recognized + excluded.recognized,
                settled_deferred = t.settled_deferred + excluded.settled_deferred,
                handover = t.handover + excluded.handover;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_trial_day_dims', '[]')) > 0 THEN
        INSERT INTO report_trial_day_dims AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_trial_day_dims, cells -> 'report_trial_day_dims')
            ON CONFLICT (entitlement, day_us, store, country, product_id) DO UPDATE SET
                started = t.started + excluded.started, converted = t.converted + excluded.converted;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_churn_active_days', '[]')) > 0 THEN
        INSERT INTO report_churn_active_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_churn_active_days, cells -> 'report_churn_active_days')
            ON CONFLICT (entitlement, grants, day_us, store, country, product_id) DO UPDATE SET
                starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_churn_moves', '[]')) > 0 THEN
        INSERT INTO report_churn_moves AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_churn_moves, cells -> 'report_churn_moves')
            ON CONFLICT (entitlement, grants, period_interval, period_us, store, country, product_id) DO UPDATE SET
                new = t.new + excluded.new, reactivated = t.reactivated + excluded.reactivated,
                churned_refund = t.churned_refund + excluded.churned_refund,
                churned_involuntary = t.churned_involuntary + excluded.churned_involuntary,
                churned_voluntary = t.churned_voluntary + excluded.churned_voluntary,
                churned_other = t.churned_other + excluded.churned_other,
                transferred_in = t.transferred_in + excluded.transferred_in,
                transferred_out = t.transferred_out + excluded.transferred_out;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_mrr_rate_days', '[]')) > 0 THEN
        INSERT INTO report_mrr_rate_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_mrr_rate_days, cells -> 'report_mrr_rate_days')
            ON CONFLICT (entitlement, day_us, currency, occurred_day_us, denominator) DO UPDATE SET
                started = t.started + excluded.started, ended = t.ended + excluded.ended;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_paid_any_days', '[]')) > 0 THEN
        INSERT INTO report_paid_any_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_paid_any_days, cells -> 'report_paid_any_days')
            ON CONFLICT (entitlement, day_us) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_mrr_dimension_days', '[]')) > 0 THEN
        INSERT INTO report_mrr_dimension_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_mrr_dimension_days, cells -> 'report_mrr_dimension_days')
            ON CONFLICT (entitlement, dimension, day_us, currency, value, denominator) DO UPDATE SET
                started = t.started + excluded.started, ended = t.ended + excluded.ended;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_paid_dimension_days', '[]')) > 0 THEN
        INSERT INTO report_paid_dimension_days AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_paid_dimension_days, cells -> 'report_paid_dimension_days')
            ON CONFLICT (entitlement, dimension, day_us, currency, value) DO UPDATE SET
                starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_mrr_rate_hours', '[]')) > 0 THEN
        INSERT INTO report_mrr_rate_hours AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_mrr_rate_hours, cells -> 'report_mrr_rate_hours')
            ON CONFLICT (entitlement, hour_us, currency, occurred_day_us, denominator) DO UPDATE SET
                started = t.started + excluded.started, ended = t.ended + excluded.ended;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_paid_any_hours', '[]')) > 0 THEN
        INSERT INTO report_paid_any_hours AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_paid_any_hours, cells -> 'report_paid_any_hours')
            ON CONFLICT (entitlement, hour_us) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
    END IF;
    IF jsonb_array_length(coalesce(cells -> 'report_conversion_holders', '[]')) > 0 THEN
        INSERT INTO report_conversion_holders AS t
            SELECT * FROM jsonb_populate_recordset(NULL::report_conversion_holders, cells -> 'report_conversion_holders')
            ON CONFLICT (entitlement, day_us, store, country, product_id, held, wait_days) DO UPDATE SET
                subscribers = t.subscribers + excluded.subscribers;
    END IF;
END $$;
