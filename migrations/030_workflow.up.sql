-- Workflows (package workflow): DAGs of River jobs, each step a job of any
-- kind that waits, in River's `pending` state (River never fetches it), for
-- the steps it depends on. A step becomes available in the transaction
-- that completes its last dependency, by the trigger below: never by a
-- polling scan, on every path that finishes a job (River's completer,
-- JobCompleteTx, a cancel, ferry's rescue, the CLI, plain SQL).
--
-- No foreign keys: only ferry writes these tables, a workflow at a time,
-- checked whole first (package workflow); the checks of a key per step
-- and two per edge were half the cost of inserting a workflow. The
-- workflows' retention deletes a workflow's rows together.
--
-- ferry_workflow is one row per workflow; ferry_workflow_step one row per
-- step, naming its job (river_job.id), how many of its dependencies it
-- still waits for (waiting) and, once its job has finished, how it ended
-- (outcome); ferry_workflow_dep one row per edge, by the two steps' job
-- ids. A dependency's end counts towards a step's release once: the
-- trigger sees each job end once (a change from not finished to
-- finished), and a retry that runs it again counts it as waiting again
-- (ferry_workflow_reopen).
--
-- Locks. Every change to a workflow's steps holds the transaction advisory
-- lock (911000006, hashtext(workflow id)): the trigger shared, so steps of
-- one workflow finish side by side; a cancel, a retry and a run-time
-- addition exclusively, so that none of them meets a finishing step half
-- way. A transaction locks the step rows it changes in the order of their
-- job ids. The end of a workflow is settled by the statement that ends its
-- last step, under the lock (911000007, hashtext(workflow id))
-- (ferry_workflow_settle_check).

CREATE TABLE ferry_workflow (
    id           text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200 AND id !~ '[[:cntrl:]]'),
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200 AND name !~ '[[:cntrl:]]'),
    state        text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'completed', 'failed', 'cancelled')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    cancelled_at timestamptz,
    -- W3C trace context of the inserting span, for the steps' spans.
    metadata     jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    CHECK ((state = 'running') = (finished_at IS NULL)),
    CHECK ((state = 'cancelled') = (cancelled_at IS NOT NULL))
);
CREATE INDEX ferry_workflow_created ON ferry_workflow (created_at DESC, id);
CREATE INDEX ferry_workflow_running ON ferry_workflow (created_at) WHERE state = 'running';
CREATE INDEX ferry_workflow_finished ON ferry_workflow (finished_at) WHERE state <> 'running';

CREATE TABLE ferry_workflow_step (
    workflow_id        text NOT NULL,
    name               text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    job_id             bigint NOT NULL,
    -- all: released when every dependency completed (or failed, with
    -- ignore_failed_deps); any_failed: released by the first dependency
    -- that fails, cancelled as not needed when all completed (a batch's
    -- failure callback).
    mode               text NOT NULL DEFAULT 'all' CHECK (mode IN ('all', 'any_failed')),
    ignore_failed_deps boolean NOT NULL DEFAULT false,
    -- dependencies whose end has not counted yet
    waiting            integer NOT NULL DEFAULT 0 CHECK (waiting >= 0),
    -- the running step that added this one (workflow.AddTx)
    added_by           text,
    -- this step also waits for every step added under that one
    after_added_by     text,
    -- NULL while the job has not finished
    outcome            text CHECK (outcome IN ('completed', 'cancelled', 'discarded', 'deleted')),
    -- why ferry cancelled the job: a dependency failed, the workflow was
    -- cancelled, or an any_failed step had no failure to run for
    cancel_reason      text CHECK (cancel_reason IN ('dependency', 'workflow', 'not_needed')),
    PRIMARY KEY (workflow_id, name)
);
CREATE UNIQUE INDEX ferry_workflow_step_job ON ferry_workflow_step (job_id);
CREATE INDEX ferry_workflow_step_open ON ferry_workflow_step (workflow_id) WHERE outcome IS NULL;
CREATE INDEX ferry_workflow_step_fanin ON ferry_workflow_step (workflow_id, after_added_by) WHERE after_added_by IS NOT NULL;

CREATE TABLE ferry_workflow_dep (
    -- the dependency's job and the dependent's (river_job.id of each)
    depends_on bigint NOT NULL,
    step       bigint NOT NULL,
    PRIMARY KEY (depends_on, step),
    CHECK (depends_on <> step)
);
CREATE INDEX ferry_workflow_dep_step ON ferry_workflow_dep (step);

-- ready: the steps' jobs leave `pending` (for `scheduled` when one was
-- inserted to run later), stamped with the moment (metadata
-- ferry_ready_at, for the start-delay histogram), and the workers of
-- their queues are woken as an insert wakes them.
CREATE FUNCTION ferry_workflow_ready(jobs bigint[], tschema text) RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off SET enable_seqscan = off SET plan_cache_mode = force_custom_plan SET jit = off
AS $$
DECLARE
    t  timestamptz := clock_timestamp();
    qs text[];
BEGIN
    WITH r AS (
        UPDATE river_job
        SET state = CASE WHEN scheduled_at > now() THEN 'scheduled'::river_job_state ELSE 'available'::river_job_state END,
            metadata = metadata || jsonb_build_object('ferry_ready_at', t)
        WHERE id = ANY (jobs) AND state::text = 'pending'
        RETURNING id, queue
    )
    SELECT array_agg(DISTINCT queue) INTO qs FROM r;
    IF qs IS NOT NULL THEN
        PERFORM pg_notify(tschema || '.river_insert', json_build_object('queue', q)::text) FROM unnest(qs) AS q;
    END IF;
END
$$;

-- cancel: jobs still pending (and, with waiting_too, available,
-- scheduled or retryable) are cancelled for reason, with an error River UI
-- shows; their own triggers then tell their dependents.
CREATE FUNCTION ferry_workflow_cancel(jobs bigint[], reason text, message text, waiting_too boolean) RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off SET enable_seqscan = off SET plan_cache_mode = force_custom_plan SET jit = off
AS $$
BEGIN
    PERFORM 1 FROM ferry_workflow_step WHERE job_id = ANY (jobs) ORDER BY job_id FOR NO KEY UPDATE;
    WITH c AS (
        UPDATE river_job
        SET state = 'cancelled', finalized_at = now(),
            errors = array_append(coalesce(errors, '{}'),
                jsonb_build_object('at', now(), 'attempt', attempt, 'error', message, 'trace', ''))
        WHERE id = ANY (jobs)
          AND (state::text = 'pending' OR (waiting_too AND state::text IN ('available', 'scheduled', 'retryable')))
        RETURNING id
    )
    UPDATE ferry_workflow_step s SET cancel_reason = reason WHERE s.job_id = ANY (ARRAY(SELECT id FROM c));
END
$$;

-- release: the steps of jobs that ended, with their outcomes (completed,
-- cancelled, discarded, deleted), all those of one statement at once. A
-- step's own row takes its outcome (once: the row is open only until
-- then); the edges from it that its end counts for (all of them for a
-- completion; for a failure, those of steps that run anyway or run on a
-- failure) are counted per dependent; the open dependents still waiting,
-- locked in the order of their job ids (so that two statements never
-- wait for each other in a circle), count that many fewer to wait for,
-- and those that reach none are made ready. A step released already
-- (none to wait for) counts nothing more: a dependency retried after it
-- completed does not hold back what it released. A failure cancels every
-- step downstream that waits for it to complete, in one statement: a
-- chain of any length is cancelled without recursion (the cancelled
-- steps' own release finds their dependents cancelled already).
CREATE FUNCTION ferry_workflow_release(jobs bigint[], outcomes text[], tschema text) RETURNS void
LANGUAGE plpgsql
-- Plans that do not depend on the tables' statistics, which a workflow
-- inserted and run before the next ANALYZE makes wrong by orders of
-- magnitude: rows are found by their keys' indexes, from the arrays at
-- hand (= ANY) or from each row before them (a LATERAL subquery kept
-- whole by OFFSET 0), never by a scan of the open steps or the pending
-- jobs of every workflow; conditions on a step's outcome or a job's
-- state are written so that the partial indexes of open steps and of
-- River's fetch do not match them.
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off SET enable_seqscan = off SET enable_material = off SET plan_cache_mode = force_custom_plan SET jit = off
AS $$
DECLARE
    o        text;
    k        integer;
    got      bigint[];
    e_job    bigint[];
    e_out    text[];
    a_job    bigint[];
    a_n      integer[];
    a_failed bigint[];
    r_job    bigint[];
    r_wf     text[];
    r_mode   text[];
    r_wait   integer[];
    live     text[];
    doomed   bigint[];
    cause    text;
    unneeded bigint[];
    ready    bigint[];
BEGIN
    FOR o IN SELECT DISTINCT x FROM unnest(outcomes) AS x LOOP
        WITH u AS (
            UPDATE ferry_workflow_step s SET outcome = o
            WHERE s.job_id = ANY (ARRAY(SELECT f.j FROM unnest(jobs, outcomes) AS f(j, x) WHERE f.x = o))
              AND coalesce(s.outcome, '') = ''
            RETURNING s.job_id
        )
        SELECT array_agg(job_id) INTO got FROM u;
        IF got IS NOT NULL THEN
            e_job := e_job || got;
            e_out := e_out || array_fill(o, ARRAY[cardinality(got)]);
        END IF;
    END LOOP;
    IF e_job IS NULL THEN
        RETURN;
    END IF;

    WITH c AS (
        SELECT t.job_id, e.outcome <> 'completed' AS failed
        FROM unnest(e_job, e_out) AS e(job_id, outcome)
        CROSS JOIN LATERAL (SELECT dep.step FROM ferry_workflow_dep dep WHERE dep.depends_on = e.job_id OFFSET 0) d
        CROSS JOIN LATERAL (SELECT t.job_id, t.mode, t.ignore_failed_deps FROM ferry_workflow_step t
                            WHERE t.job_id = d.step AND coalesce(t.outcome, '') = '' AND t.waiting > 0 OFFSET 0) t
        WHERE e.outcome = 'completed' OR t.ignore_failed_deps OR t.mode = 'any_failed'
    ), n AS (SELECT job_id, count(*)::integer AS n, bool_or(failed) AS failed FROM c GROUP BY job_id)
    SELECT array_agg(job_id ORDER BY job_id), array_agg(n ORDER BY job_id), array_agg(job_id) FILTER (WHERE failed)
    INTO a_job, a_n, a_failed FROM n;

    IF a_job IS NOT NULL THEN
        PERFORM 1 FROM ferry_workflow_step s
        WHERE s.job_id = ANY (a_job) AND coalesce(s.outcome, '') = ''
        ORDER BY s.job_id
        FOR NO KEY UPDATE OF s;
        FOR k IN SELECT DISTINCT x FROM unnest(a_n) AS x LOOP
            WITH u AS (
                UPDATE ferry_workflow_step s SET waiting = greatest(s.waiting - k, 0)
                WHERE s.job_id = ANY (ARRAY(SELECT q.j FROM unnest(a_job, a_n) AS q(j, x) WHERE q.x = k))
                  AND coalesce(s.outcome, '') = '' AND s.waiting > 0
                RETURNING s.workflow_id, s.job_id, s.mode, s.waiting
            )
            SELECT r_job || array_agg(job_id), r_wf || array_agg(workflow_id), r_mode || array_agg(mode), r_wait || array_agg(waiting)
            INTO r_job, r_wf, r_mode, r_wait FROM u;
        END LOOP;
        SELECT array_agg(id) INTO live FROM ferry_workflow
        WHERE id = ANY (ARRAY(SELECT DISTINCT x FROM unnest(r_wf) AS x)) AND state = 'running';
        SELECT array_agg(r.j ORDER BY r.j) FILTER (WHERE (r.m = 'all' AND r.w = 0) OR (r.m = 'any_failed' AND r.j = ANY (coalesce(a_failed, '{}')))),
               array_agg(r.j ORDER BY r.j) FILTER (WHERE r.m = 'any_failed' AND r.w = 0 AND NOT r.j = ANY (coalesce(a_failed, '{}')))
        INTO ready, unneeded
        FROM unnest(r_job, r_wf, r_mode, r_wait) AS r(j, wf, m, w)
        WHERE r.wf = ANY (coalesce(live, '{}'));
        IF ready IS NOT NULL THEN
            PERFORM ferry_workflow_ready(ready, tschema);
        END IF;
    END IF;

    IF unneeded IS NOT NULL THEN
        PERFORM ferry_workflow_cancel(unneeded, 'not_needed',
            'workflow: not run: every dependency completed, none failed', false);
    END IF;
    IF 'completed' = ALL (e_out) THEN
        RETURN;
    END IF;

    -- Downstream of each failure: every open step that waits for it, or
    -- for one of those, to complete.
    WITH RECURSIVE down(job_id, why) AS (
        SELECT e.job_id, format('dependency %s ended %s', es.name, e.outcome)
        FROM unnest(e_job, e_out) AS e(job_id, outcome)
        CROSS JOIN LATERAL (SELECT es.name FROM ferry_workflow_step es WHERE es.job_id = e.job_id OFFSET 0) es
        WHERE e.outcome <> 'completed'
      UNION
        SELECT t.job_id, down.why
        FROM down
        CROSS JOIN LATERAL (SELECT dep.step FROM ferry_workflow_dep dep WHERE dep.depends_on = down.job_id OFFSET 0) d
        CROSS JOIN LATERAL (SELECT t.job_id FROM ferry_workflow_step t
                            WHERE t.job_id = d.step AND coalesce(t.outcome, '') = '' AND t.mode = 'all' AND NOT t.ignore_failed_deps OFFSET 0) t
    )
    SELECT array_agg(DISTINCT down.job_id), min(down.why) INTO doomed, cause
    FROM down WHERE down.job_id <> ALL (e_job);
    IF doomed IS NOT NULL THEN
        PERFORM ferry_workflow_cancel(doomed, 'dependency', 'workflow: not run: ' || cause, false);
    END IF;
END
$$;

-- reopen: st's job runs again (a retry). The workflow runs again; the
-- steps that were cancelled because st failed (and those cancelled
-- because they were) wait again; and the steps among these, and those
-- that depend on one of these, that have not been released take their
-- counts afresh: each dependency whose end does not count for them (not
-- ended, or failed where they need it to complete) is one to wait for.
CREATE FUNCTION ferry_workflow_reopen(st ferry_workflow_step, was text) RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off SET enable_seqscan = off SET plan_cache_mode = force_custom_plan SET jit = off
AS $$
DECLARE
    reopened bigint[] := ARRAY[st.job_id];
    jobs     bigint[];
BEGIN
    UPDATE ferry_workflow SET state = 'running', finished_at = NULL, cancelled_at = NULL
    WHERE id = st.workflow_id AND state <> 'running';
    IF was <> 'completed' THEN
        WITH RECURSIVE down(job_id) AS (
            SELECT s.job_id
            FROM ferry_workflow_dep e
            JOIN ferry_workflow_step s ON s.job_id = e.step
            WHERE e.depends_on = st.job_id
              AND s.outcome = 'cancelled' AND s.cancel_reason = 'dependency'
          UNION
            SELECT s.job_id
            FROM down
            JOIN ferry_workflow_dep e ON e.depends_on = down.job_id
            JOIN ferry_workflow_step s ON s.job_id = e.step
            WHERE s.outcome = 'cancelled' AND s.cancel_reason = 'dependency'
        )
        SELECT array_agg(job_id ORDER BY job_id) INTO jobs FROM down;
        IF jobs IS NOT NULL THEN
            PERFORM 1 FROM ferry_workflow_step WHERE job_id = ANY (jobs) ORDER BY job_id FOR NO KEY UPDATE;
            UPDATE ferry_workflow_step SET outcome = NULL, cancel_reason = NULL
            WHERE job_id = ANY (jobs);
            UPDATE river_job SET state = 'pending', finalized_at = NULL, metadata = metadata - 'ferry_ready_at'
            WHERE id = ANY (jobs) AND state = 'cancelled';
            reopened := reopened || jobs;
        END IF;
    END IF;
    UPDATE ferry_workflow_step s
    SET waiting = (SELECT count(*) FROM ferry_workflow_dep e
                   JOIN ferry_workflow_step d ON d.job_id = e.depends_on
                   WHERE e.step = s.job_id
                     AND (d.outcome IS NULL OR NOT (d.outcome = 'completed' OR s.ignore_failed_deps OR s.mode = 'any_failed')))
    FROM river_job j
    WHERE j.id = s.job_id AND j.state = 'pending' AND coalesce(s.outcome, '') = ''
      AND (s.job_id = ANY (reopened)
           OR s.job_id IN (SELECT e.step FROM ferry_workflow_dep e WHERE e.depends_on = ANY (reopened)));
END
$$;

-- settle: a workflow none of whose steps is open has ended: failed when a
-- step failed on its own (discarded, deleted, or cancelled other than by
-- ferry for a dependency or as not needed), completed otherwise.
CREATE FUNCTION ferry_workflow_settle(wid text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ferry_workflow_step WHERE workflow_id = wid AND outcome IS NULL) THEN
        RETURN;
    END IF;
    UPDATE ferry_workflow w
    SET finished_at = now(),
        state = CASE WHEN EXISTS (
            SELECT 1 FROM ferry_workflow_step s
            WHERE s.workflow_id = wid
              AND (s.outcome IN ('discarded', 'deleted')
                   OR (s.outcome = 'cancelled' AND (s.cancel_reason IS NULL OR s.cancel_reason = 'workflow')))
        ) THEN 'failed' ELSE 'completed' END
    WHERE w.id = wid AND w.state = 'running';
END
$$;

-- After a statement that ended steps of workflow wid: is it the
-- workflow's end? Two transactions that end a workflow's last two steps
-- at once each see the other's step open, so an unlocked look would leave
-- the workflow running. An open step that no other transaction is
-- changing (FOR SHARE SKIP LOCKED, held to this commit) will be ended by
-- a later transaction, which settles: nothing to do. Otherwise the settle
-- lock (911000007, hashtext(workflow id)), held to this commit, then a
-- fresh look: of two such transactions, the second to take the lock sees
-- the first's commit.
CREATE FUNCTION ferry_workflow_settle_check(wid text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM ferry_workflow_step
    WHERE workflow_id = wid AND outcome IS NULL
    LIMIT 1 FOR SHARE SKIP LOCKED;
    IF FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(911000007, hashtext(wid));
    PERFORM ferry_workflow_settle(wid);
END
$$;

-- The jobs of steps that ended (or ended and run again) in a statement
-- are gathered by a row trigger, then released together by a statement
-- trigger at the statement's end: one pass per statement (River's
-- completer ends a batch of jobs in one), its locks taken in one order.
-- The table is unlogged and holds only rows of statements running: each
-- statement takes back its own before it ends.
CREATE UNLOGGED TABLE ferry_workflow_ended (
    job_id    bigint NOT NULL,
    state     text NOT NULL,
    old_state text NOT NULL,
    workflow  text NOT NULL
);

CREATE FUNCTION ferry_workflow_job_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO ferry_workflow_ended VALUES (OLD.id, 'deleted', OLD.state::text, OLD.metadata->>'ferry_workflow');
    ELSE
        INSERT INTO ferry_workflow_ended VALUES (NEW.id, NEW.state::text, OLD.state::text, NEW.metadata->>'ferry_workflow');
    END IF;
    PERFORM set_config('ferry.workflow_ended', 'y', true);
    RETURN NULL;
END
$$;

CREATE FUNCTION ferry_workflow_jobs_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    jobs   bigint[];
    outs   text[];
    ended_wfs   text[];
    o_job  bigint[];
    o_old  text[];
    o_wf   text[];
    st     ferry_workflow_step;
    wfs    text[];
BEGIN
    IF coalesce(current_setting('ferry.workflow_ended', true), '') <> 'y' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('ferry.workflow_ended', '', true);
    LOOP
        WITH gone AS (DELETE FROM ferry_workflow_ended RETURNING *)
        SELECT array_agg(job_id ORDER BY job_id) FILTER (WHERE state IN ('completed', 'cancelled', 'discarded', 'deleted')),
               array_agg(state ORDER BY job_id) FILTER (WHERE state IN ('completed', 'cancelled', 'discarded', 'deleted')),
               array_agg(DISTINCT workflow ORDER BY workflow),
               array_agg(job_id ORDER BY job_id) FILTER (WHERE state NOT IN ('completed', 'cancelled', 'discarded', 'deleted')),
               array_agg(old_state ORDER BY job_id) FILTER (WHERE state NOT IN ('completed', 'cancelled', 'discarded', 'deleted')),
               array_agg(workflow ORDER BY job_id) FILTER (WHERE state NOT IN ('completed', 'cancelled', 'discarded', 'deleted'))
        INTO jobs, outs, ended_wfs, o_job, o_old, o_wf
        FROM gone;
        EXIT WHEN ended_wfs IS NULL;
        -- Shared, in the order of the workflows' ids: a cancel, a retry or
        -- an addition takes one workflow's exclusively.
        PERFORM pg_advisory_xact_lock_shared(911000006, hashtext(w)) FROM unnest(ended_wfs) AS w;
        wfs := wfs || ended_wfs;
        FOR i IN 1 .. coalesce(array_length(o_job, 1), 0) LOOP
            IF o_old[i] = 'running' THEN
                -- A step that was running when its workflow was cancelled
                -- (and did not hear of it, or failed anyway) does not run
                -- again: its retry or snooze ends here.
                IF EXISTS (SELECT 1 FROM ferry_workflow WHERE id = o_wf[i] AND state = 'cancelled') THEN
                    PERFORM ferry_workflow_cancel(ARRAY[o_job[i]], 'workflow', 'workflow: cancelled', true);
                END IF;
            ELSE
                UPDATE ferry_workflow_step SET outcome = NULL, cancel_reason = NULL
                WHERE job_id = o_job[i] AND outcome IS NOT NULL
                RETURNING * INTO st;
                IF FOUND THEN
                    PERFORM ferry_workflow_reopen(st, o_old[i]);
                END IF;
            END IF;
        END LOOP;
        IF jobs IS NOT NULL THEN
            -- TG_TABLE_SCHEMA is a name, whose collation (C) would become the
            -- function's, and its text variables': keys compared in it would miss
            -- their indexes.
            PERFORM ferry_workflow_release(jobs, outs, TG_TABLE_SCHEMA::text COLLATE "default");
        END IF;
    END LOOP;
    PERFORM ferry_workflow_settle_check(w) FROM (SELECT DISTINCT w FROM unnest(wfs) AS w ORDER BY w) AS q;
    RETURN NULL;
END
$$;

-- Only a change between finished and not finished, or from running to
-- waiting again (a retry, a snooze, a rescue), of a workflow's job, calls
-- the row function: every other job's change costs the WHEN test,
-- and each statement one call of the statement function, which returns at
-- once unless the row function ran.
CREATE TRIGGER ferry_workflow_job_update AFTER UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (((OLD.state IN ('completed', 'cancelled', 'discarded')) <> (NEW.state IN ('completed', 'cancelled', 'discarded'))
           OR (OLD.state = 'running' AND NEW.state IN ('available', 'retryable', 'scheduled')))
          AND NEW.metadata ? 'ferry_workflow')
    EXECUTE FUNCTION ferry_workflow_job_ended();
CREATE TRIGGER ferry_workflow_job_delete AFTER DELETE ON river_job
    FOR EACH ROW
    WHEN (OLD.state NOT IN ('completed', 'cancelled', 'discarded') AND OLD.metadata ? 'ferry_workflow')
    EXECUTE FUNCTION ferry_workflow_job_ended();
CREATE TRIGGER ferry_workflow_jobs_update AFTER UPDATE OF state ON river_job
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_workflow_jobs_ended();
CREATE TRIGGER ferry_workflow_jobs_delete AFTER DELETE ON river_job
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_workflow_jobs_ended();
