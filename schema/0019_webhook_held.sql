-- Webhook messages held for a retry (issue 32, docs/webhooks.md "Delivery"). A failed message no longer
-- holds its endpoint's whole stream: the cursor moves past it and the message waits here, with its
-- subscriber's later messages queued behind it, so order is kept per subscriber and the others keep flowing.
--
-- The body is kept as first built: a retry sends the same bytes under the same `webhook-id` without
-- folding the subscriber again. A row whose `next_attempt_at` is NULL waits behind an earlier held message
-- of its subscriber; the head of each subscriber's queue has a time. At most a bounded number of rows per
-- endpoint (WebhookStore.maxHeldPerEndpoint): beyond it the cursor waits, as it did before for every failure.
CREATE TABLE webhook_held (
    endpoint_id     uuid        NOT NULL REFERENCES webhook_endpoints ON DELETE CASCADE,
    position        bigint      NOT NULL,
    subscriber_id   text        NOT NULL,
    event_id        uuid        NOT NULL,
    body            bytea       NOT NULL,
    failed_attempts integer     NOT NULL DEFAULT 0 CHECK (failed_attempts >= 0),
    failing_since   timestamptz,
    next_attempt_at timestamptz,
    last_error      text,
    PRIMARY KEY (endpoint_id, position)
);
CREATE INDEX webhook_held_subscriber ON webhook_held (endpoint_id, subscriber_id, position);
CREATE INDEX webhook_held_due ON webhook_held (endpoint_id, next_attempt_at) WHERE next_attempt_at IS NOT NULL;

REVOKE ALL ON webhook_held FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON webhook_held TO subledger_app;
