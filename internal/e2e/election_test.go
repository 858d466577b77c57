package e2e_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
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
	_, err := a.WaitForLineFunc(10*time.Second, logtest.Logged("election: runnables started"))
	require.NoError(t, err)
	b := startWorker(t, url, nil, electionArgs(probe)...)
	_, err = b.WaitForLineFunc(10*time.Second, logtest.Logged("election: standby"))
	require.NoError(t, err)
	_, err = a.WaitForLineFunc(0, logtest.Logged("election: leader acquired", "pid", a.Pid()))
	require.NoError(t, err, "the first worker logs the acquisition with its pid")
	return a, b
}

func leaderPID(t *testing.T, url string) int {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, nil, "leader", "--json")
	var out struct {
		Leader *struct {
			PID             int    `json:"pid"`
			ApplicationName string `json:"application_name"`
		} `json:"leader"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	if out.Leader == nil {
		require.Equal(t, 1, code, "no leader is exit code 1; stderr: %s", stderr)
		return 0
	}
	require.Zero(t, code, stderr)
	require.Contains(t, out.Leader.ApplicationName, ":"+strconv.Itoa(out.Leader.PID))
	return out.Leader.PID
}

func TestElection_KillLeader(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	most := holderSampler(t, pgtest.PoolFor(t, url))
	// An hour-long probe: only the standby's wait on the lock can notice
	// the crash.
	leader, standby := leaderAndStandby(t, url, time.Hour)
	require.Equal(t, leader.Pid(), leaderPID(t, url))

	killed := time.Now()
	require.NoError(t, leader.Kill())
	// The server ends the dead session and grants the lock to the waiting
	// standby, which defers one tick plus its timeout because the dead
	// leader never resigned.
	_, err := standby.WaitForLineFunc(15*time.Second, logtest.Logged("election: runnables started"))
	require.NoError(t, err)
	t.Logf("crash failover: %s", time.Since(killed))

	_, err = standby.WaitForLineFunc(0, logtest.Logged("election: failover acquired", "deferred", true, "previous_resigned", false))
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
	// An hour-long probe: only the standby's wait on the lock can make the
	// handover prompt.
	leader, standby := leaderAndStandby(t, url, time.Hour)

	sent := time.Now()
	require.NoError(t, leader.Signal(syscall.SIGTERM))
	_, err := standby.WaitForLineFunc(5*time.Second, logtest.Logged("election: runnables started"))
	require.NoError(t, err)
	t.Logf("graceful handover: %s", time.Since(sent))

	code, err := leader.Wait(stopTimeout)
	require.NoError(t, err)
	require.Zero(t, code)
	_, err = leader.WaitForLineFunc(0, logtest.Logged("election: resigned"))
	require.NoError(t, err)
	_, err = standby.WaitForLineFunc(0, logtest.Logged("election: failover acquired", "deferred", false, "previous_resigned", true))
	require.NoError(t, err, "the predecessor resigned, so no deferral")
	require.EqualValues(t, 1, most.Load())
}

// TestElection_SIGTERMDuringTicks stops the leader a hundred times with a
// 50 ms tick, so that signals land while ticks are in flight: every
// successor must find its predecessor resigned.
func TestElection_SIGTERMDuringTicks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	most := holderSampler(t, pool)
	// A check may take a second on a loaded machine without costing the
	// term: only the SIGTERMs should end terms here.
	args := []string{"--leader-tick", "50ms", "--leader-tick-timeout", "1s", "--standby-probe", "1h", "--admin-addr", "off"}
	start := func() *proctest.Proc {
		p := proctest.Start(t, bins(t).worker, env(url), append([]string{"run"}, args...)...)
		_, err := p.WaitForLineFunc(startTimeout, logtest.Logged("ferry: started"))
		require.NoError(t, err)
		return p
	}
	leader := start()
	_, err := leader.WaitForLineFunc(10*time.Second, logtest.Logged("election: runnables started"))
	require.NoError(t, err)
	standby := start()
	_, err = standby.WaitForLineFunc(10*time.Second, logtest.Logged("election: standby"))
	require.NoError(t, err)

	const rounds = 100
	for i := range rounds {
		// Land the signal anywhere in a tick.
		time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
		require.NoError(t, leader.Signal(syscall.SIGTERM))
		_, err := standby.WaitForLineFunc(10*time.Second, logtest.Logged("election: runnables started"))
		require.NoError(t, err, "round %d: the standby did not take over", i)
		code, err := leader.Wait(stopTimeout)
		require.NoError(t, err)
		require.Zero(t, code, "round %d: %s", i, leader.Stderr())
		_, err = leader.WaitForLineFunc(0, logtest.Logged("election: resigned"))
		require.NoError(t, err, "round %d: the leader did not resign cleanly:\n%s", i, leader.Stdout())
		_, err = standby.WaitForLineFunc(0, logtest.Logged("election: failover acquired", "previous_resigned", true, "deferred", false))
		require.NoError(t, err, "round %d: the successor did not see its predecessor resigned:\n%s", i, standby.Stdout())
		leader, standby = standby, start()
		_, err = standby.WaitForLineFunc(10*time.Second, logtest.Logged("election: standby"))
		require.NoError(t, err)
	}

	// The table agrees: every term but the last (still leading) resigned.
	var terms, resigned int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(resigned_at) FROM ferry_leader_term`).Scan(&terms, &resigned))
	require.Equal(t, rounds+1, terms)
	require.Equal(t, rounds, resigned)
	require.EqualValues(t, 1, most.Load(), "never two holders of the lock")
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

	_, err = leader.WaitForLineFunc(5*time.Second, logtest.Logged("election: demoted"))
	require.NoError(t, err)
	t.Logf("demotion: %s", time.Since(cut))

	// Someone leads again: the standby or the demoted process, after the
	// deferral, since the lost term was never resigned.
	require.Eventually(t, func() bool { return leaderPID(t, url) != 0 }, 6*time.Second, 100*time.Millisecond)
	require.Contains(t, []int{leader.Pid(), standby.Pid()}, leaderPID(t, url))
	require.EqualValues(t, 1, most.Load(), "never two holders of the lock")
}

// TestElection_SessionDatabaseUnreachable: the session database (the
// leader lock's and the worker's liveness) is unreachable. A worker that
// cannot register its liveness must not work jobs (a job it ran could be
// rescued from under it, and the fence refuses a worker's sessions with no
// row): it works none and stops with one line, exit code 1.
func TestElection_SessionDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	id := enqueueID(t, url, "ferry.noop")
	sessionURL := "postgres://ferry:ferry@127.0.0.1:" + strconv.Itoa(freePort(t)) + "/ferry?sslmode=disable"
	stdout, stderr, code := runWorker(t, env(url, "FERRY_ELECTION_DATABASE_URL="+sessionURL), 60*time.Second, append([]string{"run"}, electionArgs(time.Second)...)...)
	require.Equal(t, 1, code, "stdout: %s\nstderr: %s", stdout, stderr)
	require.Contains(t, lastLine(stderr), "liveness: cannot register this worker, so it may not work jobs")
	require.NotContains(t, stderr, "job: completed")
	pool := pgtest.PoolFor(t, url)
	require.Equal(t, "available", getJob(t, pool, id).State, "no job was worked")
}
