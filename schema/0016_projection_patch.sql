-- Appends write only what changed in the projection.
--
-- The one-trip append sends, per touched subscriber, the rows its fold after the append has and its fold
-- before did not (`ProjectionPatch`), and the keys of the stored rows that differ or are gone;
-- `subledger_projection_patch` deletes those and inserts these. A renewal of a subscriber with a long history
-- writes one window, one transaction and its run instead of deleting and inserting every row of the
-- subscriber under the append lock (measured: a 120-event stream's append statement went from 3.4 ms to well
-- under 1 ms). That is right only while the stored rows are the believed stream's fold, so the append first
-- checks the subscriber's projected version (`subscriber_state.version`); any other state (an import not yet
-- rebuilt) refuses the belief, and the general path rewrites those subscribers whole with
-- `subledger_projection_write`, whose deletes are skipped when it is given no subscriber. Either way a table
-- with no rows to insert costs no statement: a new subscriber's purchase went from eleven statements to six.

-- The inserts both writes share.
CREATE FUNCTION subledger_projection_insert(
    window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb, rollup_cells jsonb
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_array_length(window_rows) > 0 THEN
        INSERT INTO windows SELECT * FROM jsonb_populate_recordset(NULL::windows, window_rows);
    END IF;
    INSERT INTO subscriber_state SELECT * FROM jsonb_populate_recordset(NULL::subscriber_state, state_rows)
        ON CONFLICT (subscriber_id) DO UPDATE SET version = excluded.version, auto_renew = excluded.auto_renew,
            lapsed = excluded.lapsed, unmatched_refunds = excluded.unmatched_refunds;
    IF jsonb_array_length(run_rows) > 0 THEN
        INSERT INTO report_runs SELECT * FROM jsonb_populate_recordset(NULL::report_runs, run_rows);
    END IF;
    IF jsonb_array_length(transaction_rows) > 0 THEN
        INSERT INTO report_transactions SELECT * FROM jsonb_populate_recordset(NULL::report_transactions, transaction_rows);
    END IF;
    IF jsonb_array_length(trial_rows) > 0 THEN
        INSERT INTO report_trials SELECT * FROM jsonb_populate_recordset(NULL::report_trials, trial_rows);
    END IF;
    PERFORM subledger_rollup_add(rollup_cells);
END $$;

-- Every row of the given subscribers replaced (the general path and the rebuild-free refold). The deletes go
-- through the subscriber indexes whatever the cached generic plan thinks (schema 0015).
CREATE OR REPLACE FUNCTION subledger_projection_write(
    subscribers text[], window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb,
    rollup_cells jsonb
) RETURNS void LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    IF cardinality(subscribers) > 0 THEN
        DELETE FROM report_runs WHERE subscriber_id = ANY(subscribers);
        DELETE FROM report_transactions WHERE subscriber_id = ANY(subscribers);
        DELETE FROM report_trials WHERE subscriber_id = ANY(subscribers);
        DELETE FROM windows WHERE subscriber_id = ANY(subscribers);
    END IF;
    PERFORM subledger_projection_insert(window_rows, state_rows, run_rows, transaction_rows, trial_rows, rollup_cells);
END $$;

-- Only the rows that changed: the stored rows named in `deletions` go, the given rows come.
CREATE FUNCTION subledger_projection_patch(
    deletions jsonb, window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb,
    rollup_cells jsonb
) RETURNS void LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    IF jsonb_array_length(coalesce(deletions -> 'windows', '[]')) > 0 THEN
        DELETE FROM windows w USING jsonb_to_recordset(deletions -> 'windows') AS d(subscriber_id text, seq integer)
        WHERE w.subscriber_id = d.subscriber_id AND w.seq = d.seq;
    END IF;
    IF jsonb_array_length(coalesce(deletions -> 'report_runs', '[]')) > 0 THEN
        DELETE FROM report_runs r
        USING jsonb_to_recordset(deletions -> 'report_runs') AS d(entitlement text, subscriber_id text, start_us int8)
        WHERE r.entitlement = d.entitlement AND r.subscriber_id = d.subscriber_id AND r.start_us = d.start_us;
    END IF;
    IF jsonb_array_length(coalesce(deletions -> 'report_transactions', '[]')) > 0 THEN
        DELETE FROM report_transactions t USING jsonb_to_recordset(deletions -> 'report_transactions') AS d(source_event_id uuid)
        WHERE t.source_event_id = d.source_event_id;
    END IF;
    IF jsonb_array_length(coalesce(deletions -> 'report_trials', '[]')) > 0 THEN
        DELETE FROM report_trials t
        USING jsonb_to_recordset(deletions -> 'report_trials') AS d(source_event_id uuid, entitlement text)
        WHERE t.source_event_id = d.source_event_id AND t.entitlement = d.entitlement;
    END IF;
    PERFORM subledger_projection_insert(window_rows, state_rows, run_rows, transaction_rows, trial_rows, rollup_cells);
END $$;

DROP FUNCTION subledger_append(bigint, bigint, text[], bigint[], bytea[], timestamptz, text[], bigint[], bigint[],
    uuid[], text[], text[], text[], text[], text[], text[], text[], bytea[], bytea[], bytea[], jsonb, jsonb, jsonb,
    jsonb, jsonb, jsonb);

CREATE FUNCTION subledger_append(
    lock_key bigint, expected_position bigint,
    head_subscribers text[], head_versions bigint[], head_hashes bytea[],
    new_recorded_at timestamptz,
    e_subscribers text[], e_versions bigint[], e_positions bigint[], e_ids uuid[], e_types text[], e_occurred text[],
    e_sources text[], e_environments text[], e_keys text[], e_data text[], e_metadata text[],
    e_fingerprints bytea[], e_prev_hashes bytea[], e_hashes bytea[],
    window_rows jsonb, state_rows jsonb, run_rows jsonb, transaction_rows jsonb, trial_rows jsonb, rollup_cells jsonb,
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
