-- The fence of a dead worker (migrations 006, 015) knew a worker's sessions
-- by the session setting ferry.client_id, set when each connection opened.
-- Behind a transaction pooler (PgBouncer's pool_mode = transaction) a
-- client's transactions run on whichever server session the pooler lends
-- it, and a session setting stays with the server session: a live worker's
-- UPDATE could run on a session that last carried a dead worker's id, and
-- be refused, or carry no id at all, and not be fenced.
--
-- A worker's sessions now end their application_name with a tag derived
-- from its client id (package internal/liveness: "ferry-w:" and 12 hex
-- digits), which PgBouncer sets on whatever server session it lends the
-- client; the worker records the tag in ferry_worker.session_tag. The fence
-- finds the worker by it. Sessions that still carry ferry.client_id (a
-- worker of an earlier version, during a rolling deploy) are fenced as
-- before.
ALTER TABLE ferry_worker ADD COLUMN session_tag text;
CREATE INDEX ferry_worker_session_tag ON ferry_worker (session_tag) WHERE session_tag IS NOT NULL;

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
