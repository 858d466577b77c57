-- The fence of a dead worker (migration 006) read dead_at without a lock,
-- which left a race: a worker's fetch (an UPDATE of river_job) that had
-- passed the fence before the rescuer stamped dead_at, but committed after
-- the rescuer had looked for the worker's running jobs, left the jobs it
-- took running under a worker declared dead. Nothing rescued them but
-- River's hour-long backstop.
--
-- The fence and the rescue now meet on the transaction advisory lock
-- (911000004, hashtext(client_id)): the fence takes it shared, so a worker's
-- UPDATEs run side by side, and holds it to the end of its transaction; the
-- rescue takes it exclusively before it looks for the jobs (see package
-- internal/liveness). Either the rescue waits for the UPDATE's commit and
-- then sees the jobs it wrote, or the UPDATE waits for the rescue's commit
-- and then reads dead_at, with a fresh snapshot, and is refused. A hash
-- collision between two client ids only makes one wait for the other.
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
