-- The projection write deletes the touched subscribers' rows by `subscriber_id = ANY(subscribers)` from
-- tables indexed on subscriber_id. PL/pgSQL caches a generic plan, which does not know the array's length:
-- on a young ledger (some ten thousand windows) the planner then prefers a sequential scan of the whole
-- table to the index look-ups, and each append paid it under the append lock (about 2 ms per batch of 100
-- events on 16,000 windows, growing with the table until a later ANALYZE flips the plan). The rows to
-- delete are always a few per subscriber, found through the indexes; the rest of the write inserts.
ALTER FUNCTION subledger_projection_write(text[], jsonb, jsonb, jsonb, jsonb, jsonb, jsonb) SET enable_seqscan = off;
