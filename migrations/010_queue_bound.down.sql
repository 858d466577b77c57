DROP TRIGGER ferry_queue_delete ON river_job;
DROP TRIGGER ferry_queue_update ON river_job;
DROP TRIGGER ferry_queue_insert ON river_job;
DROP FUNCTION ferry_queue_count();
DROP FUNCTION ferry_queue_release(text[], bigint[]);
DROP FUNCTION ferry_queue_admit(text[], bigint[]);
DROP FUNCTION ferry_queue_length(ferry_queue);
DROP FUNCTION ferry_queue_take(regclass, bigint);
DROP FUNCTION ferry_queue_counted(river_job_state);
DROP TABLE ferry_queue_released;
-- The queues' sequences (ferry_queue.admitted, refunded).
DO $$
DECLARE s regclass;
BEGIN
    FOR s IN SELECT admitted FROM ferry_queue WHERE admitted IS NOT NULL
             UNION ALL SELECT refunded FROM ferry_queue WHERE refunded IS NOT NULL LOOP
        EXECUTE format('DROP SEQUENCE %s', s);
    END LOOP;
END
$$;
DROP TABLE ferry_queue;
