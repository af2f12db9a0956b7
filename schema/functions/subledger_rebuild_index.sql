-- Rebuild step 2, once the shadows are loaded: every index of each projection table, built on its shadow
-- under the name `rebuild_<index>` (by sorting, before the swap, so appends do not wait for the sorts).
CREATE OR REPLACE FUNCTION subledger_rebuild_index() RETURNS void
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
