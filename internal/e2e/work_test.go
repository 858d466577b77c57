package e2e_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
)

// debug makes the worker log "job: completed" lines.
var debug = []string{"FERRY_LOG_LEVEL=debug"}

func TestWork_EnqueuedJobCompletes(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	// One job waits for the worker, one arrives while it runs.
	before := enqueueID(t, url, "ferry.noop")
	w := startWorker(t, url, debug)
	after := enqueueID(t, url, "ferry.noop", "--args", `{"sleep":"10ms"}`)

	for _, id := range []int64{before, after} {
		_, err := w.WaitForLineFunc(10*time.Second, logtest.Logged("job: completed", "job_id", id, "kind", "ferry.noop"))
		require.NoError(t, err)
		j := waitJobState(t, pool, id, "completed", 5*time.Second)
		require.Equal(t, 1, j.Attempt)
		require.Zero(t, j.Errors)
	}
	stop(t, w, stopTimeout)
}

func TestShutdown(t *testing.T) {
	t.Parallel()

	t.Run("RunningJobFinishesWithinGrace", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		pool := pgtest.PoolFor(t, url)

		id := enqueueID(t, url, "ferry.noop", "--args", `{"sleep":"3s"}`)
		w := startWorker(t, url, debug, "--shutdown-grace", "10s")
		waitJobState(t, pool, id, "running", 10*time.Second)

		sent := time.Now()
		require.NoError(t, w.Signal(syscall.SIGTERM))
		_, err := w.WaitForLineFunc(5*time.Second, logtest.Logged("ferry: stopping; running jobs have the grace period to finish"))
		require.NoError(t, err)
		code, err := w.Wait(30 * time.Second)
		require.NoError(t, err)
		require.Zero(t, code, w.Stderr())
		t.Logf("stopped %s after SIGTERM", time.Since(sent))

		_, err = w.WaitForLineFunc(0, logtest.Logged("job: completed", "job_id", id))
		require.NoError(t, err, "the job ran to its end")
		// The worker exited cleanly, so the completion is already recorded.
		j := getJob(t, pool, id)
		require.Equal(t, "completed", j.State)
		require.Equal(t, 1, j.Attempt)
	})

	t.Run("JobPastGraceIsReturnedNotLost", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		pool := pgtest.PoolFor(t, url)

		id := enqueueID(t, url, "ferry.noop", "--args", `{"sleep":"30s"}`)
		w := startWorker(t, url, debug, "--shutdown-grace", "1s")
		waitJobState(t, pool, id, "running", 10*time.Second)

		sent := time.Now()
		require.NoError(t, w.Signal(syscall.SIGTERM))
		// The job would sleep 30 s: the worker exits before that (a
		// watchdog of 20 s), and the job's state below shows it was
		// returned, not completed.
		code, err := w.Wait(20 * time.Second)
		require.NoError(t, err)
		require.Zero(t, code, w.Stderr())
		require.GreaterOrEqual(t, time.Since(sent), 900*time.Millisecond, "the job had its grace period")

		// River (v0.51) treats a job whose context a stopping client
		// cancelled as interrupted, not failed: it goes back to available at
		// once, its attempt is given back, and no error is recorded. What
		// matters is that it is not lost: not running, not finalized, and
		// picked up again below.
		j := getJob(t, pool, id)
		require.Equal(t, "available", j.State)
		require.False(t, j.Finalized)
		require.Zero(t, j.Attempt, "the interrupted attempt is not counted")
		require.Zero(t, j.Errors, "an interruption records no error")
		require.LessOrEqual(t, j.ScheduledIn, time.Duration(0), "it can run at once")

		// The args still ask for 30s of sleep, and the point is that a new
		// worker picks the job up, not that it sleeps: shorten the sleep
		// (and only that: the job is due already, as checked above).
		_, err = pool.Exec(context.Background(),
			`UPDATE river_job SET args = '{"sleep":"10ms"}' WHERE id = $1`, id)
		require.NoError(t, err)

		w2 := startWorker(t, url, debug)
		_, err = w2.WaitForLineFunc(10*time.Second, logtest.Logged("job: completed", "job_id", id))
		require.NoError(t, err)
		j = waitJobState(t, pool, id, "completed", 5*time.Second)
		require.Equal(t, 1, j.Attempt, "one counted attempt: the one that completed")
		stop(t, w2, stopTimeout)
	})
}
