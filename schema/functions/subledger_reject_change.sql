-- The second guard of append-only tables (events, products, checkpoints): nobody, not even the table owner,
-- changes history. Their triggers are ENABLE ALWAYS, so session_replication_role = replica does not
-- silence them (docs/event-store.md, "Append-only, twice").
CREATE OR REPLACE FUNCTION subledger_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'subledger: % on % is not allowed: the ledger is append-only (corrections are new events)',
        TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
