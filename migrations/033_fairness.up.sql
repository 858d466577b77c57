-- Weighted fairness across the keys of a queue (package internal/limit,
-- doc.go "Fairness"; config file section fairness:). A queue's fairness is
-- registered as a row of ferry_limit with fair set and no concurrency or
-- rate: named fair:<queue>, keyed by the field whose values share the
-- queue, it parks every job of the queue behind a gate per key, and the
-- workers' claim serves the gates in proportion to their keys' weights.
-- weights and default_weight are the fairness's, as the workers' config
-- gives them (`enqueue queues` and the console show them).
ALTER TABLE ferry_limit
    ADD COLUMN fair boolean NOT NULL DEFAULT false,
    ADD COLUMN weights jsonb,
    ADD COLUMN default_weight double precision;
ALTER TABLE ferry_limit DROP CONSTRAINT ferry_limit_some;
ALTER TABLE ferry_limit ADD CONSTRAINT ferry_limit_some
    CHECK (concurrency IS NOT NULL OR rate_count IS NOT NULL OR fair);
ALTER TABLE ferry_limit ADD CONSTRAINT ferry_limit_fair_whole
    CHECK (NOT fair OR (queue IS NOT NULL AND key_field IS NOT NULL AND concurrency IS NULL AND rate_count IS NULL));

-- activated orders the gates' activations (a new gate's, or an inactive
-- one's that a job parks in): a worker serving a fair queue keeps its
-- gates in memory and reads only those activated since it last looked.
-- drained_at is when a claim last marked the gate inactive: the leader's
-- sweep looks every second at the gates drained in the last seconds for a
-- job parked while the claim looked (every minute at all of them).
CREATE SEQUENCE ferry_limit_gate_activation;
ALTER TABLE ferry_limit_gate
    ADD COLUMN activated bigint NOT NULL DEFAULT nextval('ferry_limit_gate_activation'),
    ADD COLUMN drained_at timestamptz;
CREATE INDEX ferry_limit_gate_activated ON ferry_limit_gate (queue, activated) WHERE active;
CREATE INDEX ferry_limit_gate_drained ON ferry_limit_gate (drained_at) WHERE NOT active;

-- The jobs claimed from each gate, as each worker adds its own every few
-- seconds: `enqueue queues` and the console show them per key. A table of
-- its own, so that the counts' writes never wait on, or hold up, the
-- gates' rows that parks and claims update.
CREATE TABLE ferry_limit_gate_started (
    gate_id bigint PRIMARY KEY,
    started bigint NOT NULL
);

CREATE FUNCTION ferry_limit_gate_activate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.activated := nextval('ferry_limit_gate_activation');
    RETURN NEW;
END
$$;

CREATE TRIGGER ferry_limit_gate_activate BEFORE UPDATE OF active ON ferry_limit_gate
    FOR EACH ROW WHEN (NEW.active AND NOT OLD.active)
    EXECUTE FUNCTION ferry_limit_gate_activate();

-- ferry_limit_park marks a job parked under some concurrency limit
-- (metadata.ferry_slot): only such a job's end frees a slot that a job
-- parked may be waiting for, so only its end wakes the queue's workers
-- (ferry_limit_freed): a job under a fairness or a rate alone ends
-- without the trigger's call. (Else as in 032.)
CREATE OR REPLACE FUNCTION ferry_limit_park() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    l record;
    g_text text := NEW.queue;
    g_id bigint;
    g_active boolean;
    slot boolean := false;
BEGIN
    IF NEW.state = 'pending' THEN
        NEW.metadata := NEW.metadata - ARRAY['ferry_gate', 'ferry_slot'];
        RETURN NEW;
    END IF;
    FOR l IN SELECT name, key_field, concurrency FROM ferry_limit
        WHERE (kind = NEW.kind OR queue = NEW.queue) AND seen_at > now() - interval '10 minutes'
        ORDER BY name
    LOOP
        g_text := g_text || E'\n' || l.name || '=' || ferry_limit_key(NEW.args, l.key_field);
        slot := slot OR l.concurrency IS NOT NULL;
    END LOOP;
    IF g_text = NEW.queue THEN
        IF NEW.metadata ? 'ferry_gate' THEN
            NEW.metadata := NEW.metadata - ARRAY['ferry_gate', 'ferry_slot'];
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
    IF slot THEN
        NEW.metadata := NEW.metadata || '{"ferry_slot": true}';
    ELSIF NEW.metadata ? 'ferry_slot' THEN
        NEW.metadata := NEW.metadata - 'ferry_slot';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER ferry_limit_freed ON river_job;
CREATE TRIGGER ferry_limit_freed AFTER UPDATE OF state ON river_job
    FOR EACH ROW WHEN (OLD.state = 'running' AND NEW.state <> 'running' AND OLD.metadata ? 'ferry_slot')
    EXECUTE FUNCTION ferry_limit_freed();
