-- Reports II kept as rollups (issue 37; docs/reports.md "Reports II from rollups"): MRR movement, refunds,
-- conversion to paying and realized LTV were computed from the facts of their span, linear in the ledger (3–8 s on a million events).
-- Their cells are kept like the other rollups (`ReportRollup`, computed by the append and applied by
-- `ReportRollupWorker`, written afresh by the rebuild). Each cell carries the store, country and product its
-- fact counts under (`''` where unknown), so a filter or grouping on those dimensions is a sum over cells.

-- Per day (UTC) of the refund or of the transaction's occurrence: refunds, their money, transactions refunded
-- that day, paid transactions that occurred that day.
CREATE TABLE report_refund_days (
    entitlement           text    NOT NULL,
    day_us                int8    NOT NULL,
    currency              text    NOT NULL,
    store                 text    NOT NULL,
    country               text    NOT NULL,
    product_id            text    NOT NULL,
    refunds               int8    NOT NULL,
    amount                numeric NOT NULL,
    refunded_transactions int8    NOT NULL,
    paid_transactions     int8    NOT NULL,
    PRIMARY KEY (entitlement, day_us, currency, store, country, product_id)
);

-- A week or month in which one transaction was refunded on several days: the day cells count it once per day,
-- the period once; `repeats` is the difference.
CREATE TABLE report_refund_repeats (
    entitlement     text NOT NULL,
    period_interval text NOT NULL,
    period_us       int8 NOT NULL,
    currency        text NOT NULL,
    store           text NOT NULL,
    country         text NOT NULL,
    product_id      text NOT NULL,
    repeats         int8 NOT NULL,
    PRIMARY KEY (entitlement, period_interval, period_us, currency, store, country, product_id)
);

-- Subscribers first seen per day, by whole days (rounded up) to their first billed paid transaction of the key
-- (`-1`: none; 3651: more than ten years). Key `e` holds those who paid for `e`, key `''` everyone first seen; key
-- `''` also counts everyone once more under `wait_days` −2, the population a report reads without its waits.
CREATE TABLE report_conversion_days (
    entitlement text NOT NULL,
    day_us      int8 NOT NULL,
    store       text NOT NULL,
    country     text NOT NULL,
    product_id  text NOT NULL,
    wait_days   int4 NOT NULL,
    subscribers int8 NOT NULL,
    PRIMARY KEY (entitlement, day_us, store, country, product_id, wait_days)
);

-- Per cohort (month of the key's first paid run), currency, the dimensions of the member's first transaction and
-- month (of the sale or refund, the cohort's at the earliest): money realized, and members paying in the currency.
CREATE TABLE report_ltv_cells (
    entitlement text    NOT NULL,
    cohort_us   int8    NOT NULL,
    currency    text    NOT NULL,
    store       text    NOT NULL,
    country     text    NOT NULL,
    product_id  text    NOT NULL,
    month_us    int8    NOT NULL,
    members     int8    NOT NULL,
    gross       numeric NOT NULL,
    proceeds    numeric NOT NULL,
    PRIMARY KEY (entitlement, cohort_us, currency, store, country, product_id, month_us)
);

-- MRR movement per interval ('day', 'week', 'month'), period, key and group (`dimension` '' for every transaction of
-- the key; 'store', 'country' or 'product_id' with its `value`, for key '' only), currency and part (0 start … 7
-- transferred_out, `MRRMovementFigures.Part`): the numerators of the exact monthly amounts per denominator, and
-- (denominator 0) the subscribers making the part. Written only for periods in which a subscriber's MRR changes.
CREATE TABLE report_mrr_movement (
    entitlement     text    NOT NULL,
    dimension       text    NOT NULL,
    period_interval text    NOT NULL,
    period_us       int8    NOT NULL,
    value           text    NOT NULL,
    currency        text    NOT NULL,
    part            int2    NOT NULL,
    denominator     numeric NOT NULL,
    amount          numeric NOT NULL,
    PRIMARY KEY (entitlement, dimension, period_interval, period_us, value, currency, part, denominator)
);

-- Revenue per month as `report_revenue_months` keeps it, per store, country and product too: revenue filtered or
-- grouped by those dimensions on a month grid sums these cells (a transaction has one of each).
CREATE TABLE report_revenue_month_dims (
    entitlement           text    NOT NULL,
    month_us              int8    NOT NULL,
    currency              text    NOT NULL,
    store                 text    NOT NULL,
    country               text    NOT NULL,
    product_id            text    NOT NULL,
    transactions          int8    NOT NULL,
    billings              numeric NOT NULL,
    tax                   numeric NOT NULL,
    commission            numeric NOT NULL,
    refunds               numeric NOT NULL,
    refunded_unrecognized numeric NOT NULL,
    refunds_recognized    numeric NOT NULL,
    recognized            numeric NOT NULL,
    settled_deferred      numeric NOT NULL,
    handover              numeric NOT NULL,
    PRIMARY KEY (entitlement, month_us, currency, store, country, product_id)
);

-- Trials per day as `report_trial_days` keeps them, per store, country and product of the trial's transaction too.
CREATE TABLE report_trial_day_dims (
    entitlement text NOT NULL,
    day_us      int8 NOT NULL,
    store       text NOT NULL,
    country     text NOT NULL,
    product_id  text NOT NULL,
    started     int8 NOT NULL,
    converted   int8 NOT NULL,
    PRIMARY KEY (entitlement, day_us, store, country, product_id)
);

-- Churn per store, country and product (`ChurnDimensionRollup.swift`): per run key (`entitlement`: '' for the runs
-- over all entitlements, or one entitlement's runs for grouping by entitlement) and `grants` (for the runs over all
-- entitlements, '' or an entitlement the covering transaction grants: what `entitlement=` filters on), with the
-- covering transaction's store, country and product. Active spans start and end per day; transitions per grid.
CREATE TABLE report_churn_active_days (
    entitlement text NOT NULL,
    grants      text NOT NULL,
    store       text NOT NULL,
    country     text NOT NULL,
    product_id  text NOT NULL,
    day_us      int8 NOT NULL,
    starts      int8 NOT NULL,
    ends        int8 NOT NULL,
    PRIMARY KEY (entitlement, grants, day_us, store, country, product_id)
);

CREATE TABLE report_churn_moves (
    entitlement         text NOT NULL,
    grants              text NOT NULL,
    store               text NOT NULL,
    country             text NOT NULL,
    product_id          text NOT NULL,
    period_interval     text NOT NULL,
    period_us           int8 NOT NULL,
    new                 int8 NOT NULL,
    reactivated         int8 NOT NULL,
    churned_refund      int8 NOT NULL,
    churned_involuntary int8 NOT NULL,
    churned_voluntary   int8 NOT NULL,
    churned_other       int8 NOT NULL,
    transferred_in      int8 NOT NULL,
    transferred_out     int8 NOT NULL,
    PRIMARY KEY (entitlement, grants, period_interval, period_us, store, country, product_id)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON report_refund_days, report_refund_repeats, report_conversion_days, report_ltv_cells,
    report_mrr_movement, report_revenue_month_dims, report_trial_day_dims, report_churn_active_days, report_churn_moves
    TO subledger_app;

-- A ledger with events has none of these cells until a rebuild (`subledger migrate` runs one).
UPDATE report_rollup_state SET complete = false WHERE EXISTS (SELECT 1 FROM events);
