-- What a bounded queue costs an insert, again (package jobs, "Bounded
-- queues"; migration 018 before).
--
-- plpgsql prepares each expression a function evaluates again in every
-- transaction (ExecInitExpr): with one job per transaction, each IF, each
-- default and each RETURN NULL of the counting triggers cost an insert
-- about 4,800 instructions. Now:
--
--   - RETURN NEW (NULL in a statement trigger) instead of RETURN NULL: a
--     variable is returned without an expression;
--   - a single job's place is taken (nextval) in the query that reads the
--     row, the IF on the bound then asks only whether it was over;
--   - no default for n, set only for several rows.
--
-- Measured in instructions (callgrind, River's insert SQL prepared, a
-- single-user backend, one job per transaction, 1,000 inserts into a
-- bounded queue less 20): 562,800 an insert before, 551,900 after,
-- 471,200 without ferry's triggers: the bound's cost from 91,600 to
-- 80,700. (One query for both the row and whether there is a second,
-- by a subquery or a window count, cost more than the two reads.)

CREATE OR REPLACE FUNCTION ferry_queue_compile(s text) RETURNS void LANGUAGE plpgsql AS $c$
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
-- Written by ferry_queue_compile (migration 026) from ferry_queue: do not edit.
DECLARE
    n bigint;
    qmin text;
    qmax text;
    over boolean;
    i int;
BEGIN
    PERFORM FROM ferry_new OFFSET 1 LIMIT 1;
    IF FOUND THEN
        SELECT count(*), min(queue), max(queue), array_position(%2$L::text[], min(queue))
        INTO n, qmin, qmax, i
        FROM ferry_new WHERE state IN ('available', 'scheduled', 'retryable', 'pending', 'running');
        IF qmin IS DISTINCT FROM qmax THEN
            PERFORM %1$I.ferry_queue_admit(array_agg(queue), array_agg(c)) FROM (
                SELECT queue, count(*) AS c FROM ferry_new
                WHERE %1$I.ferry_queue_counted(state) GROUP BY queue) g;
            RETURN NEW;
        ELSIF i IS NULL THEN
            RETURN NEW;
        END IF;
        IF %1$I.ferry_queue_take((%4$L::oid[])[i]::regclass, n)
           - coalesce(current_setting((%5$L::text[])[i], true)::bigint, 0) > (%3$L::bigint[])[i] THEN
            PERFORM %1$I.ferry_queue_admit_fresh(qmin, n, %6$s);
        END IF;
        RETURN NEW;
    END IF;
    -- One row (each single insert), counted: its place taken in the
    -- query that reads it (the target list runs after the WHERE). A queue
    -- without a bound has no k: nextval(NULL) is NULL, and so is over.
    -- Over the bound by the cached count of the jobs gone: check again.
    SELECT queue, nextval((%4$L::oid[])[s.k]::regclass)
           - coalesce(current_setting((%5$L::text[])[s.k], true)::bigint, 0) > (%3$L::bigint[])[s.k]
    INTO qmin, over
    FROM (SELECT queue, array_position(%2$L::text[], queue) AS k FROM ferry_new
          WHERE state IN ('available', 'scheduled', 'retryable', 'pending', 'running')) s;
    IF over THEN
        PERFORM %1$I.ferry_queue_admit_fresh(qmin, 1, %6$s);
    END IF;
    -- NEW is NULL in a statement trigger: RETURN NEW returns NULL without
    -- an expression, which plpgsql would set up again in every transaction.
    RETURN NEW;
END
$body$$f$, s, b.names, b.maxes, b.admitted, b.caches, txid_current());
END
$c$;

-- The UPDATE and DELETE triggers' function, returning NEW (NULL).
CREATE OR REPLACE FUNCTION ferry_queue_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM FROM ferry_old LIMIT 1;
    IF NOT FOUND THEN
        RETURN NEW;
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
    RETURN NEW;
END
$$;

SELECT ferry_queue_compile(current_schema());
