CREATE OR REPLACE FUNCTION ferry_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ferry_outbox', '');
    RETURN NULL;
END;
$$;

DROP FUNCTION ferry_outbox_channel();
DROP FUNCTION ferry_liveness_namespace();
