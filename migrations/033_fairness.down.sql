DROP TRIGGER ferry_limit_freed ON river_job;
CREATE TRIGGER ferry_limit_freed AFTER UPDATE OF state ON river_job
    FOR EACH ROW WHEN (OLD.state = 'running' AND NEW.state <> 'running' AND OLD.metadata ? 'ferry_gate')
    EXECUTE FUNCTION ferry_limit_freed();
CREATE OR REPLACE FUNCTION ferry_limit_park() RETURNS trigger
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
UPDATE river_job SET metadata = metadata - 'ferry_slot' WHERE metadata ? 'ferry_slot';
DROP TRIGGER ferry_limit_gate_activate ON ferry_limit_gate;
DROP FUNCTION ferry_limit_gate_activate();
DROP TABLE ferry_limit_gate_started;
DROP INDEX ferry_limit_gate_activated;
DROP INDEX ferry_limit_gate_drained;
ALTER TABLE ferry_limit_gate DROP COLUMN activated, DROP COLUMN drained_at;
DROP SEQUENCE ferry_limit_gate_activation;
-- Jobs parked behind a fairness only go back to 'available' (they park
-- again behind the limits left, if any, as the sweep frees them).
UPDATE river_job j SET state = 'available', metadata = j.metadata - 'ferry_gate'
WHERE j.state = 'pending' AND j.metadata ? 'ferry_gate'
  AND EXISTS (SELECT 1 FROM ferry_limit_gate_part gp JOIN ferry_limit l ON l.name = gp.limit_name
              WHERE gp.gate_id = (j.metadata->>'ferry_gate')::bigint AND l.fair);
DELETE FROM ferry_limit WHERE fair;
ALTER TABLE ferry_limit DROP CONSTRAINT ferry_limit_fair_whole;
ALTER TABLE ferry_limit DROP CONSTRAINT ferry_limit_some;
ALTER TABLE ferry_limit ADD CONSTRAINT ferry_limit_some CHECK (concurrency IS NOT NULL OR rate_count IS NOT NULL);
ALTER TABLE ferry_limit DROP COLUMN fair, DROP COLUMN weights, DROP COLUMN default_weight;
