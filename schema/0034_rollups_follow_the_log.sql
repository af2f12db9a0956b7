-- Report rollups and report facts follow the log (issue 38, item 1; docs/reports.md "Rollups"). An append used
-- to compute its report cells (MRR movement and churn by store, country and product: about 27 KB of text for
-- one purchase, 580 KB for one of 64 entitlements) and write its report facts (`report_runs`,
-- `report_transactions`, `report_trials`) under the append lock. Now it writes its events, windows and
-- subscriber state only; `ReportRollupWorker` follows the feed from `report_rollup_state.applied_position`,
-- folds the subscribers each batch touches before and after it, and writes their facts' rows and the cells'
-- change in one statement per batch (`subledger_rollup_follow`), moving the cursor in the same transaction.
--
-- The report facts of a ledger with events are rebuilt (`subledger migrate` runs the rebuild when the rollups
-- are incomplete), so that they and the cells hold exactly the log up to the cursor the rebuild sets; the
-- queued cells of earlier appends are part of what the rebuild recomputes.
DELETE FROM report_rollup_queue;
UPDATE report_rollup_state SET complete = false WHERE EXISTS (SELECT 1 FROM events);
