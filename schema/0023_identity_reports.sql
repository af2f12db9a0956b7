-- Identity in the reports (docs/identity.md): transfers are counted apart in churn, and money follows the
-- transaction, not its owner.

-- A run that ends because its purchase moved away is `transferred` (not churn); one that begins with a
-- purchase moving in is `transferred_in` (not new, not reactivated).
ALTER TABLE report_runs DROP CONSTRAINT report_runs_lapse_check;
ALTER TABLE report_runs ADD CONSTRAINT report_runs_lapse_check
    CHECK (lapse IN ('refund', 'involuntary', 'voluntary', 'other', 'transferred'));
ALTER TABLE report_runs ADD COLUMN transferred_in boolean NOT NULL DEFAULT false;
ALTER TABLE report_churn_periods ADD COLUMN transferred_in int8 NOT NULL DEFAULT 0;
ALTER TABLE report_churn_periods ADD COLUMN transferred_out int8 NOT NULL DEFAULT 0;

-- A transferred transaction is kept by the subscriber it left until the transfer (`handed_over_us`) and by the
-- one it reached from then on (`held_from_us`, a copy of its terms): recognition is split there, the
-- deferred balance moves with it (`handover`: minus on the one side, plus on the other; zero summed), and
-- MRR counts it under whoever holds it.
ALTER TABLE report_transactions ADD COLUMN held_from_us int8;
ALTER TABLE report_transactions ADD COLUMN handed_over_us int8;
CREATE INDEX report_transactions_held_from ON report_transactions (held_from_us) WHERE held_from_us IS NOT NULL;
ALTER TABLE report_revenue_pending ADD COLUMN held_from_us int8;
ALTER TABLE report_revenue_pending ADD COLUMN handed_over_us int8;
ALTER TABLE report_revenue_months ADD COLUMN handover numeric NOT NULL DEFAULT 0;
ALTER TABLE report_revenue_days ADD COLUMN handover numeric NOT NULL DEFAULT 0;

-- A restore or a merge points a store account at its purchase's new owner.
GRANT UPDATE ON store_links TO subledger_app;
