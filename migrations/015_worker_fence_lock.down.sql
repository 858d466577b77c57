CREATE OR REPLACE FUNCTION ferry_worker_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cid text := current_setting('ferry.client_id', true);
BEGIN
    IF cid IS NOT NULL AND cid <> '' AND EXISTS (
        SELECT 1 FROM ferry_worker WHERE client_id = cid AND dead_at IS NOT NULL
    ) THEN
        RAISE EXCEPTION 'ferry: worker % was declared dead and its running jobs rescued; it may not change jobs', cid
            USING ERRCODE = 'FR001';
    END IF;
    RETURN NULL;
END
$$;
