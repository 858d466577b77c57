package e2e_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/pgtest"
	"github.com/ferryq/ferry/internal/proctest"
)

// electionArgs run a worker with 1 s ticks, as every election test does.
func electionArgs(probe time.Duration) []string {
	return []string{"--leader-tick", "1s", "--standby-probe", probe.String()}
}

// holderSampler records the most holders of the election key seen in the
// database, every 50 ms, until the test ends.
func holderSampler(t *testing.T, pool *pgxpool.Pool) *atomic.Int32 {
	t.Helper()
	var most atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			var n int32
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
				AND classid = 0 AND objid = 911000001 AND objsubid = 1 AND granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
			if err == nil && n > most.Load() {
				most.Store(n)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &most
}

// leaderAndStandby starts two workers and returns them as (leader, standby)
// once one runs the leader runnables and the other is standing by.
func leaderAndStandby(t *testing.T, url string, probe time.Duration) (*proctest.Proc, *proctest.Proc) {
	t.Helper()
	a := startWorker(t, url, nil, electionArgs(probe)...)
	_, err := a.WaitForLineFunc(10*time.Second, logged("election: runnables started"))
	require.NoError(t, err)
	b := startWorker(t, url, nil, electionArgs(probe)...)
	_, err = b.WaitForLineFunc(10*time.Second, logged("election: standby"))
	require.NoError(t, err)
	_, err = a.WaitForLineFunc(0, logged("election: leader acquired", "pid", a.Pid()))
	require.NoError(t, err, "the first worker logs the acquisition with its pid")
	return a, b
}

func leaderPID(t *testing.T, url string) int {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, nil, "leader", "--json")
	require.Zero(t, code, stderr)
	var out struct {
		Leader *struct {
			PID             int    `json:"pid"`
			ApplicationName string `json:"application_name"`
		} `json:"leader"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	if out.Leader == nil {
		return 0
	}
	require.Contains(t, out.Leader.ApplicationName, ":"+strconv.Itoa(out.Leader.PID))
	return out.Leader.PID
}

func TestElection_KillLeader(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	most := holderSampler(t, pgtest.PoolFor(t, url))
	leader, standby := leaderAndStandby(t, url, time.Second)
	require.Equal(t, leader.Pid(), leaderPID(t, url))

	killed := time.Now()
	require.NoError(t, leader.Kill())
	// Probe (1 s) to find the lock free, then the deferral (one tick plus
	// its timeout) because the dead leader never resigned.
	_, err := standby.WaitForLineFunc(5*time.Second, logged("election: runnables started"))
	require.NoError(t, err)
	took := time.Since(killed)
	t.Logf("crash failover: %s", took)
	require.Less(t, took, 3500*time.Millisecond, "within probe + tick + tick timeout, and some slack for a loaded machine")

	_, err = standby.WaitForLineFunc(0, logged("election: failover acquired", "deferred", true))
	require.NoError(t, err, "a standby that takes over a crashed leader says so and defers")
	require.Equal(t, standby.Pid(), leaderPID(t, url))
	require.EqualValues(t, 1, most.Load(), "never two holders of the lock")
	stop(t, standby, stopTimeout)
	require.Zero(t, leaderPID(t, url), "a stopped leader leaves no holder")
}

func TestElection_SIGTERMHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	most := holderSampler(t, pgtest.PoolFor(t, url))
	// A 60 s probe: only the resignation notice can make this fast.
	leader, standby := leaderAndStandby(t, url, time.Minute)

	sent := time.Now()
	require.NoError(t, leader.Signal(syscall.SIGTERM))
	_, err := standby.WaitForLineFunc(5*time.Second, logged("election: runnables started"))
	require.NoError(t, err)
	took := time.Since(sent)
	t.Logf("graceful handover: %s", took)
	require.Less(t, took, time.Second)

	code, err := leader.Wait(stopTimeout)
	require.NoError(t, err)
	require.Zero(t, code)
	_, err = leader.WaitForLineFunc(0, logged("election: resigned"))
	require.NoError(t, err)
	_, err = standby.WaitForLineFunc(0, logged("election: failover acquired", "deferred", false))
	require.NoError(t, err, "the predecessor resigned, so no deferral")
	require.EqualValues(t, 1, most.Load())
}

func TestElection_TerminatedLockSessionDemotes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	most := holderSampler(t, pool)
	leader, standby := leaderAndStandby(t, url, time.Second)

	var backend int
	require.NoError(t, pool.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'ferry-leader:%:' || $1::text", strconv.Itoa(leader.Pid())).Scan(&backend))
	cut := time.Now()
	_, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", backend)
	require.NoError(t, err)

	_, err = leader.WaitForLineFunc(3*time.Second, logged("election: demoted"))
	require.NoError(t, err)
	took := time.Since(cut)
	t.Logf("demotion: %s", took)
	require.Less(t, took, 1500*time.Millisecond, "within one tick (plus the check's own time)")

	// Someone leads again: the standby or the demoted process, after the
	// deferral, since the lost term was never resigned.
	require.Eventually(t, func() bool { return leaderPID(t, url) != 0 }, 6*time.Second, 100*time.Millisecond)
	require.Contains(t, []int{leader.Pid(), standby.Pid()}, leaderPID(t, url))
	require.EqualValues(t, 1, most.Load(), "never two holders of the lock")
}

func TestElection_FailureNeverBlocksJobs(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	// The lock's database is unreachable: the worker stays standby, says
	// why, and works jobs all the same.
	electionURL := "postgres://ferry:ferry@127.0.0.1:" + strconv.Itoa(freePort(t)) + "/ferry?sslmode=disable"
	w := startWorker(t, url, []string{"FERRY_LOG_LEVEL=debug", "FERRY_ELECTION_DATABASE_URL=" + electionURL}, electionArgs(time.Second)...)
	_, err := w.WaitForLineFunc(10*time.Second, logged("election: probe failed; staying standby"))
	require.NoError(t, err)
	id := enqueueID(t, url, "ferry.noop")
	_, err = w.WaitForLineFunc(10*time.Second, logged("job: completed", "job_id", id))
	require.NoError(t, err)
	_, err = w.WaitForLineFunc(0, logged("election: runnables started"))
	require.Error(t, err, "nothing ran as leader")
	stop(t, w, stopTimeout)
}
