-- ferry_schedule: every durable schedule the leader runs, kept current by
-- the leader (contract: read by `enqueue schedule list` and the admin page).
CREATE TABLE ferry_schedule (
    id           text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    name         text        NOT NULL,
    trigger      text        NOT NULL,
    zone         text        NOT NULL DEFAULT 'UTC',
    kind         text        NOT NULL,
    queue        text        NOT NULL,
    next_run_at  timestamptz,
    last_tick_at timestamptz,
    last_job_id  bigint,
    last_status  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- ferry_periodic_tick: one row per tick of a schedule, claimed in the same
-- transaction as the tick's River job. The primary key is what makes a tick
-- happen once, whatever number of leaders, retries and restarts.
CREATE TABLE ferry_periodic_tick (
    schedule_id text        NOT NULL,
    tick_at     timestamptz NOT NULL,
    term        bigint      NOT NULL,
    status      text        NOT NULL CHECK (status IN ('enqueued', 'skipped')),
    reason      text,
    job_id      bigint,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, tick_at),
    CHECK ((status = 'enqueued') = (job_id IS NOT NULL))
);
