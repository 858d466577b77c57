-- A job's seal moves from metadata.ferry_seal to one of its tags (package
-- seal, "Where the seal is"). River indexes metadata with GIN (jsonb_ops,
-- river_job_metadata_index), which took the seal of each row version of a
-- job (insert, fetch, completion) as one more entry of its own, unique to
-- the job: a sealed worker spent a fifth more Postgres CPU per job than an
-- unsealed one, and the index grew by an entry a job. River indexes no
-- tags. Five rounds of 50,000 no-op jobs each way (`go run ./tools/bench
-- -mode sealed`, medians of the rounds): sealed_worker_ratio 0.71 and 0.82
-- with the seal in metadata, 0.90 to 0.97 in five runs with it in a tag
-- (median 0.92), in the same hours; 0.76 and 0.93 with 200,000 jobs.
--
-- The seal of a job is the last of its tags that begins '3.' or '3e.'
-- (River's tag format, [\w][\w-]+[\w], has no dot, so no tag that River's
-- client accepts is taken for one); a job without such a tag has the seal
-- of its metadata.ferry_seal, written by builds before this one, if any.
-- The worker's check reads the same seal (seal.Verifier.Check): a claim
-- made for another seal than the one checked would let a copy pass.

-- ferry_seal_tag is the seal among tags, NULL when none. The common case
-- (the seal last, as ferry's insert middleware appends it) is one array
-- subscript, and the function is inlined into the statements that call it;
-- other tags after the seal cost a scan of the array.
CREATE FUNCTION ferry_seal_tag_scan(tags text[]) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (SELECT t FROM unnest(tags) WITH ORDINALITY AS u(t, i)
            WHERE starts_with(t, '3.') OR starts_with(t, '3e.')
            ORDER BY i DESC LIMIT 1);

CREATE FUNCTION ferry_seal_tag(tags text[]) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN starts_with(tags[cardinality(tags)], '3.') OR starts_with(tags[cardinality(tags)], '3e.')
                THEN tags[cardinality(tags)]
                WHEN cardinality(tags) > 1 THEN ferry_seal_tag_scan(tags) END;

-- ferry_sealed says whether a row carries a seal, in a tag or in metadata;
-- ferry_seal_run_id and ferry_seal_due read the run id and the due time of
-- the seal the worker checks (NULL when it has none a worker accepts).
CREATE FUNCTION ferry_sealed(tags text[], m jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ferry_seal_tag(tags) IS NOT NULL OR m ? 'ferry_seal';

CREATE FUNCTION ferry_seal_run_id(tags text[], m jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN ferry_seal_tag(tags) IS NOT NULL
                THEN nullif(split_part(ferry_seal_tag(tags), '.', 3), '')
                ELSE ferry_seal_run_id(m) END;

CREATE FUNCTION ferry_seal_due(tags text[], m jsonb) RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN ferry_seal_tag(tags) IS NOT NULL
                THEN ferry_unix_time(split_part(ferry_seal_tag(tags), '.', 4))
                ELSE ferry_seal_due(m) END;

-- The row-level claim of an UPDATE that changes a row's id, seal or mark.
CREATE OR REPLACE FUNCTION ferry_seal_claim() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    run text;
    due timestamptz;
    c record;
BEGIN
    -- Nothing to claim unless the row carries a seal or a mark, and its
    -- id, seal or mark changed (not River merging metadata at completion,
    -- nor ferry's rescuer counting a death).
    IF NOT (ferry_sealed(NEW.tags, NEW.metadata) OR NEW.metadata ? 'ferry_seal_claim')
       OR (OLD.id = NEW.id
           AND ferry_seal_tag(OLD.tags) IS NOT DISTINCT FROM ferry_seal_tag(NEW.tags)
           AND (OLD.metadata -> 'ferry_seal') IS NOT DISTINCT FROM (NEW.metadata -> 'ferry_seal')
           AND (OLD.metadata -> 'ferry_seal_claim') IS NOT DISTINCT FROM (NEW.metadata -> 'ferry_seal_claim')) THEN
        RETURN NEW;
    END IF;
    run := ferry_seal_run_id(NEW.tags, NEW.metadata);
    IF run IS NULL THEN
        -- Not a seal a worker accepts (it refuses the job as invalid).
        NEW.metadata := NEW.metadata - 'ferry_seal_claim';
        RETURN NEW;
    END IF;
    due := coalesce(ferry_seal_due(NEW.tags, NEW.metadata), now());
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

-- River's fetch and completion change no row's id, tags or metadata; a
-- row whose tags or metadata change calls the function, which tests the
-- rest.
DROP TRIGGER ferry_seal_claim_update ON river_job;
CREATE TRIGGER ferry_seal_claim_update BEFORE UPDATE ON river_job
    FOR EACH ROW WHEN (OLD.id <> NEW.id OR OLD.tags IS DISTINCT FROM NEW.tags OR OLD.metadata IS DISTINCT FROM NEW.metadata)
    EXECUTE FUNCTION ferry_seal_claim();

-- The statement-level claim of an INSERT (put on river_job by
-- ferry_seal_arm), as in migration 014, reading the seal where it is.
CREATE OR REPLACE FUNCTION ferry_seal_claim_rows() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    total bigint;
    odd boolean;
    claimed bigint;
BEGIN
    WITH n AS MATERIALIZED (
        SELECT ferry_seal_run_id(tags, metadata) AS run, id,
               coalesce(ferry_seal_due(tags, metadata), now()) AS due,
               metadata ? 'ferry_seal_claim' AS had_mark
        FROM ferry_new WHERE ferry_sealed(tags, metadata) OR metadata ? 'ferry_seal_claim'),
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
                     OR s.claimed_at > coalesce(ferry_seal_due(n.tags, n.metadata), now()) + interval '1 hour') AS mark,
                 ferry_seal_mark(s.job_id, s.claimed_at, s.gone) AS claim
          FROM ferry_new n
          LEFT JOIN ferry_seal_run s ON s.run_id = ferry_seal_run_id(n.tags, n.metadata)
          WHERE ferry_sealed(n.tags, n.metadata) OR n.metadata ? 'ferry_seal_claim') x
    WHERE j.id = x.id AND (x.mark OR j.metadata ? 'ferry_seal_claim');
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION ferry_seal_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ferry_seal_run s SET gone = true
    FROM ferry_old o
    WHERE ferry_sealed(o.tags, o.metadata) AND s.run_id = ferry_seal_run_id(o.tags, o.metadata)
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
    SELECT ferry_seal_run_id(tags, metadata), id, ferry_seal_due(tags, metadata)
    FROM river_job
    WHERE ferry_sealed(tags, metadata) AND ferry_seal_run_id(tags, metadata) IS NOT NULL
    ORDER BY id
    ON CONFLICT (run_id) DO NOTHING;
    UPDATE river_job j
    SET metadata = jsonb_set(j.metadata, '{ferry_seal_claim}', ferry_seal_mark(s.job_id, s.claimed_at, s.gone))
    FROM ferry_seal_run s
    WHERE ferry_sealed(j.tags, j.metadata) AND s.run_id = ferry_seal_run_id(j.tags, j.metadata)
      AND (s.job_id <> j.id OR s.gone) AND NOT j.metadata ? 'ferry_seal_claim';
    RETURN true;
END
$$;
