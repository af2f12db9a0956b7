-- How far a periodic store sync has read (e.g. the App Store notification history backfill): the end of the
-- last range read completely. The next run starts a little before it, so a restart repeats a few
-- notifications (each appends nothing the second time) and never skips one.
CREATE TABLE store_sync_marks (
    store       text        NOT NULL,
    name        text        NOT NULL,
    mark        timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (store, name)
);

GRANT SELECT, INSERT, UPDATE ON store_sync_marks TO subledger_app;
