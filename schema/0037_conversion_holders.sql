-- Conversion grouped by entitlement from cells (issue 37; docs/reports.md "Reports II from rollups"). It read every
-- subscriber first seen in the span with their trials and transactions. By entitlement a subscriber counts in each
-- entitlement any of their trials and transactions grants (converted to that one), and in the null group when they
-- hold none of those asked for, so the cells per entitlement key of report_conversion_days (those who paid) do not
-- say who belongs to a group. Per first-seen day and the dimensions of what the subscriber was first seen with:
-- under an entitlement, its holders by their wait to the first billed transaction granting it; under '', every
-- subscriber once with the entitlements they hold and their wait to their first billed transaction.
CREATE TABLE report_conversion_holders (
    entitlement text NOT NULL,
    day_us      int8 NOT NULL,
    store       text NOT NULL,
    country     text NOT NULL,
    product_id  text NOT NULL,
    -- Under '': the entitlements held, sorted, joined by chr(31) ('' for none); under an entitlement: ''.
    held        text NOT NULL,
    -- Whole days to the first billed transaction (rounded up; capped as in report_conversion_days); -1: none.
    wait_days   int4 NOT NULL,
    subscribers int8 NOT NULL,
    PRIMARY KEY (entitlement, day_us, store, country, product_id, held, wait_days)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON report_conversion_holders TO subledger_app;

-- A ledger with events has none of these cells until a rebuild (`subledger migrate` runs one).
UPDATE report_rollup_state SET complete = false WHERE EXISTS (SELECT 1 FROM events);
