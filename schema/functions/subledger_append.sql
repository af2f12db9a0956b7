-- An append in one round trip (docs/event-store.md, "One-trip appends"). The server computes the rows
-- (positions, hash chain, projection patch) from what it believes the log's end and the touched streams'
-- heads are; this takes the append lock, checks those beliefs and, only if they all hold, inserts the
-- events and patches the projection. A wrong belief writes nothing and returns false (the server takes the
-- general path); a reused idempotency key raises the unique violation as the INSERT would. Called outside
-- an explicit transaction, the statement is the transaction. Its arguments are bound positionally by
-- `AppendStatements.OneTrip` (test: `the one-trip statement binds…`).
CREATE OR REPLACE FUNCTION subledger_append(
    lock_key bigint, expected_position bigint,
    head_subscribers text[], head_versions bigint[], head_hashes bytea[],
    new_recorded_at timestamptz,
    e_subscribers text[], e_versions bigint[], e_positions bigint[], e_ids uuid[], e_types text[], e_occurred text[],
    e_sources text[], e_environments text[], e_keys text[], e_data text[], e_metadata text[],
    e_fingerprints bytea[], e_prev_hashes bytea[], e_hashes bytea[],
    window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb, rollup_cells text,
    deletions jsonb
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    last_position bigint;
    last_recorded timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    SELECT e.position, e.recorded_at INTO last_position, last_recorded FROM events e ORDER BY e.position DESC LIMIT 1;
    IF coalesce(last_position, 0) <> expected_position OR new_recorded_at < last_recorded THEN
        RETURN false;
    END IF;
    IF EXISTS (
        SELECT 1 FROM unnest(head_subscribers, head_versions, head_hashes) AS x(subscriber, version, hash)
        LEFT JOIN LATERAL (
            SELECT e.version, e.hash FROM events e WHERE e.subscriber_id = x.subscriber ORDER BY e.version DESC LIMIT 1
        ) head ON true
        WHERE coalesce(head.version, 0) <> x.version OR (head.version IS NOT NULL AND head.hash <> x.hash)
    ) THEN
        RETURN false;
    END IF;
    -- Only the rows that differ from the believed streams' fold are written: the projection must hold that fold.
    IF EXISTS (
        SELECT 1 FROM unnest(head_subscribers, head_versions) AS x(subscriber, version)
        LEFT JOIN subscriber_state st ON st.subscriber_id = x.subscriber
        WHERE x.version > 0 AND st.version IS DISTINCT FROM x.version
    ) THEN
        RETURN false;
    END IF;
    INSERT INTO events (subscriber_id, version, position, event_id, type, occurred_at, recorded_at, source,
                        environment, idempotency_key, data, metadata, fingerprint, prev_hash, hash)
    SELECT s, v, p, id, t, o::timestamptz, new_recorded_at, src, env, k, d::jsonb, m::jsonb, f, ph, h
    FROM unnest(e_subscribers, e_versions, e_positions, e_ids, e_types, e_occurred, e_sources, e_environments,
                e_keys, e_data, e_metadata, e_fingerprints, e_prev_hashes, e_hashes)
         AS u(s, v, p, id, t, o, src, env, k, d, m, f, ph, h);
    PERFORM subledger_projection_patch(deletions, window_rows, state_rows, run_rows, transaction_rows, trial_rows,
                                       rollup_cells);
    RETURN true;
END $$;
