-- Limits decided at the fetch (package internal/limit, doc.go "Gates").
-- A job under a limit (a kind's or a queue's in ferry_limit, registered by
-- the workers whose config file names it) never waits in 'available',
-- where River's fetch would take it: when it becomes available (inserted,
-- scheduled, retried, snoozed, rescued, released by its workflow) the
-- trigger below parks it in 'pending', which River never fetches, behind
-- its gate: the set of its limits with its key of each. The workers'
-- fetch (ferry's River pilot) claims parked jobs from a gate only as far
-- as every limit of it has room, so a waiting job is written once when it
-- parks and once when it starts, however long it waits.

-- A gate: a queue and the limits (name and key) its jobs are under. parts
-- is the sorted list of [name, key] pairs; active says it may have jobs
-- parked (set by the park, cleared by a claim that found none).
CREATE TABLE ferry_limit_gate (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    gate text NOT NULL UNIQUE,
    queue text NOT NULL,
    parts jsonb NOT NULL,
    active boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ferry_limit_gate_active ON ferry_limit_gate (queue) WHERE active;

-- The gates each limit and key is part of: a concurrency limit counts the
-- running jobs of all of them.
CREATE TABLE ferry_limit_gate_part (
    limit_name text NOT NULL,
    key text NOT NULL,
    gate_id bigint NOT NULL REFERENCES ferry_limit_gate (id) ON DELETE CASCADE,
    PRIMARY KEY (limit_name, key, gate_id)
);
CREATE INDEX ferry_limit_gate_part_gate ON ferry_limit_gate_part (gate_id);

-- Parked jobs of a gate, in the order River fetches; and the running
-- jobs of a gate, which a concurrency limit counts.
CREATE INDEX river_job_ferry_gate_parked ON river_job (((metadata->>'ferry_gate')::bigint), priority, scheduled_at, id)
    WHERE state = 'pending' AND metadata ? 'ferry_gate';
CREATE INDEX river_job_ferry_gate_running ON river_job (((metadata->>'ferry_gate')::bigint))
    WHERE state = 'running' AND metadata ? 'ferry_gate';

-- When a worker registered the limit after no worker had for ten minutes
-- (or first): for a minute after, the leader's sweep parks the jobs that
-- became available under it before.
ALTER TABLE ferry_limit ADD COLUMN registered_at timestamptz NOT NULL DEFAULT now();

-- Which limits the park reads: a limit some worker marked seen in the
-- last ten minutes (internal/limit's goneAfter).
CREATE INDEX ferry_limit_kind ON ferry_limit (kind) WHERE kind IS NOT NULL;
CREATE INDEX ferry_limit_queue ON ferry_limit (queue) WHERE queue IS NOT NULL;

-- ferry_limit_key is a job's key for a limit keyed by field: a string as
-- it is, any other JSON value as written, '' when the field is missing or
-- null; past 128 characters cut and suffixed with a hash of the whole.
CREATE FUNCTION ferry_limit_key(args jsonb, field text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v jsonb := args -> field;
    k text;
BEGIN
    IF field IS NULL OR v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN '';
    END IF;
    k := CASE WHEN jsonb_typeof(v) = 'string' THEN v #>> '{}' ELSE v::text END;
    IF length(k) > 128 THEN
        k := left(k, 111) || '~' || left(encode(sha256(convert_to(k, 'UTF8')), 'hex'), 16);
    END IF;
    RETURN k;
END
$$;

-- ferry_limit_park: a job becoming available under some limit is parked
-- behind its gate (state 'pending', metadata.ferry_gate the gate's id);
-- one under none is left as it is. A job another path moves to 'pending'
-- (a workflow re-opening a step) loses its gate: it is not parked. (It
-- runs for every job that becomes available: the statements are kept to
-- one read of ferry_limit for a job under no limit, and one more of the
-- gate for a job under some.)
CREATE FUNCTION ferry_limit_park() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    l record;
    g_text text := NEW.queue;
    g_id bigint;
    g_active boolean;
BEGIN
    IF NEW.state = 'pending' THEN
        NEW.metadata := NEW.metadata - 'ferry_gate';
        RETURN NEW;
    END IF;
    FOR l IN SELECT name, key_field FROM ferry_limit
        WHERE (kind = NEW.kind OR queue = NEW.queue) AND seen_at > now() - interval '10 minutes'
        ORDER BY name
    LOOP
        g_text := g_text || E'\n' || l.name || '=' || ferry_limit_key(NEW.args, l.key_field);
    END LOOP;
    IF g_text = NEW.queue THEN
        IF NEW.metadata ? 'ferry_gate' THEN
            NEW.metadata := NEW.metadata - 'ferry_gate';
        END IF;
        RETURN NEW;
    END IF;
    SELECT id, active INTO g_id, g_active FROM ferry_limit_gate WHERE gate = g_text;
    IF g_id IS NULL THEN
        INSERT INTO ferry_limit_gate AS g (gate, queue, parts)
        SELECT g_text, NEW.queue, jsonb_agg(jsonb_build_array(name, ferry_limit_key(NEW.args, key_field)) ORDER BY name)
        FROM ferry_limit
        WHERE (kind = NEW.kind OR queue = NEW.queue) AND seen_at > now() - interval '10 minutes'
        ON CONFLICT (gate) DO UPDATE SET active = true
        RETURNING id INTO g_id;
        INSERT INTO ferry_limit_gate_part (limit_name, key, gate_id)
        SELECT p->>0, p->>1, g_id FROM ferry_limit_gate g, jsonb_array_elements(g.parts) p WHERE g.id = g_id
        ON CONFLICT DO NOTHING;
    ELSIF NOT g_active THEN
        UPDATE ferry_limit_gate SET active = true WHERE id = g_id AND NOT active;
    END IF;
    NEW.state := 'pending';
    NEW.metadata := NEW.metadata || jsonb_build_object('ferry_gate', g_id);
    RETURN NEW;
END
$$;

-- ferry_limit_on is called (its last value not NULL) while some worker
-- enforces a limit (internal/limit: set by a worker's registration,
-- cleared by the leader's sweep once none has for ten minutes): without
-- limits, the park's triggers cost a job's insert a read of one sequence,
-- not a query.
CREATE SEQUENCE ferry_limit_on;
SELECT setval('ferry_limit_on', 1, true) WHERE EXISTS (SELECT 1 FROM ferry_limit WHERE seen_at > now() - interval '10 minutes');

-- ferry_limited says whether a limit applies to jobs of kind k or queue q.
CREATE FUNCTION ferry_limited(k text, q text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM ferry_limit WHERE (kind = k OR queue = q) AND seen_at > now() - interval '10 minutes')
$$;

CREATE TRIGGER ferry_limit_park_insert BEFORE INSERT ON river_job
    FOR EACH ROW WHEN (NEW.state = 'available' AND pg_sequence_last_value('ferry_limit_on'::regclass) IS NOT NULL
        AND ferry_limited(NEW.kind, NEW.queue))
    EXECUTE FUNCTION ferry_limit_park();
CREATE TRIGGER ferry_limit_park_update BEFORE UPDATE OF state ON river_job
    FOR EACH ROW WHEN ((NEW.state = 'available' AND pg_sequence_last_value('ferry_limit_on'::regclass) IS NOT NULL
            AND ferry_limited(NEW.kind, NEW.queue))
        OR (NEW.state = 'pending' AND OLD.state <> 'pending' AND NEW.metadata ? 'ferry_gate'))
    EXECUTE FUNCTION ferry_limit_park();

-- ferry_limit_freed: a gated job that stops running frees its room in a
-- concurrency limit; the workers of its queue are woken as an insert wakes
-- them, so that they claim the next parked job now rather than at their
-- next poll.
CREATE FUNCTION ferry_limit_freed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ferry_limit_gate WHERE id = (OLD.metadata->>'ferry_gate')::bigint AND active) THEN
        PERFORM pg_notify(TG_TABLE_SCHEMA || '.river_insert', json_build_object('queue', NEW.queue)::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER ferry_limit_freed AFTER UPDATE OF state ON river_job
    FOR EACH ROW WHEN (OLD.state = 'running' AND NEW.state <> 'running' AND OLD.metadata ? 'ferry_gate')
    EXECUTE FUNCTION ferry_limit_freed();

-- A debounced job parked behind its gate has not run yet: an insert of its
-- key collapses into it as into one scheduled or available (031).
CREATE OR REPLACE FUNCTION ferry_debounce(job bigint, new_args jsonb, win interval, max_wait interval) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE river_job j
    SET args = new_args,
        scheduled_at = ferry_debounce_due(j.created_at, win, max_wait),
        state = CASE WHEN ferry_debounce_due(j.created_at, win, max_wait) > now()
                     THEN 'scheduled'::river_job_state ELSE 'available'::river_job_state END
    WHERE j.id = job AND j.attempt = 0
      AND (j.state IN ('scheduled', 'available') OR (j.state = 'pending' AND j.metadata ? 'ferry_gate'));
    IF FOUND THEN
        RETURN 'collapsed';
    END IF;
    UPDATE river_job j
    SET metadata = jsonb_set(j.metadata, '{ferry_debounce_next}', jsonb_build_object(
            'args', new_args,
            'first', coalesce(j.metadata->'ferry_debounce_next'->'first', to_jsonb(now())),
            'due', to_jsonb(ferry_debounce_due(coalesce((j.metadata->'ferry_debounce_next'->>'first')::timestamptz, now()), win, max_wait))))
    WHERE j.id = job
      AND (j.state IN ('running', 'retryable', 'scheduled', 'available') OR (j.state = 'pending' AND j.metadata ? 'ferry_gate'));
    IF FOUND THEN
        RETURN 'after';
    END IF;
    -- The job ended between River's unique check and this call (its
    -- transaction committed since): the caller inserts again.
    RETURN 'ended';
END
$$;
