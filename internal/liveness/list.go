package liveness

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The states of a worker in a listing (WorkerInfo.State).
const (
	// StateAlive: some session holds the worker's lock in this database.
	StateAlive = "alive"
	// StateLost: nobody holds the lock, and the worker neither stopped nor
	// was declared dead: its process died or its session was lost, and the
	// leader's rescuer has not come to it yet (within a rescue interval,
	// longer just after the server ended every session; or there is no
	// leader). Its running jobs wait for the rescue.
	StateLost = "lost"
	// StateDead: the rescuer declared it dead (dead_at) and took back its
	// running jobs (rescued_jobs).
	StateDead = "dead"
	// StateStopped: the worker stopped gracefully (stopped_at). The rescuer
	// declares it dead too, at its next pass, and takes back whatever it
	// left running.
	StateStopped = "stopped"
)

// WorkerInfo is one worker process as ferry_worker and pg_locks show it.
type WorkerInfo struct {
	ID       int32  `json:"id"`
	ClientID string `json:"client_id"`
	Hostname string `json:"hostname"`
	PID      int    `json:"pid"`
	// State is StateAlive, StateLost, StateDead or StateStopped. Alive is
	// decided by the worker's lock, never by LastSeenAt.
	State      string    `json:"state"`
	StartedAt  time.Time `json:"started_at"`
	LastSeenAt time.Time `json:"last_seen_at"`
	// RunningJobs counts the jobs in state running whose latest attempt is
	// the worker's.
	RunningJobs int        `json:"running_jobs"`
	StoppedAt   *time.Time `json:"stopped_at"`
	// DeadAt is when the rescuer declared the worker dead, and so when it
	// took back RescuedJobs, in the same transaction.
	DeadAt      *time.Time `json:"dead_at"`
	RescuedJobs int        `json:"rescued_jobs"`
}

// Querier is what List runs on (a pool, a connection, a tx).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// workersSQL starts a statement with the CTE worker: every row of
// ferry_worker with its state. A worker is alive while some session holds
// its lock (ferry_liveness_namespace(), id) in this database, as the rescuer sees it;
// one the rescuer has declared dead is dead whatever it holds (it stops as
// soon as it learns it).
const workersSQL = `WITH held AS (
    SELECT l.objid::bigint AS id FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.classid = ferry_liveness_namespace()::oid AND l.objsubid = 2 AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
), worker AS (
    SELECT w.*, CASE
        WHEN w.dead_at IS NULL AND EXISTS (SELECT 1 FROM held h WHERE h.id = w.id) THEN 'alive'
        WHEN w.stopped_at IS NOT NULL THEN 'stopped'
        WHEN w.dead_at IS NOT NULL THEN 'dead'
        ELSE 'lost' END AS state
    FROM ferry_worker w
)`

// listSQL reads every worker alive or lost, and those dead or stopped
// within $1 seconds: alive first, oldest first; then lost; then dead and
// stopped, latest first.
const listSQL = workersSQL + `, running AS (
    SELECT attempted_by[cardinality(attempted_by)] AS client_id, count(*)::int AS n
    FROM river_job WHERE state = 'running'
    GROUP BY 1
)
SELECT w.id, w.client_id, w.hostname, w.pid, w.state, w.started_at, w.last_seen_at,
    coalesce(r.n, 0), w.stopped_at, w.dead_at, w.rescued_jobs
FROM worker w LEFT JOIN running r USING (client_id)
WHERE w.state IN ('alive', 'lost')
   OR coalesce(w.stopped_at, w.dead_at) >= now() - make_interval(secs => $1)
ORDER BY CASE w.state WHEN 'alive' THEN 0 WHEN 'lost' THEN 1 ELSE 2 END,
    coalesce(w.stopped_at, w.dead_at) DESC NULLS FIRST, w.id`

// List returns every worker alive now or lost (dead but not rescued yet),
// and those that died or stopped within since, with the count of the jobs
// each is running and of those rescued from it.
func List(ctx context.Context, q Querier, since time.Duration) ([]WorkerInfo, error) {
	if since <= 0 {
		return nil, fmt.Errorf("liveness: list workers: since %s is not positive", since)
	}
	rows, err := q.Query(ctx, listSQL, since.Seconds())
	if err != nil {
		return nil, fmt.Errorf("liveness: list workers: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[WorkerInfo])
	if err != nil {
		return nil, fmt.Errorf("liveness: list workers: %w", err)
	}
	return out, nil
}

// runningOnSQL reads the River client of running job $1's latest attempt,
// and that worker's state (empty when the client is not a ferry worker).
const runningOnSQL = workersSQL + `
SELECT j.attempted_by[cardinality(j.attempted_by)], coalesce(w.state, '')
FROM river_job j LEFT JOIN worker w ON w.client_id = j.attempted_by[cardinality(j.attempted_by)]
WHERE j.id = $1 AND j.state = 'running' AND cardinality(j.attempted_by) > 0`

// RunningOn returns the River client id that runs job id (its latest
// attempt's) and that worker's state as List sees it: StateAlive,
// StateLost, StateDead or StateStopped, or "" when the client is not a
// ferry worker (liveness cannot see it). clientID is "" when the job is
// not running.
func RunningOn(ctx context.Context, q Querier, id int64) (clientID, state string, err error) {
	rows, err := q.Query(ctx, runningOnSQL, id)
	if err != nil {
		return "", "", fmt.Errorf("liveness: worker of job %d: %w", id, err)
	}
	_, err = pgx.ForEachRow(rows, []any{&clientID, &state}, func() error { return nil })
	if err != nil {
		return "", "", fmt.Errorf("liveness: worker of job %d: %w", id, err)
	}
	return clientID, state, nil
}
