-- Revenue by store, country and product on day and week grids, in the transactions' own currencies (issue 37,
-- docs/reports.md "Revenue in a reporting currency from cells"). The month grid sums report_revenue_month_dims;
-- day and week grids with a dimension read every transaction of their span (past the statement timeout on ten
-- million events). The reporting currency cells of schema 0031 are that shape already: they gain the currency
-- of their figures, and a "reporting currency" '' that converts nothing keeps each transaction's figures in its
-- own currency, maintained by the same queue, worker and recomputation.
ALTER TABLE report_fx_revenue_days ADD COLUMN currency text NOT NULL DEFAULT '';
UPDATE report_fx_revenue_days SET currency = reporting_currency;
ALTER TABLE report_fx_revenue_days DROP CONSTRAINT report_fx_revenue_days_pkey;
ALTER TABLE report_fx_revenue_days ADD PRIMARY KEY (reporting_currency, entitlement, day_us, currency, store, country, product_id);

-- Always kept: `serve --reporting-currencies` names the converted ones only.
INSERT INTO report_fx_cells (reporting_currency) VALUES ('') ON CONFLICT (reporting_currency) DO NOTHING;
