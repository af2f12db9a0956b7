-- Realized LTV in a reporting currency from cells (issue 37; docs/reports.md "Reporting currency", LTV). It read
-- every cohort member's transactions (past the statement timeout on ten million events). Converted LTV rounds
-- each transaction's gross, tax, commission and cumulative refunds at the rate of its own `occurred_at` date, so no
-- sum of amounts gives it; but equal amounts of one currency and date round alike. A row is such a term with a
-- signed count: the report converts each amount once, at the rate of its date, and multiplies. Rates are applied
-- when the report is read, so a new rate version moves nothing here.
CREATE TABLE report_ltv_rate_terms (
    entitlement     text    NOT NULL,
    cohort_us       int8    NOT NULL,
    -- The dimensions of the member's first transaction, as in report_ltv_cells ('' where not known).
    store           text    NOT NULL,
    country         text    NOT NULL,
    product_id      text    NOT NULL,
    -- Month of the sale or refund (the cohort's at the earliest).
    month_us        int8    NOT NULL,
    -- 'g': adds to realized gross and proceeds; 'p': to proceeds only; 'm': members with a paid transaction in
    -- any currency (currency '', occurred_day_us 0, amount 0).
    figure          text    NOT NULL CHECK (figure IN ('g', 'p', 'm')),
    currency        text    NOT NULL,
    occurred_day_us int8    NOT NULL,
    amount          numeric NOT NULL,
    n               int8    NOT NULL,
    PRIMARY KEY (entitlement, cohort_us, month_us, figure, currency, occurred_day_us, amount, store, country, product_id)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON report_ltv_rate_terms TO subledger_app;

-- A ledger with events has none of these cells until a rebuild (`subledger migrate` runs one).
UPDATE report_rollup_state SET complete = false WHERE EXISTS (SELECT 1 FROM events);
