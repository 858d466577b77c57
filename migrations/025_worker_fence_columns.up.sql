-- What the fence of a dead worker (migrations 006, 015, 016, 019) costs
-- River's inserts.
--
-- River inserts with INSERT … ON CONFLICT (unique_key) … DO UPDATE SET
-- kind = river_job.kind, for unique jobs and all others alike, and such a
-- statement fires river_job's BEFORE UPDATE statement triggers whether or
-- not a row conflicts: every insert called ferry_worker_fence, a plpgsql
-- call of about 24,000 instructions against 662,000 for the insert
-- (migration 019, callgrind), and, from a worker's session (the relay's
-- deliveries, a job that inserts another), its lookup of the worker and
-- its advisory lock besides.
--
-- The conflict's update changes no job (kind to itself). The trigger now
-- fires only for UPDATEs that set another column than kind: every update
-- of River's and ferry's sets one (state, metadata, …), and Postgres fires
-- a column-list trigger when one of its columns is a target of the UPDATE,
-- changed or not. The list is every column of river_job but kind;
-- TestFence_Columns fails when River adds one that is not in it.
DROP TRIGGER ferry_worker_fence ON river_job;
CREATE TRIGGER ferry_worker_fence
    BEFORE UPDATE OF id, state, attempt, max_attempts, attempted_at, created_at,
        finalized_at, scheduled_at, priority, args, attempted_by, errors,
        metadata, queue, tags, unique_key, unique_states
    ON river_job
    FOR EACH STATEMENT EXECUTE FUNCTION ferry_worker_fence();
