-- MRR movement in a reporting currency from cells (issue 37; docs/reports.md "MRR movement in a reporting currency
-- from cells"). Converted MRR movement rounds once per period and conversion factor (a currency at the rate of the
-- date its transactions occurred) and classifies a subscriber by their converted MRR, so no sum of
-- `report_mrr_movement` gives it; read from the facts it took 5–7 s on one million events and passed the
-- statement timeout on ten million. These cells are `report_mrr_movement` per reporting currency and factor:
-- per interval ('day', 'week', 'month'), period, key, group and factor (`factor_num / factor_den`: minor units of
-- the transactions' currency to the reporting currency's), the numerators of the exact monthly amounts (in the
-- transactions' own minor units) per denominator that each part (1 new … 7 transferred_out) adds or takes away,
-- classified at the cells' rate version. Factor 0/0 counts: the subscribers making a part (denominator 0), and
-- (part 0) the services of a group lying within one period (they make a grouped report show the group).
--
-- Kept with the LTV cells, at their rate version and log position (`report_fx_ltv_state`), by `ConvertedLTVWorker`.
-- Derived data: never in a projection comparison, rebuilt from the facts.
CREATE TABLE report_fx_movement (
    reporting_currency text    NOT NULL,
    entitlement        text    NOT NULL,
    dimension          text    NOT NULL,
    period_interval    text    NOT NULL,
    period_us          int8    NOT NULL,
    value              text    NOT NULL,
    factor_num         numeric NOT NULL,
    factor_den         numeric NOT NULL,
    part               int2    NOT NULL,
    denominator        numeric NOT NULL,
    amount             numeric NOT NULL,
    PRIMARY KEY (reporting_currency, entitlement, dimension, period_interval, period_us, value, factor_num, factor_den, part,
                 denominator)
);

-- Services whose currency has no rate on their date, by the span they touch (`end_us` int8's maximum when open): a
-- report overlapping one reads the facts, which refuse with the currency and date.
CREATE TABLE report_fx_movement_missing (
    reporting_currency text NOT NULL,
    currency           text NOT NULL,
    start_us           int8 NOT NULL,
    end_us             int8 NOT NULL,
    services           int8 NOT NULL,
    PRIMARY KEY (reporting_currency, currency, start_us, end_us)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON report_fx_movement, report_fx_movement_missing TO subledger_app;

-- Computed afresh with the LTV cells by the worker.
UPDATE report_fx_ltv_state SET complete = false;
