-- Rebuild step 1: empty shadow tables `rebuild_<table>` with the columns, defaults and CHECK constraints of
-- each projection table and no indexes yet, so they are bulk-loaded without index maintenance.
CREATE OR REPLACE FUNCTION subledger_rebuild_prepare() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY subledger_projection_tables() LOOP
        EXECUTE format('DROP TABLE IF EXISTS %I', 'rebuild_' || t);
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL EXCLUDING INDEXES)', 'rebuild_' || t, t);
    END LOOP;
END
$$;
