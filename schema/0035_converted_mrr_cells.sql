-- MRR in a reporting currency from cells (issue 37; docs/reports.md "Reporting currency"). Converted MRR rounds
-- once per conversion factor (a currency and the UTC date its transactions occurred on), and its `active_paid`
-- counts a subscriber paying in two currencies once, so neither `report_mrr_days` nor `report_paid_days` can
-- answer it: it read every transaction covering the instant (1.8 s at ten million events). These cells are
-- `report_mrr_days` kept per date of the conversion rate, and the paid coverage over all currencies; the report
-- sums them up to the midnight nearest the instant and reads the subscribers whose service starts or ends between
-- the two, as unconverted MRR does.
CREATE TABLE report_mrr_rate_days (
    entitlement     text    NOT NULL,
    day_us          int8    NOT NULL,
    currency        text    NOT NULL,
    -- Midnight (UTC, microseconds) of the day the transactions occurred: their rate's date.
    occurred_day_us int8    NOT NULL,
    denominator     numeric NOT NULL,
    started         numeric NOT NULL,
    ended           numeric NOT NULL,
    PRIMARY KEY (entitlement, day_us, currency, occurred_day_us, denominator)
);

CREATE TABLE report_paid_any_days (
    entitlement text NOT NULL,
    day_us      int8 NOT NULL,
    starts      int8 NOT NULL,
    ends        int8 NOT NULL,
    PRIMARY KEY (entitlement, day_us)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON report_mrr_rate_days, report_paid_any_days TO subledger_app;

-- A ledger with events has none of these cells until a rebuild (`subledger migrate` runs one).
UPDATE report_rollup_state SET complete = false WHERE EXISTS (SELECT 1 FROM events);
