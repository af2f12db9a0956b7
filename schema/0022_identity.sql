-- Identity (docs/identity.md): who owns a purchase, merges and the transfer policy.

-- A merged subscriber's reads say where it went: written with its other state by every projection write.
ALTER TABLE subscriber_state ADD COLUMN merged_into text;

-- Appends naming a merged subscriber are refused: found by this small index, not by reading its stream.
CREATE INDEX events_merged ON events (subscriber_id) WHERE type = 'merged';

-- Per subscriber, whether its purchases may leave it (the ledger-wide default is `serve --transfer-policy`).
CREATE TABLE transfer_policies (
    subscriber_id text        PRIMARY KEY,
    policy        text        NOT NULL CHECK (policy IN ('transfer', 'transfer_if_no_active', 'keep')),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE, DELETE ON transfer_policies TO subledger_app;
