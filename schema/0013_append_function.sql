-- An append in one round trip (issue 21). The server computes the rows (positions, hash chain, projection)
-- from what it believes the log's end and the touched streams' heads are; this function takes the append
-- lock, checks those beliefs and, only if they all hold, inserts the events and replaces the projection.
-- Called outside an explicit transaction, its statement is the transaction: BEGIN, lock, checks, writes and
-- COMMIT cost one round trip instead of six. When a belief is wrong (another process appended, or a stream
-- the server did not hold in memory is not new), it writes nothing and returns false, and the server takes
-- the general path (read the tail under the lock in a transaction). A reused idempotency key raises the
-- unique violation as the INSERT would. SECURITY INVOKER, like subledger_projection_write.
CREATE FUNCTION subledger_append(
    lock_key bigint, expected_position bigint,
    head_subscribers text[], head_versions bigint[], head_hashes bytea[],
    new_recorded_at timestamptz,
    e_subscribers text[], e_versions bigint[], e_positions bigint[], e_ids uuid[], e_types text[], e_occurred text[],
    e_sources text[], e_environments text[], e_keys text[], e_data text[], e_metadata text[],
    e_fingerprints bytea[], e_prev_hashes bytea[], e_hashes bytea[],
    window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    last_position bigint;
    last_recorded timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    SELECT e.position, e.recorded_at INTO last_position, last_recorded FROM events e ORDER BY e.position DESC LIMIT 1;
    -- The same end means nobody else appended since; recorded times never go back.
    IF coalesce(last_position, 0) <> expected_position OR new_recorded_at < last_recorded THEN
        RETURN false;
    END IF;
    -- Every touched stream ends where the server believes (version 0: no event yet).
    IF EXISTS (
        SELECT 1 FROM unnest(head_subscribers, head_versions, head_hashes) AS x(subscriber, version, hash)
        LEFT JOIN LATERAL (
            SELECT e.version, e.hash FROM events e WHERE e.subscriber_id = x.subscriber ORDER BY e.version DESC LIMIT 1
        ) head ON true
        WHERE coalesce(head.version, 0) <> x.version OR (head.version IS NOT NULL AND head.hash <> x.hash)
    ) THEN
        RETURN false;
    END IF;
    INSERT INTO events (subscriber_id, version, position, event_id, type, occurred_at, recorded_at, source,
                        environment, idempotency_key, data, metadata, fingerprint, prev_hash, hash)
    SELECT s, v, p, id, t, o::timestamptz, new_recorded_at, src, env, k, d::jsonb, m::jsonb, f, ph, h
    FROM unnest(e_subscribers, e_versions, e_positions, e_ids, e_types, e_occurred, e_sources, e_environments,
                e_keys, e_data, e_metadata, e_fingerprints, e_prev_hashes, e_hashes)
         AS u(s, v, p, id, t, o, src, env, k, d, m, f, ph, h);
    PERFORM subledger_projection_write(head_subscribers, window_rows, state_rows, run_rows, transaction_rows, trial_rows);
    RETURN true;
END $$;
