-- ferry_outbox (contract): messages written in the caller's transaction, by
-- Go (outbox.Add) or by plain SQL from any service. The database enforces
-- the rules, so a plain-SQL writer gets the same errors as Go.
CREATE TABLE ferry_outbox (
    id           bigserial   PRIMARY KEY,
    topic        text        NOT NULL,
    payload      jsonb       NOT NULL,
    dedup_key    text,
    status       text        NOT NULL DEFAULT 'pending',
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    relayed_at   timestamptz,
    delivered_at timestamptz,
    CONSTRAINT ferry_outbox_topic_format CHECK (topic ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    CONSTRAINT ferry_outbox_payload_size CHECK (octet_length(payload::text) <= 262144),
    CONSTRAINT ferry_outbox_dedup_key_length CHECK (dedup_key IS NULL OR char_length(dedup_key) BETWEEN 1 AND 256),
    CONSTRAINT ferry_outbox_status CHECK (status IN ('pending', 'relayed', 'delivered', 'stuck'))
);

-- A dedup_key is unique per topic: a second insert of the same key fails.
CREATE UNIQUE INDEX ferry_outbox_topic_dedup_key ON ferry_outbox (topic, dedup_key) WHERE dedup_key IS NOT NULL;
-- What the relay claims, oldest first.
CREATE INDEX ferry_outbox_pending ON ferry_outbox (id) WHERE status = 'pending';

-- Wake the relays when messages arrive (once per statement; NOTIFY also
-- folds duplicates within a transaction).
CREATE FUNCTION ferry_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ferry_outbox', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER ferry_outbox_notify AFTER INSERT ON ferry_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_outbox_notify();

-- ferry_outbox_delivery (contract): one delivery per (message, route).
CREATE TABLE ferry_outbox_delivery (
    message_id      bigint      NOT NULL REFERENCES ferry_outbox (id) ON DELETE CASCADE,
    route           text        NOT NULL,
    status          text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz,
    job_id          bigint,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, route),
    CONSTRAINT ferry_outbox_delivery_status CHECK (status IN ('pending', 'delivered', 'stuck'))
);

CREATE INDEX ferry_outbox_delivery_stuck ON ferry_outbox_delivery (message_id) WHERE status = 'stuck';

-- ferry_outbox_received: what Go receivers have taken in, for once-only
-- effects (outbox.Receive).
CREATE TABLE ferry_outbox_received (
    consumer    text        NOT NULL,
    event_id    text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
