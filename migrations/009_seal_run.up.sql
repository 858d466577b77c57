-- ferry_seal_run: the run ids of sealed jobs (package seal) that a worker has
-- started. A worker claims a job's run id, for the job's id, in a statement
-- of its own that commits before the job's worker runs; a job whose run id
-- another job id holds is a copy written back under another id, and is
-- refused as replayed. Claims older than the replay window are deleted by
-- the leader: a copy of such a job is refused as stale anyway.
CREATE TABLE ferry_seal_run (
    run_id     text        PRIMARY KEY,
    job_id     bigint      NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX ferry_seal_run_claimed_at ON ferry_seal_run (claimed_at);
