-- What a bounded queue costs an insert (package jobs, "Bounded queues").
--
-- Since migration 013, an insert statement whose counted jobs go to one
-- queue ran one query over its rows joined with the queue's row of
-- ferry_queue and its row of ferry_queue_released. Measured in
-- instructions (callgrind, a single-user backend, River's insert SQL, one
-- job per transaction): 735,000 per insert without ferry's triggers,
-- 144,000 more for that INSERT trigger, of which the two row lookups were
-- about 60,000: every lookup is an executor start, two relations opened
-- and locked, an index descent.
--
-- Now neither is read on the way in:
--
--   - The bounds are compiled into the INSERT trigger's function:
--     ferry_queue_compile writes ferry_queue_count_insert anew, with the
--     bounded queues' names, bounds and sequences as constant arrays,
--     whenever a row of ferry_queue changes (a deferred constraint
--     trigger: at commit, in the committing transaction, so the function
--     and the rows it was made from commit together). A session sees the
--     new function when it next takes a lock on river_job, as it sees any
--     catalog change.
--   - refunded + released ("gone") is cached in the session, in a setting
--     named after the compile (ferry.queue_gone_<xid>_<sequence oid>).
--     Both only grow while the queue's counters run (a restart of the
--     counters changes the queue's row, and so the setting's name), so a
--     cached value is never above the true one: the length it gives is
--     never below the true length. Only when that length is over the bound
--     does the statement read both again (ferry_queue_admit_fresh): it
--     gives back what it took, reads gone, takes again (gone is always
--     read before admitted takes its values), and refuses or goes on, and
--     caches what it read. Far from its bound, a single job's insert
--     costs two LIMIT 1 reads of the inserted rows and one nextval; at its
--     bound, what it cost before, and a refund.
--
-- Measured the same way: the INSERT trigger now costs 78,000 instructions
-- an insert, against 144,000, with one bounded queue or thirty.
--
-- A session in REPEATABLE READ or SERIALIZABLE reads gone in its
-- transaction's snapshot: it uses the value, but does not cache it.
-- Changing ferry_queue in such a transaction is refused: the compile must
-- read the rows as committed.

-- ferry_queue_admit_fresh is the slow path of a bounded queue's insert:
-- the statement took n values from the queue's admitted sequence with a
-- cached, older gone that put the queue over its bound. epoch names the
-- compile whose function called it (the cache's setting is
-- ferry.queue_gone_<epoch>_<admitted oid>). A queue no longer bounded has
-- nothing to check.
CREATE FUNCTION ferry_queue_admit_fresh(q text, n bigint, epoch bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    f record;
    gone bigint;
    adm bigint;
BEGIN
    SELECT max_length, admitted, refunded INTO f FROM ferry_queue
    WHERE name = q AND max_length IS NOT NULL AND admitted IS NOT NULL AND refunded IS NOT NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM ferry_queue_take(f.refunded, n);
    gone := coalesce(pg_sequence_last_value(f.refunded), 0)
          + coalesce((SELECT r.released FROM ferry_queue_released r WHERE r.name = q), 0);
    adm := ferry_queue_take(f.admitted, n);
    IF adm - gone > f.max_length THEN
        PERFORM ferry_queue_refuse(q, adm - gone, f.max_length, n, ARRAY[f.refunded], ARRAY[n]);
    END IF;
    IF current_setting('transaction_isolation') = 'read committed' THEN
        PERFORM set_config(format('ferry.queue_gone_%s_%s', epoch, f.admitted::oid), gone::text, false);
    END IF;
END
$$;

-- ferry_queue_compile writes schema s's ferry_queue_count_insert from its
-- ferry_queue. Calls are serialised by SHARE UPDATE EXCLUSIVE on
-- ferry_queue (which writers of its rows, ROW EXCLUSIVE, do not wait for);
-- the lock also brings the session's catalog up to date, so a compile
-- that waited for another replaces the function that one made.
CREATE FUNCTION ferry_queue_compile(s text) RETURNS void LANGUAGE plpgsql AS $c$
DECLARE
    b record;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'ferry: queue bounds change only in a READ COMMITTED transaction (this one is %)',
            current_setting('transaction_isolation') USING ERRCODE = '25000';
    END IF;
    EXECUTE format('LOCK TABLE %I.ferry_queue IN SHARE UPDATE EXCLUSIVE MODE', s);
    -- The bounded queues as constant arrays, a queue's element found by
    -- array_position: the same cost with one bounded queue or thirty.
    -- (plpgsql sets each expression up again in each transaction: a
    -- branch per queue, or an arm per queue of one CASE, cost an insert
    -- 2,500 or 11,000 instructions per queue, callgrind.)
    EXECUTE format($q$
        SELECT coalesce(array_agg(name ORDER BY name), '{}') AS names,
               coalesce(array_agg(max_length ORDER BY name), '{}') AS maxes,
               coalesce(array_agg(admitted::oid ORDER BY name), '{}') AS admitted,
               coalesce(array_agg(format('ferry.queue_gone_%%s_%%s', txid_current(), admitted::oid) ORDER BY name), '{}') AS caches
        FROM %I.ferry_queue
        WHERE max_length IS NOT NULL AND admitted IS NOT NULL AND refunded IS NOT NULL$q$, s)
    INTO b;
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.ferry_queue_count_insert() RETURNS trigger LANGUAGE plpgsql AS $body$
-- Written by ferry_queue_compile (migration 018) from ferry_queue: do not edit.
DECLARE
    n bigint := 1;
    qmin text;
    qmax text;
    counted boolean;
    i int;
BEGIN
    -- One row (each single insert): read without an aggregate, whose
    -- executor start costs more than the rest of this function.
    SELECT queue, state IN ('available', 'scheduled', 'retryable', 'pending', 'running'),
           array_position(%2$L::text[], queue)
    INTO qmin, counted, i FROM ferry_new LIMIT 1;
    PERFORM FROM ferry_new OFFSET 1 LIMIT 1;
    IF FOUND THEN
        SELECT count(*), min(queue), max(queue), array_position(%2$L::text[], min(queue))
        INTO n, qmin, qmax, i
        FROM ferry_new WHERE state IN ('available', 'scheduled', 'retryable', 'pending', 'running');
        IF qmin IS DISTINCT FROM qmax THEN
            PERFORM %1$I.ferry_queue_admit(array_agg(queue), array_agg(c)) FROM (
                SELECT queue, count(*) AS c FROM ferry_new
                WHERE %1$I.ferry_queue_counted(state) GROUP BY queue) g;
            RETURN NULL;
        ELSIF i IS NULL THEN
            RETURN NULL;
        END IF;
    ELSIF NOT counted THEN
        RETURN NULL;
    END IF;
    -- i is NULL for a single job into a queue without a bound: nextval(NULL)
    -- is NULL, and so is the comparison. Over the bound by the cached count of the jobs
    -- gone: check again.
    IF (CASE WHEN n = 1 THEN nextval((%4$L::oid[])[i]::regclass)
             ELSE %1$I.ferry_queue_take((%4$L::oid[])[i]::regclass, n) END)
       - coalesce(current_setting((%5$L::text[])[i], true)::bigint, 0) > (%3$L::bigint[])[i] THEN
        PERFORM %1$I.ferry_queue_admit_fresh(qmin, n, %6$s);
    END IF;
    RETURN NULL;
END
$body$$f$, s, b.names, b.maxes, b.admitted, b.caches, txid_current());
END
$c$;

CREATE FUNCTION ferry_queue_compile_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ferry_queue_compile(TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;

-- Updates that change a bound, a queue's counters or its name compile
-- (a worker's start rewrites workers and updated_at: no compile). A
-- restart of a queue's counters always changes max_length (from NULL).
CREATE CONSTRAINT TRIGGER ferry_queue_compile_insert AFTER INSERT OR DELETE ON ferry_queue
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ferry_queue_compile_trigger();
CREATE CONSTRAINT TRIGGER ferry_queue_compile_update AFTER UPDATE ON ferry_queue
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.max_length IS DISTINCT FROM NEW.max_length
          OR OLD.admitted IS DISTINCT FROM NEW.admitted
          OR OLD.refunded IS DISTINCT FROM NEW.refunded
          OR OLD.name <> NEW.name)
    EXECUTE FUNCTION ferry_queue_compile_trigger();
CREATE TRIGGER ferry_queue_compile_truncate AFTER TRUNCATE ON ferry_queue
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_queue_compile_trigger();

SELECT ferry_queue_compile(current_schema());

-- The UPDATE and DELETE triggers' function: a statement that changed no
-- row (River's inserts fire the UPDATE trigger too, for their ON CONFLICT
-- clause) returns after one LIMIT 1 read of the transition table, cheaper
-- than EXISTS.
CREATE OR REPLACE FUNCTION ferry_queue_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM FROM ferry_old LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        PERFORM ferry_queue_release(array_agg(queue), array_agg(n)) FROM (
            SELECT queue, count(*) AS n FROM ferry_old
            WHERE ferry_queue_counted(state) GROUP BY queue) g;
    ELSE
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
