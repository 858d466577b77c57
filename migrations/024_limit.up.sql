-- Concurrency and rate limits across every worker (package internal/limit,
-- config file section limits:). A limit names a job kind or a queue and,
-- optionally, a top-level field of the job's args (key_field), so that each
-- value of that field gets a limit of its own.

-- The limits that workers enforce, as their config files give them: each
-- worker writes its own at start and marks them seen while it runs. `enqueue
-- limits` and the console read them.
CREATE TABLE ferry_limit (
    name text PRIMARY KEY CONSTRAINT ferry_limit_name_format CHECK (name ~ '^[A-Za-z0-9_.:/-]{1,128}$'),
    kind text,
    queue text,
    key_field text,
    concurrency integer CONSTRAINT ferry_limit_concurrency_positive CHECK (concurrency > 0),
    rate_count integer CONSTRAINT ferry_limit_rate_positive CHECK (rate_count > 0),
    rate_period interval CONSTRAINT ferry_limit_period_positive CHECK (rate_period > interval '0'),
    burst integer CONSTRAINT ferry_limit_burst_positive CHECK (burst > 0),
    seen_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ferry_limit_target CHECK ((kind IS NULL) <> (queue IS NULL)),
    CONSTRAINT ferry_limit_some CHECK (concurrency IS NOT NULL OR rate_count IS NOT NULL),
    CONSTRAINT ferry_limit_rate_whole CHECK ((rate_count IS NULL) = (rate_period IS NULL) AND (rate_count IS NULL) = (burst IS NULL))
);

-- A concurrency limit's slots in use: one row per job that holds one.
-- started: the job's attempt runs (it holds the slot while the job is
-- running at that attempt: a rescued job's next attempt takes a slot of
-- its own); otherwise the slot was handed to a waiting job, which was
-- made available and holds the slot until it starts (or leaves available
-- and scheduled).
CREATE TABLE ferry_limit_slot (
    limit_name text NOT NULL,
    key text NOT NULL,
    job_id bigint NOT NULL,
    attempt integer NOT NULL DEFAULT 0,
    started boolean NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (limit_name, key, job_id)
);

-- Jobs waiting for a limit, in order of arrival: snoozed (their attempt
-- given back) until a slot frees or, for a rate, until due.
CREATE TABLE ferry_limit_wait (
    limit_name text NOT NULL,
    key text NOT NULL,
    job_id bigint NOT NULL,
    since timestamptz NOT NULL DEFAULT now(),
    due timestamptz,
    PRIMARY KEY (limit_name, key, job_id)
);
CREATE INDEX ferry_limit_wait_order ON ferry_limit_wait (limit_name, key, since, job_id);
CREATE INDEX ferry_limit_wait_job ON ferry_limit_wait (job_id);

-- A rate limit's state per key (the generic cell rate algorithm): tat is
-- the theoretical arrival time of the next start; a start at t is allowed
-- when t >= tat - (burst - 1) * period / count. queued_until is the due
-- time of the last job queued behind it.
CREATE TABLE ferry_limit_rate (
    limit_name text NOT NULL,
    key text NOT NULL,
    tat timestamptz NOT NULL,
    queued_until timestamptz,
    PRIMARY KEY (limit_name, key)
);
