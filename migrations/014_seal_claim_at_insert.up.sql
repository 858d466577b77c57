-- Run ids claimed when a sealed job is written, not when it starts (package
-- seal, "The run-id claim"). A worker claimed each job's run id in a write
-- of its own before running it: a write and a commit per job that River's
-- fetch and completion do not make, which held a sealed worker to 0.59 of
-- an unsealed one. The claim is now made by the database in the
-- transaction that writes the job, and what the worker must know of it is
-- written into the job's own row, so that the worker reads nothing more
-- than the row River fetched.
--
-- A row of river_job with a seal (metadata.ferry_seal: a string
-- "2.<key id>.<run id>.<due>.<e>.<mac>.<queue>" since this version, or the
-- object of version 1 with its run id in r and due in d) claims that run id
-- for its job id in ferry_seal_run: set-based, once per INSERT statement
-- (ferry_seal_claim_rows, so that a COPY of a million sealed jobs claims
-- them in one INSERT … SELECT), and for each row whose id, seal or mark an
-- UPDATE changes (ferry_seal_claim). When the claim was already held by
-- another job id, or by a job since deleted (gone), or was made more than
-- an hour after the job was due, the row gets metadata.ferry_seal_claim =
-- {"job": holder, "at": unix seconds of the claim, "gone": bool}, which the
-- worker reads: replayed or stale. Any other row has no such key (a mark
-- written by hand is removed). The metadata is not under the seal's MAC,
-- and nothing but these triggers may set the key: a session that can
-- disable triggers (a superuser's session_replication_role) is beyond what
-- a seal defends against.
--
-- The INSERT trigger is put on river_job by ferry_seal_arm, which every
-- worker with seal keys calls at start (and which claims, at once, the
-- sealed jobs written before), so that a deployment without seals pays
-- nothing on insert. The UPDATE trigger's WHEN and the DELETE trigger cost
-- unsealed rows nothing or next to nothing, and stay.

ALTER TABLE ferry_seal_run
    ADD COLUMN due  timestamptz,
    ADD COLUMN gone boolean NOT NULL DEFAULT false;

-- Claims are deleted once their job was due longer ago than the replay
-- window (and an hour): a copy written after that claims anew, late, and is
-- refused as stale. The hourly cleaner reads the table for that without an
-- index: each claim is written by an insert of river_job, where an index on
-- the time would cost every insert (a COPY of sealed jobs ran at 0.27 of an
-- unsealed one with it and the row-level claims of the first form of this
-- migration).
DROP INDEX ferry_seal_run_claimed_at;

-- ferry_seal_run_id is the run id of the seal in job metadata m (NULL
-- without one); ferry_seal_due its due time (NULL when it has none a
-- worker would accept).
CREATE FUNCTION ferry_seal_run_id(m jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE jsonb_typeof(m -> 'ferry_seal')
        WHEN 'string' THEN nullif(split_part(m ->> 'ferry_seal', '.', 3), '')
        WHEN 'object' THEN nullif(m #>> '{ferry_seal,r}', '')
    END;

CREATE FUNCTION ferry_unix_time(d text) RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN length(d) BETWEEN 1 AND 11 AND translate(d, '0123456789', '') = ''
                THEN to_timestamp(d::bigint) END;

CREATE FUNCTION ferry_seal_due(m jsonb) RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE jsonb_typeof(m -> 'ferry_seal')
        WHEN 'string' THEN ferry_unix_time(split_part(m ->> 'ferry_seal', '.', 4))
        WHEN 'object' THEN ferry_unix_time(m #>> '{ferry_seal,d}')
    END;

-- ferry_seal_mark is metadata.ferry_seal_claim, the mark a worker reads
-- (seal.claimMark): the claim's holder, its time in unix seconds, gone.
CREATE FUNCTION ferry_seal_mark(job bigint, at timestamptz, gone boolean) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN jsonb_build_object('job', job, 'at', floor(extract(epoch FROM at))::bigint, 'gone', gone);

-- ferry_seal_claim claims the run id of one row being updated (its id,
-- seal or mark changed) and writes or removes its mark.
CREATE FUNCTION ferry_seal_claim() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- ferry_seal_claim_rows claims, in one statement, the run ids of the
-- sealed rows an INSERT statement wrote. Only when some row's claim is not
-- its own (a copy), or late, or a row carries a mark, does it write marks,
-- with an UPDATE of those rows (which the UPDATE trigger checks again).
CREATE FUNCTION ferry_seal_claim_rows() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- River's own updates (fetch, completion, retry; metadata merged at
-- completion) change none of the three, and do not call the function.
CREATE TRIGGER ferry_seal_claim_update BEFORE UPDATE ON river_job
    FOR EACH ROW WHEN ((NEW.metadata ? 'ferry_seal' OR NEW.metadata ? 'ferry_seal_claim')
        AND (OLD.id <> NEW.id
             OR (OLD.metadata -> 'ferry_seal') IS DISTINCT FROM (NEW.metadata -> 'ferry_seal')
             OR (OLD.metadata -> 'ferry_seal_claim') IS DISTINCT FROM (NEW.metadata -> 'ferry_seal_claim')))
    EXECUTE FUNCTION ferry_seal_claim();

-- A deleted job's claim is gone: a copy written back later, even under
-- the deleted job's id, is refused as replayed.
CREATE FUNCTION ferry_seal_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ferry_seal_run s SET gone = true
    FROM ferry_old o
    WHERE o.metadata ? 'ferry_seal' AND s.run_id = ferry_seal_run_id(o.metadata)
      AND s.job_id = o.id AND NOT s.gone;
    RETURN NULL;
END
$$;

CREATE TRIGGER ferry_seal_gone AFTER DELETE ON river_job
    REFERENCING OLD TABLE AS ferry_old
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_seal_gone();

-- ferry_seal_armed says whether ferry_seal_claim_rows claims the run ids of
-- inserted rows.
CREATE FUNCTION ferry_seal_armed() RETURNS boolean LANGUAGE sql STABLE
    RETURN EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgrelid = 'river_job'::regclass AND tgname = 'ferry_seal_claim_insert');

-- ferry_seal_arm puts the INSERT trigger on river_job if it is not there,
-- and says whether it did. Under SHARE ROW EXCLUSIVE (writers wait), it
-- claims the run ids of the sealed jobs written while there was none,
-- oldest first, and marks any later copy of one of them.
CREATE FUNCTION ferry_seal_arm() RETURNS boolean LANGUAGE plpgsql AS $$
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
