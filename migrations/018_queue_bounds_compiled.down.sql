DROP TRIGGER ferry_queue_compile_truncate ON ferry_queue;
DROP TRIGGER ferry_queue_compile_update ON ferry_queue;
DROP TRIGGER ferry_queue_compile_insert ON ferry_queue;
DROP FUNCTION ferry_queue_compile_trigger();
DROP FUNCTION ferry_queue_compile(text);
DROP FUNCTION ferry_queue_admit_fresh(text, bigint, bigint);

-- Migration 013's INSERT trigger function: the queue's row and its
-- released count read by each statement.
CREATE OR REPLACE FUNCTION ferry_queue_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    d record;
    adm bigint;
BEGIN
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
