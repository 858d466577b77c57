-- Back to migration 020: seals read from metadata.ferry_seal only. Jobs
-- sealed in a tag are no longer claimed, and workers built before
-- migration 021 refuse them as missing: go back with the workers and
-- inserters of that build, once no job sealed in a tag is waiting.
CREATE OR REPLACE FUNCTION ferry_seal_claim() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    run text := ferry_seal_run_id(NEW.metadata);
    due timestamptz := coalesce(ferry_seal_due(NEW.metadata), now());
    c record;
BEGIN
    -- The test the trigger's WHEN made before this version: the row
    -- carries a seal or a mark, and its id, seal or mark changed. Else
    -- (River merging metadata at completion, say) nothing to claim.
    IF NOT (NEW.metadata ? 'ferry_seal' OR NEW.metadata ? 'ferry_seal_claim')
       OR (OLD.id = NEW.id
           AND (OLD.metadata -> 'ferry_seal') IS NOT DISTINCT FROM (NEW.metadata -> 'ferry_seal')
           AND (OLD.metadata -> 'ferry_seal_claim') IS NOT DISTINCT FROM (NEW.metadata -> 'ferry_seal_claim')) THEN
        RETURN NEW;
    END IF;
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
    FOR EACH ROW WHEN (OLD.id <> NEW.id OR OLD.metadata IS DISTINCT FROM NEW.metadata)
    EXECUTE FUNCTION ferry_seal_claim();

CREATE OR REPLACE FUNCTION ferry_seal_claim_rows() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    total bigint;
    odd boolean;
    claimed bigint;
BEGIN
    -- One query: the statement's sealed rows read once, the run ids not
    -- claimed yet claimed with a plain INSERT (ON CONFLICT DO NOTHING took
    -- twice as long). Two rows of one statement, or of two transactions at
    -- once, with one new run id would fail it on the primary key: only a
    -- forger of fresh seals, who has a key, could write those; a copy of a
    -- committed job finds its claim and is marked below.
    WITH n AS MATERIALIZED (
        SELECT ferry_seal_run_id(metadata) AS run, id,
               coalesce(ferry_seal_due(metadata), now()) AS due,
               metadata ? 'ferry_seal_claim' AS had_mark
        FROM ferry_new WHERE metadata ? 'ferry_seal' OR metadata ? 'ferry_seal_claim'),
    c AS (
        INSERT INTO ferry_seal_run (run_id, job_id, due)
        SELECT n.run, n.id, n.due FROM n
        WHERE n.run IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM ferry_seal_run s WHERE s.run_id = n.run)
        RETURNING 1)
    SELECT (SELECT count(*) FROM n WHERE run IS NOT NULL),
           (SELECT coalesce(bool_or(had_mark OR due < now() - interval '1 hour'), false) FROM n),
           (SELECT count(*) FROM c)
    INTO total, odd, claimed;
    IF claimed = total AND NOT odd THEN
        RETURN NULL;
    END IF;
    UPDATE river_job j
    SET metadata = CASE WHEN x.mark THEN jsonb_set(j.metadata, '{ferry_seal_claim}', x.claim)
                        ELSE j.metadata - 'ferry_seal_claim' END
    FROM (SELECT n.id,
                 s.job_id IS NOT NULL AND (s.job_id <> n.id OR s.gone
                     OR s.claimed_at > coalesce(ferry_seal_due(n.metadata), now()) + interval '1 hour') AS mark,
                 ferry_seal_mark(s.job_id, s.claimed_at, s.gone) AS claim
          FROM ferry_new n
          LEFT JOIN ferry_seal_run s ON s.run_id = ferry_seal_run_id(n.metadata)
          WHERE n.metadata ? 'ferry_seal' OR n.metadata ? 'ferry_seal_claim') x
    WHERE j.id = x.id AND (x.mark OR j.metadata ? 'ferry_seal_claim');
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION ferry_seal_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ferry_seal_run s SET gone = true
    FROM ferry_old o
    WHERE o.metadata ? 'ferry_seal' AND s.run_id = ferry_seal_run_id(o.metadata)
      AND s.job_id = o.id AND NOT s.gone;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION ferry_seal_arm() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF ferry_seal_armed() THEN
        RETURN false;
    END IF;
    LOCK TABLE river_job IN SHARE ROW EXCLUSIVE MODE;
    IF ferry_seal_armed() THEN
        RETURN false;
    END IF;
    CREATE TRIGGER ferry_seal_claim_insert AFTER INSERT ON river_job
        REFERENCING NEW TABLE AS ferry_new
        FOR EACH STATEMENT EXECUTE FUNCTION ferry_seal_claim_rows();
    INSERT INTO ferry_seal_run (run_id, job_id, due)
    SELECT ferry_seal_run_id(metadata), id, ferry_seal_due(metadata)
    FROM river_job
    WHERE metadata ? 'ferry_seal' AND ferry_seal_run_id(metadata) IS NOT NULL
    ORDER BY id
    ON CONFLICT (run_id) DO NOTHING;
    UPDATE river_job j
    SET metadata = jsonb_set(j.metadata, '{ferry_seal_claim}', ferry_seal_mark(s.job_id, s.claimed_at, s.gone))
    FROM ferry_seal_run s
    WHERE j.metadata ? 'ferry_seal' AND s.run_id = ferry_seal_run_id(j.metadata)
      AND (s.job_id <> j.id OR s.gone) AND NOT j.metadata ? 'ferry_seal_claim';
    RETURN true;
END
$$;

DROP FUNCTION ferry_seal_due(text[], jsonb);
DROP FUNCTION ferry_seal_run_id(text[], jsonb);
DROP FUNCTION ferry_sealed(text[], jsonb);
DROP FUNCTION ferry_seal_tag(text[]);
DROP FUNCTION ferry_seal_tag_scan(text[]);
