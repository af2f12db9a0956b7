-- Servers keep subscribers' ledgers in memory (LedgerCache) and must hear of every change, whichever
-- process made it (another server, `subledger import`). One NOTIFY per inserting transaction: PostgreSQL
-- folds identical notifications of one transaction into one, and delivers them at commit only. The
-- listener then reads which subscribers moved after the last position it saw (docs/entitlement-cache.md).
-- `subledger rebuild` sends 'reset' itself. ENABLE ALWAYS: it fires under session_replication_role =
-- replica too, so no bulk path can skip it.
CREATE FUNCTION subledger_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('subledger_changes', 'events');
    RETURN NULL;
END $$;

CREATE TRIGGER events_notify_changes AFTER INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION subledger_notify_events();

ALTER TABLE events ENABLE ALWAYS TRIGGER events_notify_changes;
