-- ferry_job_kind: every job kind some worker has registered, so that the
-- enqueue CLI can refuse kinds that nothing would ever work.
CREATE TABLE ferry_job_kind (
    kind        text        PRIMARY KEY CHECK (char_length(kind) BETWEEN 1 AND 128),
    queue       text        NOT NULL CHECK (char_length(queue) BETWEEN 1 AND 128),
    description text        NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now()
);
