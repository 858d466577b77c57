DROP TRIGGER ferry_queue_delete ON river_job;
DROP TRIGGER ferry_queue_update ON river_job;
DROP TRIGGER ferry_queue_insert ON river_job;
DROP FUNCTION ferry_queue_count();
DROP FUNCTION ferry_queue_release(text[], bigint[]);
DROP FUNCTION ferry_queue_admit(text[], bigint[]);
DROP FUNCTION ferry_queue_counted(river_job_state);
DROP TABLE ferry_queue_released;
DROP TABLE ferry_queue;
