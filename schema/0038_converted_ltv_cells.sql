-- Realized LTV in a reporting currency from cells (issue 37; docs/reports.md "LTV in a reporting currency from
-- cells"). Converted LTV rounds each transaction's cumulative figures at its own date's rate, so no sum of
-- `report_ltv_cells` gives it; read from the facts it took 5.2 s on one million events and passed the statement
-- timeout on ten million. These cells hold each transaction's converted month-to-month change, already summed per
-- reporting currency (those `report_fx_cells` names), cohort, key, store, country, product and month, at one rate
-- version: the report sums them as it sums `report_ltv_cells`.
--
-- Kept off the append path by `ConvertedLTVWorker`: it follows the log from its own position (as the rollup
-- worker does: the touched subscribers folded before and after a batch, the difference of their converted cells
-- added), and computes every currency afresh from the report facts when a currency is named or dropped, a rate
-- version is stored, or a rebuild ran. Derived data: never in a projection comparison, rebuilt from the facts.

-- The currencies kept, the rate version they are at, and the log position their cells hold (every event up to it).
CREATE TABLE report_fx_ltv_state (
    reporting_currency text PRIMARY KEY,
    fx_version         int8,             -- NULL: no rate was stored when the cells were computed
    complete           boolean NOT NULL DEFAULT false,
    position           int8    NOT NULL,
    computed_at        timestamptz
);

CREATE TABLE report_fx_ltv_cells (
    reporting_currency text    NOT NULL,
    entitlement        text    NOT NULL,
    cohort_us          int8    NOT NULL,
    store              text    NOT NULL,
    country            text    NOT NULL,
    product_id         text    NOT NULL,
    month_us           int8    NOT NULL,
    members            int8    NOT NULL,
    gross              numeric NOT NULL,
    proceeds           numeric NOT NULL,
    PRIMARY KEY (reporting_currency, entitlement, cohort_us, store, country, product_id, month_us)
);

-- Transactions of a cohort without a rate on their date: a report of the cohort reads the facts (which name the
-- currency and date in a 422 when the transaction counts in a month shown).
CREATE TABLE report_fx_ltv_missing (
    reporting_currency text NOT NULL,
    cohort_us          int8 NOT NULL,
    currency           text NOT NULL,
    transactions       int8 NOT NULL,
    PRIMARY KEY (reporting_currency, cohort_us, currency)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON report_fx_ltv_state, report_fx_ltv_cells, report_fx_ltv_missing TO subledger_app;
