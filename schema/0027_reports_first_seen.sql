-- Reports II (docs/reports.md): conversion to paying counts subscribers by when they were first seen, the
-- earliest `occurred_at` of their production events. A fact of the fold like the others, kept on the
-- subscriber's state row (NULL: no production event), so the report reads one row per subscriber instead of
-- scanning events. `subledger migrate` rebuilds the projections after this migration, which fills it.
ALTER TABLE subscriber_state ADD COLUMN first_seen_us int8;
CREATE INDEX subscriber_state_first_seen ON subscriber_state (first_seen_us) WHERE first_seen_us IS NOT NULL;

-- Realized LTV (and retention read from the facts) find a cohort's members by the start of their first paid
-- run, per entitlement key, instead of reading every run of the key.
CREATE INDEX report_runs_first_start ON report_runs (entitlement, first_start_us);
