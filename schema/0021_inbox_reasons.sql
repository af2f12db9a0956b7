-- Waiting messages made visible (issue "The stores as they really behave", item 18): why each store message
-- waits, and when it last changed, for GET /v1/stores/{store}/inbox and the dashboard.
--
-- `reason`: why a message waits, in words an operator acts on ("the Stripe customer names no subscriber: …",
-- "Google is unavailable: …", "… is not in the catalog: …"); set where the intake leaves a message pending or
-- records a failed attempt, cleared when it is applied. Rows written before this migration have none: the
-- API falls back to `last_error`, then to what their status means. Adding nullable columns without a default
-- rewrites nothing.
ALTER TABLE store_inbox ADD COLUMN reason text;
ALTER TABLE store_inbox ADD COLUMN updated_at timestamptz;

-- A store's messages of one status, newest first (the list pages by (received_at, message_id)); its prefix
-- also counts the waiting statuses for the gauge and the dashboard without reading the table.
CREATE INDEX store_inbox_listing ON store_inbox (store, status, received_at, message_id);
