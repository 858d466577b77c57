-- Back to migration 014: the test in the trigger's WHEN.
CREATE OR REPLACE FUNCTION ferry_seal_claim() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    run text := ferry_seal_run_id(NEW.metadata);
    due timestamptz := coalesce(ferry_seal_due(NEW.metadata), now());
    c record;
BEGIN
    IF run IS NULL THEN
        -- Not a seal a worker accepts (it refuses the job as invalid).
        NEW.metadata := NEW.metadata - 'ferry_seal_claim';
        RETURN NEW;
    END IF;
    INSERT INTO ferry_seal_run AS s (run_id, job_id, due) VALUES (run, NEW.id, due)
    ON CONFLICT (run_id) DO UPDATE SET run_id = s.run_id
    RETURNING s.job_id, s.claimed_at, s.gone INTO c;
    IF c.job_id <> NEW.id OR c.gone OR c.claimed_at > due + interval '1 hour' THEN
        NEW.metadata := jsonb_set(NEW.metadata, '{ferry_seal_claim}', ferry_seal_mark(c.job_id, c.claimed_at, c.gone));
    ELSIF NEW.metadata ? 'ferry_seal_claim' THEN
        NEW.metadata := NEW.metadata - 'ferry_seal_claim';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER ferry_seal_claim_update ON river_job;
CREATE TRIGGER ferry_seal_claim_update BEFORE UPDATE ON river_job
    FOR EACH ROW WHEN ((NEW.metadata ? 'ferry_seal' OR NEW.metadata ? 'ferry_seal_claim')
        AND (OLD.id <> NEW.id
             OR (OLD.metadata -> 'ferry_seal') IS DISTINCT FROM (NEW.metadata -> 'ferry_seal')
             OR (OLD.metadata -> 'ferry_seal_claim') IS DISTINCT FROM (NEW.metadata -> 'ferry_seal_claim')))
    EXECUTE FUNCTION ferry_seal_claim();
