-- Sealed checkpoints: a Merkle root (RFC 6962) over every stream head at a log position, kept for
-- auditors. Append-only like the events themselves.
CREATE TABLE checkpoints (
    checkpoint_id bigint      PRIMARY KEY,
    position      bigint      NOT NULL,
    streams       bigint      NOT NULL,
    events        bigint      NOT NULL,
    merkle_root   bytea       NOT NULL CHECK (length(merkle_root) = 32),
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TRIGGER checkpoints_reject_update_delete BEFORE UPDATE OR DELETE ON checkpoints
    FOR EACH ROW EXECUTE FUNCTION subledger_reject_change();
CREATE TRIGGER checkpoints_reject_truncate BEFORE TRUNCATE ON checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION subledger_reject_change();
ALTER TABLE checkpoints ENABLE ALWAYS TRIGGER checkpoints_reject_update_delete;
ALTER TABLE checkpoints ENABLE ALWAYS TRIGGER checkpoints_reject_truncate;
REVOKE ALL ON checkpoints FROM PUBLIC;
GRANT SELECT, INSERT ON checkpoints TO subledger_app;
