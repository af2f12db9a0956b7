-- The projection tables, in one place: the rebuild prepares, indexes and swaps exactly these
-- (docs/event-store.md, "Rebuild"). A migration that adds a projection table adds it here.
CREATE OR REPLACE FUNCTION subledger_projection_tables() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY['windows', 'subscriber_state', 'report_runs', 'report_transactions', 'report_trials',
                 'report_revenue_months', 'report_trial_days', 'report_run_days', 'report_churn_periods',
                 'report_retention_cells', 'report_mrr_days', 'report_paid_days', 'report_revenue_days',
                 'report_revenue_pending', 'report_mrr_hours', 'report_paid_hours', 'report_refund_days',
                 'report_refund_repeats', 'report_conversion_days', 'report_ltv_cells', 'report_mrr_movement',
                 'report_revenue_month_dims', 'report_trial_day_dims',
                 'report_churn_active_days', 'report_churn_moves', 'report_mrr_rate_days', 'report_paid_any_days',
                 'report_mrr_dimension_days', 'report_paid_dimension_days', 'report_conversion_holders',
                 'report_mrr_rate_hours', 'report_paid_any_hours']
$$;
