-- ferry_worker: one row per worker process, keyed by its River client id.
-- A worker is alive exactly while its liveness session holds the session
-- advisory lock (911000003, id) in this database: Postgres ends the session,
-- and so frees the lock, when the process dies. The leader's rescuer stamps
-- dead_at when it finds the lock free, in the transaction that takes the
-- worker's running jobs back (see package internal/liveness).
CREATE TABLE ferry_worker (
    id           integer     GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    client_id    text        NOT NULL UNIQUE,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    backend_pid  integer     NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    stopped_at   timestamptz,
    dead_at      timestamptz,
    rescued_jobs integer     NOT NULL DEFAULT 0
);

CREATE INDEX ferry_worker_dead_at ON ferry_worker (dead_at);

-- The fence of a dead worker. Sessions of a ferry worker carry its client id
-- in the setting ferry.client_id. Once the rescuer has declared a worker
-- dead (and so handed its running jobs to others), no UPDATE of river_job
-- from one of its sessions may run: a worker that comes back from a
-- partition cannot overwrite the outcome of the attempt that replaced its
-- own. One lookup per UPDATE statement (River completes jobs in batches),
-- none for sessions without the setting.
CREATE FUNCTION ferry_worker_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cid text := current_setting('ferry.client_id', true);
BEGIN
    IF cid IS NOT NULL AND cid <> '' AND EXISTS (
        SELECT 1 FROM ferry_worker WHERE client_id = cid AND dead_at IS NOT NULL
    ) THEN
        RAISE EXCEPTION 'ferry: worker % was declared dead and its running jobs rescued; it may not change jobs', cid
            USING ERRCODE = 'FR001';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ferry_worker_fence BEFORE UPDATE ON river_job
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_worker_fence();
