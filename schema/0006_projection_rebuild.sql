-- A full rebuild writes the projections into fresh tables and swaps them in (docs/event-store.md, "Rebuild").
--
-- Bulk-loading a table without indexes and building the indexes afterwards (a sort per index) is several
-- times cheaper than replacing rows one index entry at a time, and leaves no dead rows behind. Readers keep
-- reading the old tables until the swap, which takes the old tables' ACCESS EXCLUSIVE lock for as long as a
-- DROP and a few renames take. The three steps run in the rebuilding transaction, so a failed rebuild
-- leaves no trace. The projection tables are listed here, in one place.

CREATE FUNCTION subledger_projection_tables() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY['windows', 'subscriber_state', 'report_runs', 'report_transactions', 'report_trials']
$$;

-- Step 1: empty shadow tables `rebuild_<table>` with the columns, defaults and CHECK constraints of each
-- projection table, and no indexes yet.
CREATE FUNCTION subledger_rebuild_prepare() RETURNS void
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

-- Step 2, once the shadow tables are loaded: every index of each projection table, built on its shadow
-- under the name `rebuild_<index>` (before the swap, so appends do not wait for the sorts). Building an
-- index sets the table's row count for the planner; the column statistics are left to autovacuum's ANALYZE.
CREATE FUNCTION subledger_rebuild_index() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t text;
    ix record;
BEGIN
    FOREACH t IN ARRAY subledger_projection_tables() LOOP
        FOR ix IN
            SELECT c.relname AS name, i.indisunique AS is_unique,
                   substring(pg_get_indexdef(i.indexrelid) FROM ' USING .*$') AS tail
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = t::regclass
        LOOP
            EXECUTE format('CREATE %s INDEX %I ON %I %s',
                           CASE WHEN ix.is_unique THEN 'UNIQUE' ELSE '' END, 'rebuild_' || ix.name, 'rebuild_' || t, ix.tail);
        END LOOP;
    END LOOP;
END
$$;

-- Step 3, under the append lock: the shadows replace the projection tables, with the old names for tables,
-- indexes and primary-key or unique constraints, and the service role's privileges.
CREATE FUNCTION subledger_rebuild_swap() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t text;
    names text[];
    name text;
    constraints text[];
    kinds "char"[];
BEGIN
    FOREACH t IN ARRAY subledger_projection_tables() LOOP
        EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', t);
    END LOOP;
    FOREACH t IN ARRAY subledger_projection_tables() LOOP
        SELECT array_agg(conname::text ORDER BY conname), array_agg(contype ORDER BY conname)
          INTO constraints, kinds
          FROM pg_constraint WHERE conrelid = t::regclass AND contype IN ('p', 'u');
        SELECT array_agg(c.relname::text) INTO names
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = t::regclass;
        EXECUTE format('DROP TABLE %I', t);
        EXECUTE format('ALTER TABLE %I RENAME TO %I', 'rebuild_' || t, t);
        FOREACH name IN ARRAY coalesce(names, '{}') LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', 'rebuild_' || name, name);
        END LOOP;
        FOR i IN 1 .. coalesce(array_length(constraints, 1), 0) LOOP
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I %s USING INDEX %I', t, constraints[i],
                           CASE kinds[i] WHEN 'p' THEN 'PRIMARY KEY' ELSE 'UNIQUE' END, constraints[i]);
        END LOOP;
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO subledger_app', t);
    END LOOP;
END
$$;
