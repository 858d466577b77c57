-- ferry_telegram_offset: per bot, the offset the next getUpdates sends (the
-- last stored update_id + 1), written in the same transaction as the
-- updates' outbox messages, so a failover resumes exactly where the last
-- committed batch ended.
CREATE TABLE ferry_telegram_offset (
    bot            text        PRIMARY KEY CHECK (bot ~ '^[a-z0-9_-]{1,64}$'),
    next_offset    bigint      NOT NULL,
    last_update_id bigint,
    updates_stored bigint      NOT NULL DEFAULT 0,
    term           bigint,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- ferry_telegram_malformed: updates that could not be stored as outbox
-- messages (no update_id, or over the payload limit), kept for inspection;
-- they never block the updates after them.
CREATE TABLE ferry_telegram_malformed (
    id          bigserial   PRIMARY KEY,
    bot         text        NOT NULL,
    update_id   bigint,
    raw         text        NOT NULL,
    error       text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
