package e2e_test

import (
	"context"
	"math/rand/v2"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/internal/testkit/netproxy"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// A worker's lease with real processes: a worker cut off from Postgres or
// paused past its liveness lease stops its jobs before their rescued
// copies start, and a worker whose liveness session alone is killed, again
// and again, is never declared dead. The jobs record what they do
// (test.record) on a connection of their own, straight to the server.

// recordEvent is one row of record_event.
type recordEvent struct {
	Attempt int
	Event   string
	Cause   string
	At      time.Time
}

// recordSetup makes a database with the table test.record writes, and
// returns its URL and a pool on it.
func recordSetup(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	_, err := pool.Exec(context.Background(), `CREATE TABLE record_event (
		job_id bigint NOT NULL, attempt int NOT NULL, client_id text NOT NULL,
		event text NOT NULL, cause text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	require.NoError(t, err)
	return url, pool
}

func recordEvents(t *testing.T, pool *pgxpool.Pool, id int64) []recordEvent {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT attempt, event, cause, at FROM record_event WHERE job_id = $1 ORDER BY at`, id)
	require.NoError(t, err)
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[recordEvent])
	require.NoError(t, err)
	return evs
}

// waitEvent waits for attempt's event of job id, and returns it.
func waitEvent(t *testing.T, pool *pgxpool.Pool, id int64, attempt int, event string) recordEvent {
	t.Helper()
	deadline := time.Now().Add(rescueWatchdog)
	for {
		for _, e := range recordEvents(t, pool, id) {
			if e.Attempt == attempt && e.Event == event {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: no %s of attempt %d after %s; events %+v", id, event, attempt, rescueWatchdog, recordEvents(t, pool, id))
		}
		time.Sleep(pollEvery)
	}
}

// requireFirstAttemptStoppedFirst checks the oracle of the lease: the
// first attempt took no step once the second had started, and it saw its
// context cancelled for its lease (liveness.ErrLeaseLost), at the latest
// (before, with strictly) when the second started.
func requireFirstAttemptStoppedFirst(t *testing.T, pool *pgxpool.Pool, id int64, strictly bool) {
	t.Helper()
	second := waitEvent(t, pool, id, 2, "start")
	cancelled := waitEvent(t, pool, id, 1, "cancelled")
	evs := recordEvents(t, pool, id)
	steps := 0
	for _, e := range evs {
		if e.Attempt != 1 || e.Event != "step" {
			continue
		}
		steps++
		require.True(t, e.At.Before(second.At), "attempt 1 took a step at %s, after attempt 2 started at %s; events %+v", e.At, second.At, evs)
	}
	require.NotZero(t, steps, "attempt 1 ran before the fault; events %+v", evs)
	require.Equal(t, liveness.ErrLeaseLost.Error(), cancelled.Cause, "attempt 1 was cancelled for its lease")
	if strictly {
		require.True(t, cancelled.At.Before(second.At), "attempt 1 cancelled at %s, after attempt 2 started at %s", cancelled.At, second.At)
	}
}

// waitTakenOver waits for the leader (or b, should it lead) to rescue job
// id from the worker aID, and for the worker bID to complete it.
func waitTakenOver(t *testing.T, pool *pgxpool.Pool, id int64, aID, bID string, leader, b *proctest.Proc) {
	t.Helper()
	waitRescue(t, aID, []*proctest.Proc{leader, b}, "count", 1)
	waitRescuedJob(t, pool, id, "completed by B", func(j rescuedJob) bool {
		return j.State == "completed" && len(j.AttemptedBy) == 2 && j.AttemptedBy[1] == bID
	})
}

// TestLease_PausedPastTheLease stops a worker with SIGSTOP while its job
// runs, past its liveness lease (3.3 s at these ticks): the server ends
// its session, the leader rescues the job and B starts it. Continued, A's
// job finds its context cancelled (its lease ran out while it was
// paused) before it takes another step.
func TestLease_PausedPastTheLease(t *testing.T) {
	t.Parallel()
	url, pool := recordSetup(t)
	rec := "RECORD_DATABASE_URL=" + url
	leader, _ := startRescueWorker(t, url, "spare=1", true)
	a, aID := startRescueWorker(t, url, "default=1", false, rec)
	id := enqueueID(t, url, "test.record", "--args", `{"hold":1}`)
	waitRescuedJob(t, pool, id, "running on A", runningOn(nil, aID))
	waitEvent(t, pool, id, 1, "step")
	require.NoError(t, a.Signal(syscall.SIGSTOP))
	b, bID := startRescueWorker(t, url, "default=1", false, rec)
	waitTakenOver(t, pool, id, aID, bID, leader, b)
	require.NoError(t, a.Signal(syscall.SIGCONT))
	code, err := a.Wait(rescueWatchdog)
	require.NoError(t, err)
	require.Equal(t, 1, code, "A, declared dead, exits 1")
	requireFirstAttemptStoppedFirst(t, pool, id, false)
}

// TestLease_PartitionedPastTheLease cuts a worker off from Postgres (a
// blackhole of every connection it has, nothing closed) while its job
// runs: the worker cancels the job, for its lease, before the server ends
// its liveness session, and so before the rescue gives the job to B.
func TestLease_PartitionedPastTheLease(t *testing.T) {
	t.Parallel()
	dbURL, pool := recordSetup(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	proxy, err := netproxy.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	cut := u.String()
	rec := "RECORD_DATABASE_URL=" + dbURL

	leader, _ := startRescueWorker(t, dbURL, "spare=1", true)
	a, aID := startRescueWorker(t, cut, "default=1", false, rec)
	id := enqueueID(t, dbURL, "test.record", "--args", `{"hold":1}`)
	waitRescuedJob(t, pool, id, "running on A", runningOn(nil, aID))
	waitEvent(t, pool, id, 1, "step")
	proxy.Partition()
	_, err = a.WaitForLineFunc(rescueWatchdog, logtest.Logged("liveness: liveness not confirmed in time; cancelling running jobs and starting none until it is, before the server may end this worker's session"))
	require.NoError(t, err, "A held its jobs for its lease")
	b, bID := startRescueWorker(t, dbURL, "default=1", false, rec)
	waitTakenOver(t, pool, id, aID, bID, leader, b)
	requireFirstAttemptStoppedFirst(t, pool, id, true)
	proxy.Heal()
	code, err := a.Wait(rescueWatchdog)
	require.NoError(t, err)
	require.Equal(t, 1, code, "A, declared dead, exits 1 once it hears of it")
}

// TestLease_LivenessSessionKilled ends a live worker's liveness session
// (pg_terminate_backend, as an idle-session killer or a proxy restart
// would) 100 times, 0.1 to 0.4 s apart, while it runs long jobs, with the
// leader's rescuer passing every 50 ms: no pass declares it dead, none of
// its jobs is rescued, and it never exits.
func TestLease_LivenessSessionKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	leader, _ := startRescueWorker(t, url, "spare=1", true, "FERRY_RESCUE_INTERVAL=50ms")
	a, aID := startRescueWorker(t, url, "default=2", false)
	ids := []int64{
		enqueueID(t, url, "test.sleep", "--args", `{"sleeps":["1h"]}`),
		enqueueID(t, url, "test.sleep", "--args", `{"sleeps":["1h"]}`),
	}
	for _, id := range ids {
		waitRescuedJob(t, pool, id, "running on A", runningOn(nil, aID))
	}
	var workerID int32
	require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM ferry_worker WHERE client_id = $1", aID).Scan(&workerID))

	const kills = 100
	for i := range kills {
		var pid int
		require.Eventually(t, func() bool {
			require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_locks
				WHERE locktype = 'advisory' AND classid = $1::int::oid AND objid = $2::int::oid AND objsubid = 2 AND granted
				  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
				liveness.Namespace, workerID).Scan(&pid))
			return pid != 0
		}, rescueWatchdog, 5*time.Millisecond, "kill %d: A holds its lock again", i)
		var ended bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ended))
		require.True(t, ended)
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
		require.False(t, a.Exited(), "kill %d: A exited; stderr:\n%s", i, a.Stderr())
	}

	dead, rescued := deadAt(t, pool, aID)
	require.False(t, dead, "A was declared dead")
	require.Zero(t, rescued)
	// Each job is A's alone: never rescued, never run elsewhere. (Kills
	// this close together on a loaded machine may keep A from confirming
	// its liveness within its lease; it then holds its jobs, snoozed and
	// fetched again, by A, their attempt given back.)
	for _, id := range ids {
		j := getRescuedJob(t, pool, id)
		require.Equal(t, 1, j.Attempt, "job %d: %+v", id, j)
		require.Zero(t, j.Orphaned, "job %d: %+v", id, j)
		for _, by := range j.AttemptedBy {
			require.Equal(t, aID, by, "job %d ran on A only: %+v", id, j)
		}
	}
	_, err := leader.WaitForLineFunc(0, logtest.Logged("rescue: orphaned jobs rescued"))
	require.Error(t, err, "the leader rescued nothing")
	_, err = a.WaitForLineFunc(0, logtest.Logged("liveness: lock taken again on a new session", "client_id", aID))
	require.NoError(t, err, "A took its lock again after the kills")
}
