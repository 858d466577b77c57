-- Debounce (package jobs, WithDebounce): inserts with one debounce key
-- collapse into one job. River's unique key makes every insert after the
-- first a duplicate while the key's job has not ended (unique states
-- pending, scheduled, available, running, retryable); the inserter then
-- calls ferry_debounce on the job it found, in the same transaction:
--
-- - a job that has not run yet (scheduled or available, attempt 0) takes
--   the new args and runs window after this insert, or at its first
--   insert (created_at) plus max_wait when that comes first;
-- - a job that has run (running, or waiting to retry) gets one more run
--   after it: the args and due time are kept in its metadata
--   (ferry_debounce_next), and the trigger below inserts that run when
--   the job ends, in the transaction that ends it, on every path (River's
--   completer, a cancel, a rescue that discards it, a delete). Two runs of
--   a key never overlap, and none is lost.

-- The due time of a run whose first insert was at first: win after now,
-- and no later than max_wait after first (a max_wait of 0 is none).
CREATE FUNCTION ferry_debounce_due(first timestamptz, win interval, max_wait interval) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN max_wait > interval '0' THEN least(now() + win, first + max_wait) ELSE now() + win END
$$;

CREATE FUNCTION ferry_debounce(job bigint, new_args jsonb, win interval, max_wait interval) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE river_job j
    SET args = new_args,
        scheduled_at = ferry_debounce_due(j.created_at, win, max_wait),
        state = CASE WHEN ferry_debounce_due(j.created_at, win, max_wait) > now()
                     THEN 'scheduled'::river_job_state ELSE 'available'::river_job_state END
    WHERE j.id = job AND j.state IN ('scheduled', 'available') AND j.attempt = 0;
    IF FOUND THEN
        RETURN 'collapsed';
    END IF;
    UPDATE river_job j
    SET metadata = jsonb_set(j.metadata, '{ferry_debounce_next}', jsonb_build_object(
            'args', new_args,
            'first', coalesce(j.metadata->'ferry_debounce_next'->'first', to_jsonb(now())),
            'due', to_jsonb(ferry_debounce_due(coalesce((j.metadata->'ferry_debounce_next'->>'first')::timestamptz, now()), win, max_wait))))
    WHERE j.id = job AND j.state IN ('running', 'retryable', 'scheduled', 'available');
    IF FOUND THEN
        RETURN 'after';
    END IF;
    -- The job ended between River's unique check and this call (its
    -- transaction committed since): the caller inserts again.
    RETURN 'ended';
END
$$;

-- The run after: inserted when a job with ferry_debounce_next ends, as
-- its key's next job (the same kind, queue, priority, attempts, tags and
-- unique key), created at its first insert, scheduled at its due time (or
-- now, if that has passed), and the workers of its queue woken as an
-- insert wakes them.
CREATE FUNCTION ferry_debounce_next() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    j    river_job := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    nxt  jsonb := j.metadata->'ferry_debounce_next';
    due  timestamptz := greatest((nxt->>'due')::timestamptz, now());
BEGIN
    BEGIN
        INSERT INTO river_job (args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags, unique_key, unique_states)
        VALUES (nxt->'args', (nxt->>'first')::timestamptz, j.kind, j.max_attempts,
                jsonb_build_object('ferry_debounce', j.metadata->'ferry_debounce'),
                j.priority, j.queue, due,
                CASE WHEN due > now() THEN 'scheduled'::river_job_state ELSE 'available'::river_job_state END,
                j.tags, j.unique_key, j.unique_states);
    EXCEPTION WHEN SQLSTATE 'FR002' THEN
        -- A bounded queue that is full refuses the run after, as it
        -- refuses any insert: the job that ended still ends.
        RAISE WARNING 'ferry: debounce: the run after job % does not fit its queue %: %', j.id, j.queue, SQLERRM;
        RETURN NULL;
    END;
    IF due <= now() THEN
        PERFORM pg_notify(TG_TABLE_SCHEMA || '.river_insert', json_build_object('queue', j.queue)::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ferry_debounce_next_update AFTER UPDATE OF state ON river_job
    FOR EACH ROW
    WHEN (NEW.state IN ('completed', 'cancelled', 'discarded') AND OLD.state NOT IN ('completed', 'cancelled', 'discarded')
          AND NEW.metadata ? 'ferry_debounce_next')
    EXECUTE FUNCTION ferry_debounce_next();
CREATE TRIGGER ferry_debounce_next_delete AFTER DELETE ON river_job
    FOR EACH ROW
    WHEN (OLD.state NOT IN ('completed', 'cancelled', 'discarded') AND OLD.metadata ? 'ferry_debounce_next')
    EXECUTE FUNCTION ferry_debounce_next();
