package liveness

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors of RescueJob.
var (
	// ErrJobNotFound: no job has the id.
	ErrJobNotFound = errors.New("not found")
	// ErrJobNotRunning: only a running job can be rescued.
	ErrJobNotRunning = errors.New("not running")
)

// WorkerAliveError is why RescueJob leaves a job alone: the worker running
// it is alive, and would run it a second time beside its rescuer.
type WorkerAliveError struct{ ClientID string }

func (e *WorkerAliveError) Error() string {
	return fmt.Sprintf("running on live worker %s: not rescued", e.ClientID)
}

// JobRescue is what RescueJob did.
type JobRescue struct {
	// State is the job's state afterwards.
	State string
	// RiverLeader: the job's worker, declared dead by this rescue, held
	// River's leadership, which the rescue resigned for it.
	RiverLeader bool
}

// RescueJob is an operator's rescue of one running job (enqueue jobs
// rescue), without waiting for the leader's next pass. When the job's
// worker is a ferry worker whose lock nobody holds, the worker is declared
// dead and every running job of it is taken back, and River's leadership
// resigned if it held it, as the rescuer would (its late writes are fenced
// from then on); when the worker is alive (its lock is held, or a session
// of it is still connected: its liveness session alone may have been
// ended, and it is taking its lock again), nothing is done and the error
// is a *WorkerAliveError. A job last attempted by a
// River client that is not a ferry worker is taken back alone: liveness
// cannot see that client, and the operator vouches for it. It returns the
// job's state afterwards, and whether it resigned the worker's River
// leadership.
func RescueJob(ctx context.Context, pool *pgxpool.Pool, id int64, maxOrphaned int) (JobRescue, error) {
	if maxOrphaned < 1 {
		maxOrphaned = DefaultMaxOrphaned
	}
	var out JobRescue
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var clientID *string
		// A plain read: takeBack re-checks the state and the attempt under
		// its own row lock, and a row lock taken here, held while takeBack
		// waits for the worker's writes in flight, could deadlock with the
		// worker's own completion of this job.
		err := tx.QueryRow(ctx, `SELECT state::text, attempted_by[cardinality(attempted_by)] FROM river_job WHERE id = $1`, id).Scan(&out.State, &clientID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return ErrJobNotFound
		case err != nil:
			return fmt.Errorf("read the job: %w", err)
		case out.State != "running" || clientID == nil:
			return fmt.Errorf("%w (%s)", ErrJobNotRunning, out.State)
		}
		var workerID int32
		var dead, connected bool
		switch err := tx.QueryRow(ctx, `SELECT id, dead_at IS NOT NULL, `+workerConnectedSQL+` FROM ferry_worker w WHERE client_id = $1`, *clientID).Scan(&workerID, &dead, &connected); {
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("read the job's worker: %w", err)
		case err != nil || dead:
			// Not a ferry worker's (the operator vouches for its client),
			// or declared dead with the job still running (its worker's
			// other jobs went with the declaration): taken back alone.
			var res Rescue
			if err := takeBack(ctx, tx, *clientID, &id, maxOrphaned, &res); err != nil {
				return err
			}
		case connected:
			return &WorkerAliveError{ClientID: *clientID}
		default:
			res, ok, err := rescueWorker(ctx, tx, workerID, *clientID, maxOrphaned)
			if err != nil {
				return err
			}
			if !ok {
				return &WorkerAliveError{ClientID: *clientID}
			}
			out.RiverLeader = res.RiverLeader
		}
		return tx.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&out.State)
	})
	return out, err
}
