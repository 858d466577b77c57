-- What ferry's triggers on river_job cost an insert.
--
-- Bounded queues (package jobs, "Bounded queues"). The triggers of
-- migration 010 cost every statement that writes river_job, bounds or not:
-- a deployment without bounds paid for them on each insert. From this
-- version they exist only while a queue has a bound: ferry_queue_arm makes
-- them, in the transaction that bounds a queue (the counters of that queue
-- start in it too), and ferry_queue_disarm drops them once no queue has a
-- bound (the leader's recount calls it). A deployment that never sets a
-- bound runs no trigger of ferry's on insert.
--
-- An insert statement whose counted jobs all go to one queue (each insert of
-- one job, each chunk of a bulk insert) now costs one query over its rows,
-- the queue's row and its released count together, and one nextval; only a
-- statement that spans several queues takes the general path of
-- ferry_queue_admit.

-- ferry_queue_refuse raises the error of an insert over its queue's bound,
-- after refunding what the statement admitted (refunds[i] values from
-- sequence seqs[i]).
CREATE FUNCTION ferry_queue_refuse(q text, len bigint, max_length bigint, n bigint,
                                   seqs regclass[], refunds bigint[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ferry_queue_take(t.seq, t.n) FROM unnest(seqs, refunds) AS t(seq, n);
    RAISE EXCEPTION 'ferry: queue full: queue % holds % of at most % jobs; % more do not fit',
        q, len - n, max_length, n
        USING ERRCODE = 'FR002',
              DETAIL = json_build_object('queue', q, 'max_length', max_length,
                  'length', len - n, 'adding', n)::text;
END
$$;

CREATE OR REPLACE FUNCTION ferry_queue_admit(names text[], ns bigint[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    q record;
    adm bigint;
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
        IF adm - q.gone > q.max_length THEN
            PERFORM ferry_queue_refuse(q.name, adm - q.gone, q.max_length, q.n, took, tookn);
        END IF;
    END LOOP;
END
$$;

-- ferry_queue_count is now the UPDATE and DELETE triggers' function; the
-- INSERT trigger has ferry_queue_count_insert, below.
CREATE OR REPLACE FUNCTION ferry_queue_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM ferry_queue_release(array_agg(queue), array_agg(n)) FROM (
            SELECT queue, count(*) AS n FROM ferry_old
            WHERE ferry_queue_counted(state) GROUP BY queue) g;
    ELSIF EXISTS (SELECT 1 FROM ferry_new) THEN
        -- An UPDATE of no row returns here: River's inserts (INSERT … ON
        -- CONFLICT DO UPDATE) fire this trigger for UPDATE too.
        -- Releases first: a move within one statement frees its places
        -- before it takes new ones.
        PERFORM ferry_queue_release(array_agg(queue), array_agg(n)) FROM (
            SELECT o.queue, count(*) AS n FROM ferry_old o JOIN ferry_new n USING (id)
            WHERE ferry_queue_counted(o.state) AND (NOT ferry_queue_counted(n.state) OR n.queue <> o.queue)
            GROUP BY o.queue) g;
        PERFORM ferry_queue_admit(array_agg(queue), array_agg(n)) FROM (
            SELECT n.queue, count(*) AS n FROM ferry_old o JOIN ferry_new n USING (id)
            WHERE ferry_queue_counted(n.state) AND (NOT ferry_queue_counted(o.state) OR n.queue <> o.queue)
            GROUP BY n.queue) g;
    END IF;
    RETURN NULL;
END
$$;

-- ferry_queue_count_insert is the INSERT trigger's function, apart from
-- ferry_queue_count and small, since plpgsql sets up every variable and
-- statement of a function at each call (the general function, returning
-- at once, cost inserts about 2 % more than a function of one statement).
-- A statement whose counted jobs go to several queues takes the general
-- path of ferry_queue_admit.
CREATE FUNCTION ferry_queue_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    d record;
    adm bigint;
BEGIN
    -- refunded and released are read (in this query) before admitted
    -- takes its values, as in ferry_queue_admit.
    SELECT c.n, c.qmin, c.qmax, f.max_length, f.admitted, f.refunded,
           coalesce(pg_sequence_last_value(f.refunded), 0) + coalesce(r.released, 0) AS gone
    INTO d
    FROM (SELECT min(queue) AS qmin, max(queue) AS qmax, count(*) AS n
          FROM ferry_new WHERE ferry_queue_counted(state)) c
    LEFT JOIN ferry_queue f ON f.name = c.qmin AND c.qmin = c.qmax
    LEFT JOIN ferry_queue_released r ON r.name = f.name;
    IF d.n = 0 OR (d.qmin = d.qmax AND (d.max_length IS NULL OR d.admitted IS NULL)) THEN
        RETURN NULL;
    ELSIF d.qmin <> d.qmax THEN
        PERFORM ferry_queue_admit(array_agg(queue), array_agg(n)) FROM (
            SELECT queue, count(*) AS n FROM ferry_new
            WHERE ferry_queue_counted(state) GROUP BY queue) g;
    ELSE
        IF d.n = 1 THEN
            adm := nextval(d.admitted);
        ELSE
            adm := ferry_queue_take(d.admitted, d.n);
        END IF;
        IF adm - d.gone > d.max_length THEN
            PERFORM ferry_queue_refuse(d.qmin, adm - d.gone, d.max_length, d.n, ARRAY[d.refunded], ARRAY[d.n]);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- ferry_queue_armed says whether the counting triggers are on river_job.
CREATE FUNCTION ferry_queue_armed() RETURNS boolean LANGUAGE sql STABLE
    RETURN EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgrelid = 'river_job'::regclass AND tgname = 'ferry_queue_insert');

-- ferry_queue_arm puts the counting triggers on river_job, if they are not
-- there, and says whether it did. The caller holds a lock on river_job
-- that keeps writers out (SHARE ROW EXCLUSIVE: CREATE TRIGGER's own), and
-- starts or recounts the bounded queues' counters in the same transaction:
-- no trigger counted while there were none.
CREATE FUNCTION ferry_queue_arm() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF ferry_queue_armed() THEN
        RETURN false;
    END IF;
    CREATE TRIGGER ferry_queue_insert AFTER INSERT ON river_job
        REFERENCING NEW TABLE AS ferry_new
        FOR EACH STATEMENT EXECUTE FUNCTION ferry_queue_count_insert();
    CREATE TRIGGER ferry_queue_update AFTER UPDATE ON river_job
        REFERENCING OLD TABLE AS ferry_old NEW TABLE AS ferry_new
        FOR EACH STATEMENT EXECUTE FUNCTION ferry_queue_count();
    CREATE TRIGGER ferry_queue_delete AFTER DELETE ON river_job
        REFERENCING OLD TABLE AS ferry_old
        FOR EACH STATEMENT EXECUTE FUNCTION ferry_queue_count();
    RETURN true;
END
$$;

-- ferry_queue_disarm drops the counting triggers when no queue has a
-- bound, and says whether it did. It takes ACCESS EXCLUSIVE on river_job
-- (DROP TRIGGER's lock) only when there is something to drop; a caller
-- sets lock_timeout, since every reader of river_job queues behind that
-- lock while it waits. Bounding a queue takes SHARE ROW EXCLUSIVE, so no
-- bound is set between the check and the drop.
CREATE FUNCTION ferry_queue_disarm() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ferry_queue_armed() OR EXISTS (SELECT 1 FROM ferry_queue WHERE max_length IS NOT NULL) THEN
        RETURN false;
    END IF;
    LOCK TABLE river_job IN ACCESS EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM ferry_queue WHERE max_length IS NOT NULL) THEN
        RETURN false;
    END IF;
    DROP TRIGGER ferry_queue_insert ON river_job;
    DROP TRIGGER ferry_queue_update ON river_job;
    DROP TRIGGER ferry_queue_delete ON river_job;
    RETURN true;
END
$$;

SELECT ferry_queue_disarm();

-- Still armed (a queue has a bound): the INSERT trigger calls the new
-- function.
DO $$
BEGIN
    IF ferry_queue_armed() THEN
        DROP TRIGGER ferry_queue_insert ON river_job;
        CREATE TRIGGER ferry_queue_insert AFTER INSERT ON river_job
            REFERENCING NEW TABLE AS ferry_new
            FOR EACH STATEMENT EXECUTE FUNCTION ferry_queue_count_insert();
    END IF;
END
$$;

-- The fence of a dead worker (migration 006) was a plpgsql call on every
-- UPDATE statement of river_job, River's inserts included (INSERT … ON
-- CONFLICT DO UPDATE fires UPDATE's statement triggers). The test of the
-- session is now the trigger's WHEN: sessions without ferry.client_id
-- (inserting services, the CLI) no longer call the function at all.
DROP TRIGGER ferry_worker_fence ON river_job;
CREATE TRIGGER ferry_worker_fence BEFORE UPDATE ON river_job
    FOR EACH STATEMENT
    WHEN (coalesce(current_setting('ferry.client_id', true), '') <> '')
    EXECUTE FUNCTION ferry_worker_fence();
