-- Tax and report dimensions (issue 37; docs/reports.md "Revenue" and "Dimensions"). Purchases and renewals may
-- carry `tax_minor` (tax included in the price) and `country`; the transaction facts keep them with the
-- event's `source` (the store) and product, so reports can filter and group by them. Tax is billed with the
-- transaction, so the revenue rollups carry it like commission. Trials keep their transaction's dimensions too. Events before this release had no tax
-- (`tax_minor` was refused as an unknown member), so 0 is the right value for every existing row; the
-- dimensions of existing facts are filled by the rebuild `subledger migrate` runs after a migration.
ALTER TABLE report_transactions ADD COLUMN tax int8 NOT NULL DEFAULT 0;
ALTER TABLE report_transactions ADD COLUMN country text;
ALTER TABLE report_transactions ADD COLUMN store text NOT NULL DEFAULT '';
ALTER TABLE report_transactions ADD COLUMN product_id text NOT NULL DEFAULT '';
ALTER TABLE report_revenue_pending ADD COLUMN tax int8 NOT NULL DEFAULT 0;
ALTER TABLE report_revenue_pending ADD COLUMN country text;
ALTER TABLE report_revenue_pending ADD COLUMN store text NOT NULL DEFAULT '';
ALTER TABLE report_revenue_pending ADD COLUMN product_id text NOT NULL DEFAULT '';
ALTER TABLE report_revenue_months ADD COLUMN tax numeric NOT NULL DEFAULT 0;
ALTER TABLE report_revenue_days ADD COLUMN tax numeric NOT NULL DEFAULT 0;
ALTER TABLE report_trials ADD COLUMN store text NOT NULL DEFAULT '';
ALTER TABLE report_trials ADD COLUMN country text;
ALTER TABLE report_trials ADD COLUMN product_id text NOT NULL DEFAULT '';
