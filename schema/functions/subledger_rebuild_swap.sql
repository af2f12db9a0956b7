-- Rebuild step 3, under the append lock: the shadows replace the projection tables, with the old names for
-- tables, indexes and primary-key or unique constraints, and the service role's privileges.
CREATE OR REPLACE FUNCTION subledger_rebuild_swap() RETURNS void
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
