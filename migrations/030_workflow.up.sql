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
-- (outcome); ferry_workflow_dep one row per edge, satisfied once the
-- dependency's end counts towards the step's release.
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
    -- when its last dependency released it
    ready_at           timestamptz,
    PRIMARY KEY (workflow_id, name)
);
CREATE UNIQUE INDEX ferry_workflow_step_job ON ferry_workflow_step (job_id);
CREATE INDEX ferry_workflow_step_open ON ferry_workflow_step (workflow_id) WHERE outcome IS NULL;
CREATE INDEX ferry_workflow_step_fanin ON ferry_workflow_step (workflow_id, after_added_by) WHERE after_added_by IS NOT NULL;

CREATE TABLE ferry_workflow_dep (
    workflow_id text NOT NULL,
    depends_on  text NOT NULL,
    step        text NOT NULL,
    satisfied   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (workflow_id, depends_on, step),
    CHECK (depends_on <> step)
);
CREATE INDEX ferry_workflow_dep_step ON ferry_workflow_dep (workflow_id, step);

-- ready: the steps' jobs leave `pending` (for `scheduled` when one was
-- inserted to run later), stamped with the moment (metadata
-- ferry_ready_at, for the start-delay histogram), and the workers of
-- their queues are woken as an insert wakes them.
CREATE FUNCTION ferry_workflow_ready(jobs bigint[], tschema text) RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off SET enable_seqscan = off SET plan_cache_mode = force_custom_plan
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
    ), s AS (
        UPDATE ferry_workflow_step s SET ready_at = t FROM r WHERE s.job_id = r.id
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
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off SET enable_seqscan = off SET plan_cache_mode = force_custom_plan
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
    UPDATE ferry_workflow_step s SET cancel_reason = reason FROM c WHERE s.job_id = c.id;
END
$$;

-- release: the steps of jobs that ended, with their outcomes (completed,
-- cancelled, discarded, deleted), all those of one statement at once. A
-- step's own row and the edges from it are its own; the edges its end
-- satisfies (all of them for a completion; for a failure, those of steps
-- that run anyway or run on a failure) are marked; then the open
-- dependents, locked in the order of their job ids (so that two
-- statements never wait for each other in a circle), count that many
-- fewer to wait for, and those that reach none are made ready. A failure
-- cancels every step downstream that waits for it to complete, in one
-- statement: a chain of any length is cancelled without recursion (the
-- cancelled steps' own release finds their dependents cancelled already).
CREATE FUNCTION ferry_workflow_release(jobs bigint[], outcomes text[], tschema text) RETURNS void
LANGUAGE plpgsql
-- Each statement goes from the rows it names to their neighbours by
-- their keys' indexes, never by scanning the open steps or the pending
-- jobs of every workflow, which the planner picks for tables it has no
-- statistics of yet: no hash or merge join nor scan of a whole table, plans made for the arrays at
-- hand, and conditions on a step's outcome or a job's state that the
-- partial indexes of open steps and of River's fetch do not match.
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off SET enable_seqscan = off SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    e_wf     text[];
    e_name   text[];
    e_out    text[];
    a_wf     text[];
    a_step   text[];
    a_n      integer[];
    a_failed boolean[];
    d        record;
    doomed   bigint[];
    cause    text;
    unneeded bigint[];
    ready    bigint[];
BEGIN
    WITH f AS (SELECT * FROM unnest(jobs, outcomes) AS f(job_id, outcome)),
    u AS (
        UPDATE ferry_workflow_step s SET outcome = f.outcome FROM f
        WHERE s.job_id = f.job_id AND coalesce(s.outcome, '') = ''
        RETURNING s.workflow_id, s.name, f.outcome
    )
    SELECT array_agg(workflow_id), array_agg(name), array_agg(outcome) INTO e_wf, e_name, e_out FROM u;
    IF e_wf IS NULL THEN
        RETURN;
    END IF;

    WITH e AS (SELECT * FROM unnest(e_wf, e_name, e_out) AS e(workflow_id, name, outcome)),
    sat AS (
        UPDATE ferry_workflow_dep dep SET satisfied = true
        FROM e, ferry_workflow_step t
        WHERE dep.workflow_id = e.workflow_id AND dep.depends_on = e.name AND NOT dep.satisfied
          AND t.workflow_id = dep.workflow_id AND t.name = dep.step
          AND (e.outcome = 'completed' OR t.ignore_failed_deps OR t.mode = 'any_failed')
        RETURNING dep.workflow_id, dep.step, e.outcome <> 'completed' AS failed
    ),
    agg AS (SELECT workflow_id, step, count(*)::integer AS n, bool_or(failed) AS failed FROM sat GROUP BY 1, 2)
    SELECT array_agg(workflow_id), array_agg(step), array_agg(n), array_agg(failed)
    INTO a_wf, a_step, a_n, a_failed FROM agg;

    IF a_wf IS NOT NULL THEN
        PERFORM 1 FROM ferry_workflow_step s
        JOIN unnest(a_wf, a_step) AS a(workflow_id, step) ON s.workflow_id = a.workflow_id AND s.name = a.step
        WHERE coalesce(s.outcome, '') = ''
        ORDER BY s.job_id
        FOR NO KEY UPDATE OF s;
        FOR d IN
            WITH a AS (SELECT * FROM unnest(a_wf, a_step, a_n, a_failed) AS a(workflow_id, step, n, failed)),
            u AS (
                UPDATE ferry_workflow_step s SET waiting = s.waiting - a.n FROM a
                WHERE s.workflow_id = a.workflow_id AND s.name = a.step AND coalesce(s.outcome, '') = ''
                RETURNING s.workflow_id, s.name, s.job_id, s.mode, s.waiting, a.failed
            )
            SELECT u.*, w.state = 'running' AS running
            FROM u JOIN ferry_workflow w ON w.id = u.workflow_id
            ORDER BY u.job_id
        LOOP
            CONTINUE WHEN NOT d.running;
            IF d.mode = 'any_failed' THEN
                IF d.failed THEN
                    ready := ready || d.job_id;
                ELSIF d.waiting = 0 THEN
                    unneeded := unneeded || d.job_id;
                END IF;
            ELSIF d.waiting = 0 THEN
                ready := ready || d.job_id;
            END IF;
        END LOOP;
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
    WITH RECURSIVE down(workflow_id, name, job_id, why) AS (
        SELECT t.workflow_id, t.name, t.job_id, format('dependency %s ended %s', e.name, e.outcome)
        FROM unnest(e_wf, e_name, e_out) AS e(workflow_id, name, outcome)
        JOIN ferry_workflow_dep dep ON dep.workflow_id = e.workflow_id AND dep.depends_on = e.name
        JOIN ferry_workflow_step t ON t.workflow_id = dep.workflow_id AND t.name = dep.step
        WHERE e.outcome <> 'completed' AND coalesce(t.outcome, '') = '' AND t.mode = 'all' AND NOT t.ignore_failed_deps
      UNION
        SELECT t.workflow_id, t.name, t.job_id, down.why
        FROM down
        JOIN ferry_workflow_dep dep ON dep.workflow_id = down.workflow_id AND dep.depends_on = down.name
        JOIN ferry_workflow_step t ON t.workflow_id = dep.workflow_id AND t.name = dep.step
        WHERE coalesce(t.outcome, '') = '' AND t.mode = 'all' AND NOT t.ignore_failed_deps
    )
    SELECT array_agg(DISTINCT down.job_id), min(down.why) INTO doomed, cause FROM down;
    IF doomed IS NOT NULL THEN
        PERFORM ferry_workflow_cancel(doomed, 'dependency', 'workflow: not run: ' || cause, false);
    END IF;
END
$$;

-- reopen: st's job runs again (a retry). The workflow runs again; the
-- steps that were cancelled because st failed (and those cancelled
-- because they were) wait again; the edges from all of these to steps
-- that have not started count again; and those steps' counts are taken
-- afresh from their edges.
CREATE FUNCTION ferry_workflow_reopen(st ferry_workflow_step, was text) RETURNS void
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off SET enable_seqscan = off SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    reopened text[] := ARRAY[st.name];
    jobs     bigint[];
BEGIN
    UPDATE ferry_workflow SET state = 'running', finished_at = NULL, cancelled_at = NULL
    WHERE id = st.workflow_id AND state <> 'running';
    IF was <> 'completed' THEN
        WITH RECURSIVE down(name, job_id) AS (
            SELECT s.name, s.job_id
            FROM ferry_workflow_dep e
            JOIN ferry_workflow_step s ON s.workflow_id = e.workflow_id AND s.name = e.step
            WHERE e.workflow_id = st.workflow_id AND e.depends_on = st.name
              AND s.outcome = 'cancelled' AND s.cancel_reason = 'dependency'
          UNION
            SELECT s.name, s.job_id
            FROM down
            JOIN ferry_workflow_dep e ON e.workflow_id = st.workflow_id AND e.depends_on = down.name
            JOIN ferry_workflow_step s ON s.workflow_id = e.workflow_id AND s.name = e.step
            WHERE s.outcome = 'cancelled' AND s.cancel_reason = 'dependency'
        )
        SELECT array_agg(job_id ORDER BY job_id), array_agg(name) INTO jobs, reopened FROM down;
        IF jobs IS NOT NULL THEN
            PERFORM 1 FROM ferry_workflow_step WHERE job_id = ANY (jobs) ORDER BY job_id FOR NO KEY UPDATE;
            UPDATE ferry_workflow_step SET outcome = NULL, cancel_reason = NULL, ready_at = NULL
            WHERE job_id = ANY (jobs);
            UPDATE river_job SET state = 'pending', finalized_at = NULL
            WHERE id = ANY (jobs) AND state = 'cancelled';
        END IF;
        reopened := coalesce(reopened, '{}') || st.name;
    END IF;
    -- Edges from the reopened steps to steps that have not started.
    UPDATE ferry_workflow_dep e SET satisfied = false
    FROM ferry_workflow_step s JOIN river_job j ON j.id = s.job_id
    WHERE e.workflow_id = st.workflow_id AND e.depends_on = ANY (reopened) AND e.satisfied
      AND s.workflow_id = e.workflow_id AND s.name = e.step AND j.state = 'pending';
    UPDATE ferry_workflow_step s
    SET waiting = (SELECT count(*) FROM ferry_workflow_dep e
                   WHERE e.workflow_id = s.workflow_id AND e.step = s.name AND NOT e.satisfied)
    WHERE s.workflow_id = st.workflow_id AND coalesce(s.outcome, '') = ''
      AND (s.name = ANY (reopened)
           OR s.name IN (SELECT e.step FROM ferry_workflow_dep e
                         WHERE e.workflow_id = st.workflow_id AND e.depends_on = ANY (reopened)));
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
    r      record;
    jobs   bigint[];
    outs   text[];
    st     ferry_workflow_step;
    wfs    text[];
BEGIN
    IF coalesce(current_setting('ferry.workflow_ended', true), '') <> 'y' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('ferry.workflow_ended', '', true);
    LOOP
        jobs := NULL;
        outs := NULL;
        FOR r IN
            WITH gone AS (DELETE FROM ferry_workflow_ended RETURNING *)
            SELECT * FROM gone ORDER BY workflow, job_id
        LOOP
            PERFORM pg_advisory_xact_lock_shared(911000006, hashtext(r.workflow));
            IF wfs IS NULL OR wfs[array_upper(wfs, 1)] <> r.workflow THEN
                wfs := wfs || r.workflow;
            END IF;
            IF r.state IN ('completed', 'cancelled', 'discarded', 'deleted') THEN
                jobs := jobs || r.job_id;
                outs := outs || r.state;
            ELSIF r.old_state = 'running' THEN
                -- A step that was running when its workflow was cancelled
                -- (and did not hear of it, or failed anyway) does not run
                -- again: its retry or snooze ends here.
                IF EXISTS (SELECT 1 FROM ferry_workflow WHERE id = r.workflow AND state = 'cancelled') THEN
                    PERFORM ferry_workflow_cancel(ARRAY[r.job_id], 'workflow', 'workflow: cancelled', true);
                END IF;
            ELSE
                UPDATE ferry_workflow_step SET outcome = NULL, cancel_reason = NULL, ready_at = NULL
                WHERE job_id = r.job_id AND outcome IS NOT NULL
                RETURNING * INTO st;
                IF FOUND THEN
                    PERFORM ferry_workflow_reopen(st, r.old_state);
                END IF;
            END IF;
        END LOOP;
        EXIT WHEN jobs IS NULL;
        -- TG_TABLE_SCHEMA is a name, whose collation (C) would become the
        -- function's, and its text variables': keys compared in it would miss
        -- their indexes.
        PERFORM ferry_workflow_release(jobs, outs, TG_TABLE_SCHEMA::text COLLATE "default");
    END LOOP;
    PERFORM ferry_workflow_settle_check(w) FROM unnest(wfs) AS w;
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
