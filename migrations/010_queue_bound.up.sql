-- Bounded queues (package jobs, "Bounded queues"). A queue with a bound
-- (max_length NOT NULL) holds at most max_length jobs in the counted states
-- (available, scheduled, retryable, pending, running). The database enforces
-- it, so every insert path is bounded, plain SQL included.
--
-- The length of a bounded queue is admitted - refunded - released:
--
--   - admitted is a sequence of the queue's own: a statement that adds n
--     jobs to the counted states takes n values from it, and the last is
--     the number of jobs ever admitted, those of every transaction still in
--     flight included. Sequences are not transactional: inserters never
--     wait for each other, and none can miss another's admission, so the
--     bound is never overshot.
--   - refunded, a second sequence, takes back the admissions of a statement
--     refused as over the bound (the refusal aborts the transaction, but not
--     the sequences).
--   - released, a row of ferry_queue_released, counts the jobs that left the
--     counted states (River's completer, a delete, a cancel) in committed
--     transactions. An inserter reads it without a lock: a committed value
--     that only grows.
--
-- Every error is on the side of a longer length: a refusal a little early,
-- never an overshoot. A transaction that admits jobs and then rolls back
-- leaves them in admitted until the leader's recount (jobs.RecountQueues)
-- counts the queue again.
CREATE TABLE ferry_queue (
    name       text        PRIMARY KEY,
    max_length bigint      CHECK (max_length IS NULL OR max_length >= 0),
    workers    integer,
    -- The queue's sequences, made when it is first bounded.
    admitted   regclass,
    refunded   regclass,
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

-- ferry_queue_take takes n values from sequence seq and returns the last.
CREATE FUNCTION ferry_queue_take(seq regclass, n bigint) RETURNS bigint
    LANGUAGE sql VOLATILE
    RETURN (SELECT max(nextval(seq)) FROM generate_series(1, n));

-- ferry_queue_length is a bounded queue's length from its counters.
CREATE FUNCTION ferry_queue_length(q ferry_queue) RETURNS bigint
    LANGUAGE sql STABLE
    RETURN coalesce(pg_sequence_last_value(q.admitted), 0)
         - coalesce(pg_sequence_last_value(q.refunded), 0)
         - coalesce((SELECT released FROM ferry_queue_released r WHERE r.name = q.name), 0);

-- ferry_queue_admit admits ns[i] jobs to queue names[i], for the bounded
-- ones, and refuses the statement (SQLSTATE FR002) if a queue is then over
-- its bound, after refunding what it admitted. refunded and released are
-- read before admitted: a refund or a release read is then always of jobs
-- that admitted already counts.
CREATE FUNCTION ferry_queue_admit(names text[], ns bigint[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    q record;
    adm bigint;
    len bigint;
    took regclass[] := '{}';
    tookn bigint[] := '{}';
BEGIN
    FOR q IN
        SELECT f.name, f.max_length, f.admitted, f.refunded, d.n,
               coalesce(pg_sequence_last_value(f.refunded), 0)
                 + coalesce((SELECT released FROM ferry_queue_released r WHERE r.name = f.name), 0) AS gone
        FROM unnest(names, ns) AS d(name, n)
        JOIN ferry_queue f ON f.name = d.name
        WHERE f.max_length IS NOT NULL AND f.admitted IS NOT NULL AND d.n > 0
        ORDER BY f.name
    LOOP
        adm := ferry_queue_take(q.admitted, q.n);
        took := took || q.refunded;
        tookn := tookn || q.n;
        len := adm - q.gone;
        IF len > q.max_length THEN
            PERFORM ferry_queue_take(t.seq, t.n) FROM unnest(took, tookn) AS t(seq, n);
            RAISE EXCEPTION 'ferry: queue full: queue % holds % of at most % jobs; % more do not fit',
                q.name, len - q.n, q.max_length, q.n
                USING ERRCODE = 'FR002',
                      DETAIL = json_build_object('queue', q.name, 'max_length', q.max_length,
                          'length', len - q.n, 'adding', q.n)::text;
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
    ELSIF EXISTS (SELECT 1 FROM ferry_new) THEN
        -- An UPDATE of no row returns here: River's inserts (INSERT … ON
        -- CONFLICT DO UPDATE) fire this trigger for UPDATE too.
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
