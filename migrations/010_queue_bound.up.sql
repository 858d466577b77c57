-- Bounded queues (package jobs, "Bounded queues"). A queue with a bound
-- (max_length NOT NULL) holds at most max_length jobs in the counted states
-- (available, scheduled, retryable, pending, running). The database enforces
-- it, so every insert path is bounded, plain SQL included.
--
-- The length of a bounded queue is admitted - released, kept in two rows:
-- statements that add jobs to a queue's counted states add to admitted under
-- the lock of the queue's ferry_queue row (held to commit, so concurrent
-- inserters take turns and never overshoot); statements that take jobs out
-- of them (River's completer, a delete, a cancel) add to released in
-- ferry_queue_released, a row of its own, so that a completion never waits
-- for an inserting transaction to commit. An inserter reads released
-- without a lock: a committed value that only grows, so it may refuse a
-- little early, never late.
CREATE TABLE ferry_queue (
    name       text        PRIMARY KEY,
    max_length bigint      CHECK (max_length IS NULL OR max_length >= 0),
    workers    integer,
    admitted   bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ferry_queue_released (
    name     text   PRIMARY KEY,
    released bigint NOT NULL DEFAULT 0
);

-- ferry_queue_counted says whether a job in state s counts towards its
-- queue's length.
CREATE FUNCTION ferry_queue_counted(s river_job_state) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN s IN ('available', 'scheduled', 'retryable', 'pending', 'running');

-- ferry_queue_admit adds ns[i] jobs to queue names[i], for the bounded ones,
-- and refuses the statement (SQLSTATE FR002) if a queue is then over its
-- bound. Rows are locked in name order: two statements that fill the same
-- queues never deadlock on them.
CREATE FUNCTION ferry_queue_admit(names text[], ns bigint[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    q record;
    rel bigint;
BEGIN
    PERFORM 1 FROM ferry_queue
        WHERE name = ANY (names) AND max_length IS NOT NULL
        ORDER BY name FOR NO KEY UPDATE;
    FOR q IN
        UPDATE ferry_queue f SET admitted = f.admitted + d.n
        FROM unnest(names, ns) AS d(name, n)
        WHERE f.name = d.name AND f.max_length IS NOT NULL
        RETURNING f.name, f.max_length, f.admitted, d.n
    LOOP
        SELECT r.released INTO rel FROM ferry_queue_released r WHERE r.name = q.name;
        IF q.admitted - coalesce(rel, 0) > q.max_length THEN
            RAISE EXCEPTION 'ferry: queue full: queue % holds % of at most % jobs; % more do not fit',
                q.name, q.admitted - q.n - coalesce(rel, 0), q.max_length, q.n
                USING ERRCODE = 'FR002',
                      DETAIL = json_build_object('queue', q.name, 'max_length', q.max_length,
                          'length', q.admitted - q.n - coalesce(rel, 0), 'adding', q.n)::text;
        END IF;
    END LOOP;
END
$$;

-- ferry_queue_release takes ns[i] jobs out of queue names[i], for the
-- bounded ones. It never waits on an inserter's lock of ferry_queue.
CREATE FUNCTION ferry_queue_release(names text[], ns bigint[]) RETURNS void LANGUAGE sql AS $$
    UPDATE ferry_queue_released r SET released = r.released + d.n
    FROM unnest(names, ns) AS d(name, n), ferry_queue f
    WHERE r.name = d.name AND f.name = d.name AND f.max_length IS NOT NULL
$$;

-- ferry_queue_count is the statement-level trigger of INSERT, UPDATE and
-- DELETE on river_job. It returns at once while no queue has a bound;
-- otherwise it sums per queue the rows entering the counted states (an
-- insert, a retry of a finalized job, a move between queues) and the rows
-- leaving them (a completion, a cancel, a discard, a delete, a move).
-- ferry_queue_admit and ferry_queue_release take NULL arrays (no rows) as
-- nothing to do.
CREATE FUNCTION ferry_queue_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ferry_queue WHERE max_length IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        PERFORM ferry_queue_admit(array_agg(queue), array_agg(n)) FROM (
            SELECT queue, count(*) AS n FROM ferry_new
            WHERE ferry_queue_counted(state) GROUP BY queue) d;
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM ferry_queue_release(array_agg(queue), array_agg(n)) FROM (
            SELECT queue, count(*) AS n FROM ferry_old
            WHERE ferry_queue_counted(state) GROUP BY queue) d;
    ELSE
        -- Releases first: a move within one statement frees its places
        -- before it takes new ones.
        PERFORM ferry_queue_release(array_agg(queue), array_agg(n)) FROM (
            SELECT o.queue, count(*) AS n FROM ferry_old o JOIN ferry_new n USING (id)
            WHERE ferry_queue_counted(o.state) AND (NOT ferry_queue_counted(n.state) OR n.queue <> o.queue)
            GROUP BY o.queue) d;
        PERFORM ferry_queue_admit(array_agg(queue), array_agg(n)) FROM (
            SELECT n.queue, count(*) AS n FROM ferry_old o JOIN ferry_new n USING (id)
            WHERE ferry_queue_counted(n.state) AND (NOT ferry_queue_counted(o.state) OR n.queue <> o.queue)
            GROUP BY n.queue) d;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ferry_queue_insert AFTER INSERT ON river_job
    REFERENCING NEW TABLE AS ferry_new
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_queue_count();

CREATE TRIGGER ferry_queue_update AFTER UPDATE ON river_job
    REFERENCING OLD TABLE AS ferry_old NEW TABLE AS ferry_new
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_queue_count();

CREATE TRIGGER ferry_queue_delete AFTER DELETE ON river_job
    REFERENCING OLD TABLE AS ferry_old
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_queue_count();
