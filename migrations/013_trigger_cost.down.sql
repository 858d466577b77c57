DROP TRIGGER ferry_worker_fence ON river_job;
CREATE TRIGGER ferry_worker_fence BEFORE UPDATE ON river_job
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_worker_fence();

-- Back to migration 010: the triggers always on river_job, the function
-- that returns at once while no queue has a bound.
SELECT ferry_queue_arm();
DROP TRIGGER ferry_queue_insert ON river_job;
CREATE TRIGGER ferry_queue_insert AFTER INSERT ON river_job
    REFERENCING NEW TABLE AS ferry_new
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_queue_count();
DROP FUNCTION ferry_queue_count_insert();
DROP FUNCTION ferry_queue_disarm();
DROP FUNCTION ferry_queue_arm();
DROP FUNCTION ferry_queue_armed();

CREATE OR REPLACE FUNCTION ferry_queue_count() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION ferry_queue_admit(names text[], ns bigint[]) RETURNS void LANGUAGE plpgsql AS $$
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

DROP FUNCTION ferry_queue_refuse(text, bigint, bigint, bigint, regclass[], bigint[]);
