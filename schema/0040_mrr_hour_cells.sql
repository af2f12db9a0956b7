-- MRR per hour in a reporting currency (issue 37; docs/reports.md "Rollups"). The cells of schema 0035 stop at
-- the midnight nearest the instant, so MRR at 13:45 in a reporting currency read ten hours of transactions from
-- the facts: 0.86 s on ten million events against 0.07 s on one million (the read grows with the ledger's
-- density). These are the same cells per hour, as `report_mrr_hours` is to `report_mrr_days`: the report adds
-- the day cells before the boundary's midnight and that day's hour cells before the hour boundary nearest the
-- instant, so at most half an hour is read. The same per store, country and product (schema 0036's per hour)
-- were measured and dropped: 8.3 million rows (1.1 GB) on ten million events, and most of the import's peak
-- memory, which all four tables doubled (2.2 to 4.6 GB).
CREATE TABLE report_mrr_rate_hours (
    entitlement     text    NOT NULL,
    hour_us         int8    NOT NULL,
    currency        text    NOT NULL,
    occurred_day_us int8    NOT NULL,
    denominator     numeric NOT NULL,
    started         numeric NOT NULL,
    ended           numeric NOT NULL,
    PRIMARY KEY (entitlement, hour_us, currency, occurred_day_us, denominator)
);

CREATE TABLE report_paid_any_hours (
    entitlement text NOT NULL,
    hour_us     int8 NOT NULL,
    starts      int8 NOT NULL,
    ends        int8 NOT NULL,
    PRIMARY KEY (entitlement, hour_us)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON report_mrr_rate_hours, report_paid_any_hours TO subledger_app;

-- A ledger with events has none of these cells until a rebuild (`subledger migrate` runs one).
UPDATE report_rollup_state SET complete = false WHERE EXISTS (SELECT 1 FROM events);
