-- Back to migration 019: the fence fires for every UPDATE statement of
-- river_job, River's inserts' ON CONFLICT … DO UPDATE included.
DROP TRIGGER ferry_worker_fence ON river_job;
CREATE TRIGGER ferry_worker_fence BEFORE UPDATE ON river_job
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_worker_fence();
