DROP TRIGGER ferry_worker_fence ON river_job;
DROP FUNCTION ferry_worker_fence();
DROP TABLE ferry_worker;
