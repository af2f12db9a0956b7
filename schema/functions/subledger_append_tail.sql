-- The append lock and the tail it guards, in one round trip, for an append inside a caller's transaction (a
-- store message's: docs/event-store.md, "Appends inside a store message's transaction"). Takes the lock, then
-- returns the log's last event first (none when the log is empty), then the whole streams of `subscribers`
-- in subscriber and version order. Each query of a VOLATILE function takes a new snapshot, so what it reads
-- was committed before the lock was granted: a plain statement that took the lock would read the snapshot
-- taken when it started, before the wait. The caller then writes in one statement (`subledger_append`, whose
-- checks then hold) and the lock stays held until its transaction ends.
CREATE OR REPLACE FUNCTION subledger_append_tail(lock_key bigint, subscribers text[])
RETURNS SETOF events LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    RETURN QUERY SELECT * FROM events ORDER BY position DESC LIMIT 1;
    RETURN QUERY SELECT * FROM events WHERE subscriber_id = ANY(subscribers) ORDER BY subscriber_id, version;
END $$;
