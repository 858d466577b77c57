-- What the fence of a dead worker (migrations 006, 015, 016) costs every
-- UPDATE statement of river_job, River's inserts included (INSERT … ON
-- CONFLICT DO UPDATE fires the UPDATE statement triggers).
--
-- Migration 013 moved the test of the session into the trigger's WHEN, so
-- that sessions that are not a worker's would not call the function. But
-- Postgres reads a trigger's WHEN from its stored node tree and plans it
-- again for each statement: for this WHEN (2,000 characters of node tree)
-- that cost 78,000 instructions a statement (callgrind, River's insert SQL
-- on a single-user backend, one job per transaction: 740,000 an insert
-- with the fence, 662,000 without). A plpgsql function that tests the
-- session first and returns costs 24,000. The trigger has no WHEN now,
-- and the function tests the session first.
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
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_worker_fence();
