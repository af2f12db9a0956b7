-- One NOTIFY per inserting transaction, whichever process appended (another server, `subledger import`), so
-- every server's entitlement cache hears of it (docs/entitlement-cache.md). PostgreSQL folds identical
-- notifications of one transaction into one and delivers them at commit only.
CREATE OR REPLACE FUNCTION subledger_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('subledger_changes', 'events');
    RETURN NULL;
END $$;
