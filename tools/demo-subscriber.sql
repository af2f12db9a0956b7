-- The subscriber tools/run --demo's banner suggests (and tools/browser-test opens): a production subscriber with
-- a window a refund cut short and a credit, with a history short enough to read.
SELECT subscriber_id FROM windows WHERE environment = 'production' GROUP BY subscriber_id
  HAVING bool_or(cut_cause = 'refund' AND (granted_end IS NULL OR end_at < granted_end))
     AND bool_or(kind = 'credit' AND end_at > start_at)
  ORDER BY count(*) BETWEEN 3 AND 12 DESC, count(*), subscriber_id LIMIT 1
