-- ferry_lock (contract): named locks (package locks, `enqueue lock`). One
-- row per name, kept after release so that token, the fencing token, only
-- ever grows: each acquisition adds one. A lock is held while expires_at is
-- after the database's clock; a release sets expires_at to that clock.
-- Never delete a row: the next acquisition would start the tokens again.
CREATE TABLE ferry_lock (
    name        text        PRIMARY KEY,
    token       bigint      NOT NULL,
    holder      text        NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    CONSTRAINT ferry_lock_name_format CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    CONSTRAINT ferry_lock_token_positive CHECK (token > 0),
    CONSTRAINT ferry_lock_holder_length CHECK (char_length(holder) <= 256)
);
