-- Back to migration 016: the test of the session in the trigger's WHEN.
CREATE OR REPLACE FUNCTION ferry_worker_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cid text;
BEGIN
    SELECT client_id INTO cid FROM ferry_worker
    WHERE session_tag = right(current_setting('application_name'), 20);
    IF cid IS NULL THEN
        cid := nullif(current_setting('ferry.client_id', true), '');
    END IF;
    IF cid IS NULL THEN
        RETURN NULL;
    END IF;
    -- Meet the rescue (migration 015): wait out one in flight, and hold
    -- the next one off until this transaction ends.
    PERFORM pg_advisory_xact_lock_shared(911000004, hashtext(cid));
    IF EXISTS (SELECT 1 FROM ferry_worker WHERE client_id = cid AND dead_at IS NOT NULL) THEN
        RAISE EXCEPTION 'ferry: worker % was declared dead and its running jobs rescued; it may not change jobs', cid
            USING ERRCODE = 'FR001';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER ferry_worker_fence ON river_job;
CREATE TRIGGER ferry_worker_fence BEFORE UPDATE ON river_job
    FOR EACH STATEMENT
    WHEN (right(current_setting('application_name'), 20) LIKE 'ferry-w:%'
          OR coalesce(current_setting('ferry.client_id', true), '') <> '')
    EXECUTE FUNCTION ferry_worker_fence();
