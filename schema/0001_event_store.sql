-- The append-only event store (ledger-semantics sections 2 and 4).
--
-- Every table that holds subscriber data is keyed by subscriber_id and has no foreign key across
-- subscribers, so it can later be distributed by subscriber (Citus). Global uniqueness of position and of
-- (source, idempotency_key) is enforced by unique indexes here; see docs/event-store.md for what changes
-- when distributing.

-- The service's role: it may read and append, never change or remove (the first of two guards).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'subledger_app') THEN
        CREATE ROLE subledger_app NOLOGIN;
    END IF;
END
$$;
GRANT subledger_app TO CURRENT_USER;

CREATE TABLE events (
    subscriber_id   text        NOT NULL,
    version         bigint      NOT NULL CHECK (version >= 1),
    position        bigint      NOT NULL CHECK (position >= 1),
    event_id        uuid        NOT NULL,
    type            text        NOT NULL,
    occurred_at     timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL,
    source          text        NOT NULL,
    environment     text        NOT NULL CHECK (environment IN ('production', 'sandbox')),
    idempotency_key text        NOT NULL,
    data            jsonb       NOT NULL,
    metadata        jsonb       NOT NULL,
    -- SHA-256 of the request's canonical content: an idempotent retry must match it.
    fingerprint     bytea       NOT NULL CHECK (length(fingerprint) = 32),
    prev_hash       bytea       NOT NULL CHECK (length(prev_hash) = 32),
    hash            bytea       NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (subscriber_id, version)
);

CREATE UNIQUE INDEX events_position_key ON events (position);
CREATE UNIQUE INDEX events_idempotency_key ON events (source, idempotency_key);
CREATE UNIQUE INDEX events_event_id_key ON events (event_id);

-- The second guard: nobody, not even the table owner or a superuser acting normally, changes history.
-- ENABLE ALWAYS keeps the triggers firing under session_replication_role = replica too.
CREATE FUNCTION subledger_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'subledger: % on % is not allowed: the ledger is append-only (corrections are new events)',
        TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER events_reject_update_delete BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION subledger_reject_change();
CREATE TRIGGER events_reject_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION subledger_reject_change();
ALTER TABLE events ENABLE ALWAYS TRIGGER events_reject_update_delete;
ALTER TABLE events ENABLE ALWAYS TRIGGER events_reject_truncate;

REVOKE ALL ON events FROM PUBLIC;
GRANT SELECT, INSERT ON events TO subledger_app;

-- API keys: only a SHA-256 of each key is kept. Not subscriber data (a reference table under Citus).
CREATE TABLE api_keys (
    key_id     uuid        PRIMARY KEY,
    name       text        NOT NULL,
    role       text        NOT NULL CHECK (role IN ('writer', 'reader', 'auditor', 'analyst', 'admin')),
    key_hash   bytea       NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
REVOKE ALL ON api_keys FROM PUBLIC;
GRANT SELECT ON api_keys TO subledger_app;
