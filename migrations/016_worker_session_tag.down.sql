DROP TRIGGER ferry_worker_fence ON river_job;
CREATE TRIGGER ferry_worker_fence BEFORE UPDATE ON river_job
    FOR EACH STATEMENT
    WHEN (coalesce(current_setting('ferry.client_id', true), '') <> '')
    EXECUTE FUNCTION ferry_worker_fence();

CREATE OR REPLACE FUNCTION ferry_worker_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cid text := current_setting('ferry.client_id', true);
BEGIN
    IF cid IS NULL OR cid = '' THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(911000004, hashtext(cid));
    IF EXISTS (SELECT 1 FROM ferry_worker WHERE client_id = cid AND dead_at IS NOT NULL) THEN
        RAISE EXCEPTION 'ferry: worker % was declared dead and its running jobs rescued; it may not change jobs', cid
            USING ERRCODE = 'FR001';
    END IF;
    RETURN NULL;
END
$$;

DROP INDEX ferry_worker_session_tag;
ALTER TABLE ferry_worker DROP COLUMN session_tag;
