-- Back to migration 018's compile and counting functions.
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

SELECT ferry_queue_compile(current_schema());
