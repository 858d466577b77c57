-- Back to migration 019's fence: a tagged session without a row passes.
CREATE OR REPLACE FUNCTION ferry_worker_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cid text;
BEGIN
    IF right(current_setting('application_name'), 20) NOT LIKE 'ferry-w:%'
       AND coalesce(current_setting('ferry.client_id', true), '') = '' THEN
        RETURN NULL;
    END IF;
    SELECT client_id INTO cid FROM ferry_worker
    WHERE session_tag = right(current_setting('application_name'), 20);
    IF cid IS NULL THEN
        cid := nullif(current_setting('ferry.client_id', true), '');
    END IF;
    IF cid IS NULL THEN
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
