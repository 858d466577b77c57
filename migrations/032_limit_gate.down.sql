-- Jobs parked behind a gate go back to 'available', where the limiter of
-- migration 024 finds them.
DROP TRIGGER ferry_limit_park_insert ON river_job;
DROP TRIGGER ferry_limit_park_update ON river_job;
DROP TRIGGER ferry_limit_freed ON river_job;
UPDATE river_job SET state = 'available', metadata = metadata - 'ferry_gate'
WHERE state = 'pending' AND metadata ? 'ferry_gate';
DROP FUNCTION ferry_limit_park();
DROP FUNCTION ferry_limit_freed();
DROP FUNCTION ferry_limit_key(jsonb, text);
DROP FUNCTION ferry_limited(text, text);
DROP SEQUENCE ferry_limit_on;
DROP INDEX river_job_ferry_gate_parked;
DROP INDEX river_job_ferry_gate_running;
DROP INDEX ferry_limit_kind;
DROP INDEX ferry_limit_queue;
DROP TABLE ferry_limit_gate_part;
DROP TABLE ferry_limit_gate;
ALTER TABLE ferry_limit DROP COLUMN registered_at;
CREATE OR REPLACE FUNCTION ferry_debounce(job bigint, new_args jsonb, win interval, max_wait interval) RETURNS text
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
