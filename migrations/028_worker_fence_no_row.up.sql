-- The fence of a dead worker (migrations 006, 015, 016, 019, 025) also
-- refuses a worker's session that no live row vouches for.
--
-- Until now a session tagged as a worker's (application_name ending in its
-- SessionTag, or the ferry.client_id setting of earlier versions) whose
-- tag matched no ferry_worker row was let through: the fence read "no row"
-- as "not a worker". But the rescuer forgets the rows of dead workers a
-- day after their death, so a worker declared dead longer ago than that
-- (a host paused for a weekend, a partition healed on Monday) came back
-- unfenced, and its late completions overwrote the outcome of the attempt
-- that replaced its own. A worker registers its row before any session of
-- it writes river_job, so a tagged session without a row is a dead
-- worker's: refused like one (SQLSTATE FR001).
CREATE OR REPLACE FUNCTION ferry_worker_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    tag text := right(current_setting('application_name'), 20);
    cid text;
BEGIN
    IF tag NOT LIKE 'ferry-w:%'
       AND coalesce(current_setting('ferry.client_id', true), '') = '' THEN
        RETURN NULL;
    END IF;
    SELECT client_id INTO cid FROM ferry_worker WHERE session_tag = tag;
    IF cid IS NULL THEN
        -- A session of an earlier version names its worker in a setting.
        SELECT client_id INTO cid FROM ferry_worker
        WHERE client_id = nullif(current_setting('ferry.client_id', true), '');
    END IF;
    IF cid IS NULL THEN
        RAISE EXCEPTION 'ferry: no live worker has this session''s tag (%): its worker was declared dead and forgotten, or never registered; it may not change jobs', tag
            USING ERRCODE = 'FR001';
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
