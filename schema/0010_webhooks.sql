-- Outbound webhooks (issue 18). Each endpoint is a durable cursor over the gapless global feed: no outbox,
-- nothing to lose, replay from any position by moving the cursor (docs/webhooks.md).
--
-- `delivered_through` is the last position the endpoint is done with (delivered, or skipped by its
-- filters). Only the instance holding the lease (`leased_by` until `lease_until`, PostgreSQL's clock)
-- delivers or moves the cursor; `generation` changes whenever an admin edits, replays or re-enables the
-- endpoint, so a delivery that started before the edit cannot move the cursor after it.
CREATE TABLE webhook_endpoints (
    endpoint_id           uuid        PRIMARY KEY,
    url                   text        NOT NULL,
    description           text,
    -- NULL: no filter.
    event_types           text[],
    entitlements          text[],
    -- `whsec_<base64>`: needed to sign, so kept as is; never returned after creation, never logged.
    secret                text        NOT NULL,
    -- The secret before the last rotation keeps signing beside the new one until this instant.
    previous_secret       text,
    previous_secret_until timestamptz,
    -- 'active': delivering; 'failing': retries exhausted, paused with its cursor kept; 'disabled': by an
    -- admin or by a 410 Gone.
    status                text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'failing', 'disabled')),
    status_reason         text,
    delivered_through     bigint      NOT NULL CHECK (delivered_through >= 0),
    generation            bigint      NOT NULL DEFAULT 1,
    -- Retry state of the event after the cursor.
    failed_attempts       integer     NOT NULL DEFAULT 0,
    failing_since         timestamptz,
    next_attempt_at       timestamptz,
    last_error            text,
    leased_by             text,
    lease_until           timestamptz,
    created_at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX webhook_endpoints_created ON webhook_endpoints (created_at, endpoint_id);

-- Every delivery attempt, newest first per endpoint; pruned after seven days by the delivery service.
CREATE TABLE webhook_deliveries (
    delivery_id   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id   uuid        NOT NULL REFERENCES webhook_endpoints ON DELETE CASCADE,
    position      bigint      NOT NULL,
    event_id      uuid        NOT NULL,
    webhook_id    text        NOT NULL,
    attempt       integer     NOT NULL CHECK (attempt >= 1),
    outcome       text        NOT NULL CHECK (outcome IN ('delivered', 'failed', 'gone')),
    http_status   integer,
    latency_ms    integer     NOT NULL,
    error         text,
    next_retry_at timestamptz,
    attempted_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    instance      text        NOT NULL
);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, delivery_id DESC);
CREATE INDEX webhook_deliveries_attempted ON webhook_deliveries (attempted_at);

REVOKE ALL ON webhook_endpoints, webhook_deliveries FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON webhook_endpoints, webhook_deliveries TO subledger_app;
