-- MRR at an instant grouped or filtered by store, country or product from cells (issue 37; docs/reports.md
-- "Dimensions"). It read every transaction covering the instant (1.2 s at one million events). These are
-- `report_mrr_days` and `report_paid_days` per value of one dimension at a time: a transaction has one store,
-- country and product, so its amounts add up per value; and the paid coverage is kept per value, so a subscriber
-- holding two transactions of the same store at once counts once in that store. The report sums them up to the
-- midnight nearest the instant and reads the subscribers whose service starts or ends between the two.
CREATE TABLE report_mrr_dimension_days (
    entitlement text    NOT NULL,
    -- 'store', 'country' or 'product_id'.
    dimension   text    NOT NULL,
    day_us      int8    NOT NULL,
    currency    text    NOT NULL,
    -- '' where not known (the null group, matched by no filter).
    value       text    NOT NULL,
    denominator numeric NOT NULL,
    started     numeric NOT NULL,
    ended       numeric NOT NULL,
    PRIMARY KEY (entitlement, dimension, day_us, currency, value, denominator)
);

CREATE TABLE report_paid_dimension_days (
    entitlement text NOT NULL,
    dimension   text NOT NULL,
    day_us      int8 NOT NULL,
    currency    text NOT NULL,
    value       text NOT NULL,
    starts      int8 NOT NULL,
    ends        int8 NOT NULL,
    PRIMARY KEY (entitlement, dimension, day_us, currency, value)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON report_mrr_dimension_days, report_paid_dimension_days TO subledger_app;

-- A ledger with events has none of these cells until a rebuild (`subledger migrate` runs one).
UPDATE report_rollup_state SET complete = false WHERE EXISTS (SELECT 1 FROM events);
