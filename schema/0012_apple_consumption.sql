-- Answers sent to Apple for CONSUMPTION_REQUEST notifications (Send Consumption Information): one per
-- request, so a request is answered once however many instances run the responder.
CREATE TABLE apple_consumption_answers (
    notification_uuid text        PRIMARY KEY,
    transaction_id    text        NOT NULL,
    subscriber_id     text        NOT NULL,
    answered_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    http_status       integer     NOT NULL,
    request           jsonb       NOT NULL
);

GRANT SELECT, INSERT ON apple_consumption_answers TO subledger_app;
