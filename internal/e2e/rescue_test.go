package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// ferry's rescue with real processes: a worker killed under its jobs has
// them taken back by the leader and worked elsewhere; a job that kills its
// worker is discarded after FERRY_MAX_ORPHANED deaths; a worker stopped
// past its lease is declared dead and cannot overwrite the attempt that
// replaced its own, and one stopped within its lease keeps its job. No test
// here writes river_job: every change of state is ferry's or River's.

const (
	// rescueWorkerPkg is ferry's worker command with the kinds test.sleep
	// and test.crash (see its doc).
	rescueWorkerPkg = "./internal/e2e/testdata/rescueworker"
	// rescueWatchdog stops a test whose rescue never comes; rescues take
	// a tick or two (plus a failover) at the 1 s ticks of these tests.
	rescueWatchdog = 60 * time.Second
	// crashExitCode is the exit code of a rescueworker that worked
	// test.crash.
	crashExitCode = 3
)

// rescueArgs are the arguments of `rescueworker run` working queues: 1 s
// ticks with a 300 ms tick timeout, so that a worker's liveness lease (three
// ticks plus the timeout) is 3.3 s, and jobs that may run for an hour.
func rescueArgs(queues string) []string {
	return []string{"run", "--admin-addr", "off", "--queues", queues,
		"--leader-tick", "1s", "--leader-tick-timeout", "300ms", "--standby-probe", "1s",
		"--job-timeout", "2h"}
}

// launchRescueWorker starts `rescueworker run` on url working queues, with
// a shutdown grace of 1 s unless extraEnv sets FERRY_SHUTDOWN_GRACE, and
// returns it with its River client id (from its "liveness: worker
// registered" line, written before it fetches any job), without waiting
// for it to have started.
func launchRescueWorker(t *testing.T, url, queues string, extraEnv ...string) (*proctest.Proc, string) {
	t.Helper()
	bin := proctest.Build(t, rescueWorkerPkg)[rescueWorkerPkg]
	p := proctest.Start(t, bin, env(url, append([]string{"FERRY_SHUTDOWN_GRACE=1s"}, extraEnv...)...), rescueArgs(queues)...)
	return p, workerClientID(t, p)
}

// workerClientID waits for the "liveness: worker registered" line of a
// ferry process and returns the River client id it names: the worker's
// name in attempted_by, ferry_worker and the rescuer's log.
func workerClientID(t *testing.T, p *proctest.Proc) string {
	t.Helper()
	line, err := p.WaitForLineFunc(startTimeout, logtest.Logged("liveness: worker registered"))
	require.NoError(t, err)
	var rec struct {
		ClientID string `json:"client_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
	require.NotEmpty(t, rec.ClientID, line)
	return rec.ClientID
}

// startRescueWorker is launchRescueWorker, then waits for the worker's
// "ferry: started" line and for it to lead (leading) or stand by.
func startRescueWorker(t *testing.T, url, queues string, leading bool, extraEnv ...string) (*proctest.Proc, string) {
	t.Helper()
	p, id := launchRescueWorker(t, url, queues, extraEnv...)
	_, err := p.WaitForLineFunc(startTimeout, logtest.Logged("ferry: started"))
	require.NoError(t, err)
	role := "election: standby"
	if leading {
		role = "election: runnables started"
	}
	_, err = p.WaitForLineFunc(startTimeout, logtest.Logged(role))
	require.NoError(t, err)
	return p, id
}

// rescuedJob is what the rescue tests read back from river_job.
type rescuedJob struct {
	State       string
	Attempt     int
	AttemptedBy []string
	Errors      []string // each attempt's error, oldest first
	Orphaned    int      // metadata.ferry_orphaned: deaths of its workers
}

func getRescuedJob(t *testing.T, pool *pgxpool.Pool, id int64) rescuedJob {
	t.Helper()
	var j rescuedJob
	err := pool.QueryRow(context.Background(), `
		SELECT state::text, attempt, coalesce(attempted_by, '{}'),
		       array(SELECT e->>'error' FROM unnest(errors) e),
		       coalesce((metadata->>'ferry_orphaned')::int, 0)
		FROM river_job WHERE id = $1`, id).
		Scan(&j.State, &j.Attempt, &j.AttemptedBy, &j.Errors, &j.Orphaned)
	require.NoError(t, err, "read job %d", id)
	return j
}

// waitRescuedJob polls job id every pollEvery until ok holds, and returns it.
func waitRescuedJob(t *testing.T, pool *pgxpool.Pool, id int64, what string, ok func(rescuedJob) bool) rescuedJob {
	t.Helper()
	deadline := time.Now().Add(rescueWatchdog)
	for {
		j := getRescuedJob(t, pool, id)
		if ok(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: not %s after %s; last seen %+v", id, what, rescueWatchdog, j)
		}
		time.Sleep(pollEvery)
	}
}

// runningOn reports whether a job is running an attempt of the worker
// clientID's, after the attempts of workers before.
func runningOn(before []string, clientID string) func(rescuedJob) bool {
	return func(j rescuedJob) bool {
		return j.State == "running" && slices.Equal(j.AttemptedBy, append(slices.Clone(before), clientID))
	}
}

// waitRescue waits for the line "rescue: orphaned jobs rescued" about the
// worker clientID from whichever of procs leads, and returns the process
// that wrote it.
func waitRescue(t *testing.T, clientID string, procs []*proctest.Proc, attrs ...any) *proctest.Proc {
	t.Helper()
	match := logtest.Logged("rescue: orphaned jobs rescued", append([]any{"worker", clientID}, attrs...)...)
	deadline := time.Now().Add(rescueWatchdog)
	for {
		for _, p := range procs {
			if _, err := p.WaitForLineFunc(0, match); err == nil {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader logged the rescue of worker %s (%v) in %s", clientID, attrs, rescueWatchdog)
		}
		time.Sleep(pollEvery)
	}
}

// deadAt reads the ferry_worker row of clientID: whether the rescuer
// declared it dead, and how many jobs it took back from it.
func deadAt(t *testing.T, pool *pgxpool.Pool, clientID string) (dead bool, rescued int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT dead_at IS NOT NULL, rescued_jobs FROM ferry_worker WHERE client_id = $1`, clientID).Scan(&dead, &rescued))
	return dead, rescued
}

// TestRescue_KillWorkerRunningJobs kills -9 a worker running 20 jobs whose
// first attempt sleeps an hour and any later one completes at once: the
// leader takes every one back in one pass, and another worker completes
// each on its second attempt. The killed worker is a standby, or the leader
// itself (then its successor rescues after the failover).
func TestRescue_KillWorkerRunningJobs(t *testing.T) {
	t.Parallel()
	const n = 20

	run := func(t *testing.T, killLeader bool) {
		url := pgtest.NewDatabase(t, true)
		pool := pgtest.PoolFor(t, url)

		var procs []*proctest.Proc
		if !killLeader {
			// A leader that works none of the jobs' queue.
			leader, _ := startRescueWorker(t, url, "spare=1", true)
			procs = append(procs, leader)
		}
		a, aID := startRescueWorker(t, url, "default=20", killLeader)
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = enqueueID(t, url, "test.sleep", "--args", `{"sleeps":["1h","0s"]}`)
		}
		for _, id := range ids {
			waitRescuedJob(t, pool, id, "running on A", runningOn(nil, aID))
		}
		// B starts once A holds every job, so that only a rescue can give
		// B one.
		b, bID := startRescueWorker(t, url, "default=20", false)
		procs = append(procs, b)

		require.NoError(t, a.Kill())
		code, err := a.Wait(stopTimeout)
		require.NoError(t, err)
		require.Equal(t, 137, code, "killed by SIGKILL")

		rescuer := waitRescue(t, aID, procs, "count", n, "available", n, "poison", 0, "exhausted", 0)
		if killLeader {
			require.Same(t, b, rescuer, "A's successor as leader rescued its jobs")
		}
		for _, id := range ids {
			j := waitRescuedJob(t, pool, id, "completed", func(j rescuedJob) bool { return j.State == "completed" })
			require.Equal(t, 2, j.Attempt, "job %d: the killed attempt counts", id)
			require.Equal(t, []string{aID, bID}, j.AttemptedBy, "job %d: A's attempt, then B's", id)
			require.Len(t, j.Errors, 1, "job %d", id)
			require.Contains(t, j.Errors[0], "the worker running this job died ("+aID+")")
			require.Equal(t, 1, j.Orphaned, "job %d: one death counted", id)
		}
		dead, rescued := deadAt(t, pool, aID)
		require.True(t, dead, "A is declared dead")
		require.Equal(t, n, rescued)
		require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_worker WHERE dead_at IS NOT NULL`), "nobody else")
	}

	t.Run("Standby", func(t *testing.T) {
		t.Parallel()
		run(t, false)
	})
	t.Run("Leader", func(t *testing.T) {
		t.Parallel()
		run(t, true)
	})
}

// TestRescue_KillRiverLeader kills -9 the worker whose River client leads
// River (River's scheduler, periodic jobs and cleaners run there): the
// rescue resigns River's leadership for it, and the other worker's River
// client is elected while the dead leader's term still ran, where River
// alone would wait for the term to run out (15 s) and the next election
// attempt (5 s more): so long no snoozed, retried or scheduled job would
// become available.
func TestRescue_KillRiverLeader(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	a, aID := startRescueWorker(t, url, "default=1", true)
	waitRiverLeader(t, pool, aID)
	b, bID := startRescueWorker(t, url, "default=1", false)
	term := waitRiverLeader(t, pool, aID) // its latest term, just before the kill

	require.NoError(t, a.Kill())
	code, err := a.Wait(stopTimeout)
	require.NoError(t, err)
	require.Equal(t, 137, code, "killed by SIGKILL")
	_, err = b.WaitForLineFunc(rescueWatchdog, logtest.Logged("rescue: River's leadership of the dead worker resigned", "worker", aID))
	require.NoError(t, err, "A's successor as leader resigned A's River leadership")
	next := waitRiverLeader(t, pool, bID)
	require.True(t, next.ElectedAt.Before(term.ExpiresAt),
		"B's River client elected at %s, while A's term ran until %s: on A's resignation, not on its expiry", next.ElectedAt, term.ExpiresAt)
}

// TestRescue_KillLeaderRescuedWhileSuccessorDefers kills -9 the ferry
// leader while it runs jobs: its successor rescues them while it still
// defers to it (Tick + TickTimeout, 6 s here), not after (the rescue's
// writes are fenced by the term, so it need not wait), and B's sessions
// being older than that deferral shows the server did not just end every
// session (RescuerConfig.Settle).
func TestRescue_KillLeaderRescuedWhileSuccessorDefers(t *testing.T) {
	t.Parallel()
	const n = 5
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	bin := proctest.Build(t, rescueWorkerPkg)[rescueWorkerPkg]
	start := func(leading bool) (*proctest.Proc, string) {
		p := proctest.Start(t, bin, env(url, "FERRY_SHUTDOWN_GRACE=1s"), "run", "--admin-addr", "off", "--queues", "default=5",
			"--leader-tick", "5s", "--leader-tick-timeout", "1s", "--standby-probe", "1s", "--rescue-interval", "200ms", "--job-timeout", "2h")
		id := workerClientID(t, p)
		role := "election: standby"
		if leading {
			role = "election: runnables started"
		}
		_, err := p.WaitForLineFunc(startTimeout, logtest.Logged(role))
		require.NoError(t, err)
		return p, id
	}
	a, aID := start(true)
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = enqueueID(t, url, "test.sleep", "--args", `{"sleeps":["1h","0s"]}`)
	}
	for _, id := range ids {
		waitRescuedJob(t, pool, id, "running on A", runningOn(nil, aID))
	}
	b, bID := start(false)
	// B's sessions older than the deferral: the server has not ended
	// every session since.
	deadline := time.Now().Add(rescueWatchdog)
	for count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND application_name LIKE '%' || $1 AND backend_start < now() - interval '7 s'`, liveness.SessionTag(bID)) == 0 {
		require.False(t, time.Now().After(deadline), "no session of B is 7 s old after %s", rescueWatchdog)
		time.Sleep(pollEvery)
	}

	require.NoError(t, a.Kill())
	code, err := a.Wait(stopTimeout)
	require.NoError(t, err)
	require.Equal(t, 137, code, "killed by SIGKILL")
	waitRescue(t, aID, []*proctest.Proc{b}, "count", n)
	_, err = b.WaitForLineFunc(rescueWatchdog, logtest.Logged("election: runnables started"))
	require.NoError(t, err, "B leads once its deferral is over")

	var deferred bool
	var deadAt, startedAt time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT t.started_at, w.dead_at,
			EXISTS (SELECT 1 FROM ferry_leader_term p WHERE p.term < t.term AND p.resigned_at IS NULL)
		FROM ferry_leader_term t, ferry_worker w WHERE w.client_id = $1 ORDER BY t.term DESC LIMIT 1`, aID).Scan(&startedAt, &deadAt, &deferred))
	require.True(t, deferred, "A's term ended unresigned: B deferred to it")
	require.True(t, deadAt.Before(startedAt), "A declared dead and its jobs rescued at %s, before B's term started at %s", deadAt, startedAt)
	for _, id := range ids {
		j := waitRescuedJob(t, pool, id, "completed", func(j rescuedJob) bool { return j.State == "completed" })
		require.Equal(t, []string{aID, bID}, j.AttemptedBy, "job %d: A's attempt, then B's", id)
	}
}

// riverLeader is a row of river_leader.
type riverLeader struct {
	ElectedAt, ExpiresAt time.Time
}

// waitRiverLeader waits until River's leader is the River client clientID
// and returns its term.
func waitRiverLeader(t *testing.T, pool *pgxpool.Pool, clientID string) riverLeader {
	t.Helper()
	deadline := time.Now().Add(rescueWatchdog)
	for {
		var l riverLeader
		err := pool.QueryRow(context.Background(), `SELECT elected_at, expires_at FROM river_leader WHERE leader_id = $1`, clientID).Scan(&l.ElectedAt, &l.ExpiresAt)
		if err == nil {
			return l
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		if time.Now().After(deadline) {
			t.Fatalf("%s did not lead River in %s", clientID, rescueWatchdog)
		}
		time.Sleep(pollEvery)
	}
}

// TestRescue_PoisonJobDiscarded runs a job that exits its worker's process
// on workers started one after another, with FERRY_MAX_ORPHANED=3: the
// leader (which does not work the job's queue) makes it available after
// the first and second deaths and discards it after the third, as a dead
// letter that `enqueue dead retry` makes available again.
func TestRescue_PoisonJobDiscarded(t *testing.T) {
	t.Parallel()
	const maxOrphaned = 3
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	maxEnv := "FERRY_MAX_ORPHANED=" + strconv.Itoa(maxOrphaned)

	leader, _ := startRescueWorker(t, url, "default=1", true, maxEnv)
	id := enqueueID(t, url, "test.crash")
	var crashed []string
	for death := 1; death <= maxOrphaned; death++ {
		w, wID := launchRescueWorker(t, url, "crash=1", maxEnv)
		code, err := w.Wait(rescueWatchdog)
		require.NoError(t, err)
		require.Equal(t, crashExitCode, code, "death %d: the job exited the process; stderr:\n%s", death, w.Stderr())
		require.Contains(t, w.Stderr(), "test.crash: exiting the process")
		crashed = append(crashed, wID)

		poison := 0
		if death == maxOrphaned {
			poison = 1
		}
		require.Same(t, leader, waitRescue(t, wID, []*proctest.Proc{leader}, "count", 1, "available", 1-poison, "poison", poison))
		j := getRescuedJob(t, pool, id)
		require.Equal(t, crashed, j.AttemptedBy, "death %d", death)
		require.Equal(t, death, j.Attempt)
		require.Equal(t, death, j.Orphaned)
		require.Len(t, j.Errors, death)
		if death < maxOrphaned {
			require.Equal(t, "available", j.State, "death %d: available for the next worker", death)
			require.Contains(t, j.Errors[death-1], "the worker running this job died ("+wID+")")
			continue
		}
		require.Equal(t, "discarded", j.State, "death %d: poison", death)
		require.Equal(t, fmt.Sprintf("ferry: the worker died running this job %d times", maxOrphaned), j.Errors[death-1])
	}

	var dead []jobOut
	enqueueOK(t, url, &dead, "dead", "list")
	require.Len(t, dead, 1)
	require.Equal(t, id, dead[0].ID)
	require.Equal(t, "test.crash", dead[0].Kind)
	require.Equal(t, "crash", dead[0].Queue)
	require.NotNil(t, dead[0].FinalizedAt)
	require.Len(t, dead[0].Errors, maxOrphaned)
	require.Equal(t, "ferry: the worker died running this job 3 times", dead[0].Errors[maxOrphaned-1].Error)

	var retried deadOut
	enqueueOK(t, url, &retried, "dead", "retry", "--yes", strconv.FormatInt(id, 10))
	require.Equal(t, deadOut{Count: 1, IDs: []int64{id}, Skipped: []actionOut{}}, retried)
	j := getRescuedJob(t, pool, id)
	require.Equal(t, "available", j.State, "a poison job is requeued like any dead letter")
	require.Len(t, j.Errors, maxOrphaned, "its history kept")
	stop(t, leader, stopTimeout)
}

// stopPastTheLease starts a leader that works no job and a worker A
// (with extraEnv), enqueues test.sleep with args, and once A runs it stops
// A with SIGSTOP; then starts a worker B, so that only a rescue can give B
// the job, waits for the leader to rescue it from A and for B to run it,
// and continues A with SIGCONT. It returns A, the ids of A and B, and the
// job's id.
func stopPastTheLease(t *testing.T, args string, extraEnv ...string) (pool *pgxpool.Pool, a *proctest.Proc, aID, bID string, id int64) {
	t.Helper()
	url := pgtest.NewDatabase(t, true)
	pool = pgtest.PoolFor(t, url)
	leader, _ := startRescueWorker(t, url, "spare=1", true)
	a, aID = startRescueWorker(t, url, "default=1", false, extraEnv...)
	id = enqueueID(t, url, "test.sleep", "--args", args)
	waitRescuedJob(t, pool, id, "running on A", runningOn(nil, aID))
	require.NoError(t, a.Signal(syscall.SIGSTOP))
	b, bID := startRescueWorker(t, url, "default=1", false)

	waitRescue(t, aID, []*proctest.Proc{leader, b}, "count", 1, "available", 1)
	waitRescuedJob(t, pool, id, "running on B", runningOn([]string{aID}, bID))
	require.NoError(t, a.Signal(syscall.SIGCONT))
	return pool, a, aID, bID, id
}

// requireBsAttemptStands: job id runs B's attempt, the second, with one
// error, the rescue's from A: nothing A did once continued overwrote it.
func requireBsAttemptStands(t *testing.T, pool *pgxpool.Pool, id int64, aID, bID string) {
	t.Helper()
	j := getRescuedJob(t, pool, id)
	require.Equal(t, "running", j.State, "A's late outcome did not overwrite B's attempt")
	require.Equal(t, 2, j.Attempt)
	require.Equal(t, []string{aID, bID}, j.AttemptedBy)
	require.Len(t, j.Errors, 1, "the rescue's, and nothing from A")
	require.Contains(t, j.Errors[0], "the worker running this job died ("+aID+")")
}

// TestRescue_StoppedWorker stops a worker with SIGSTOP while it runs a job,
// as CPU starvation or a paused VM would.
func TestRescue_StoppedWorker(t *testing.T) {
	t.Parallel()

	// Stopped past its lease (3.3 s), the worker's liveness session is
	// ended by the server, the leader declares it dead and B takes the job.
	// The first attempt's 2 s sleep ends while A is stopped (the server
	// ends A's session 3.3 s after its last heartbeat, at most a tick
	// before the stop, so at the earliest 2.3 s into it), so that A, once
	// continued, tries to complete the job that is B's now: the fence
	// refuses it, and A stops with exit code 1.
	t.Run("PastTheLease", func(t *testing.T) {
		t.Parallel()
		pool, a, aID, bID, id := stopPastTheLease(t, `{"sleeps":["2s","1h"]}`)
		code, err := a.Wait(rescueWatchdog)
		require.NoError(t, err)
		require.Equal(t, 1, code, "a worker declared dead exits 1; stderr:\n%s", a.Stderr())
		_, err = a.WaitForLineFunc(0, logtest.Logged("liveness: declared dead; stopping", "client_id", aID))
		require.NoError(t, err)
		_, err = a.WaitForLine(0, "this worker was declared dead")
		require.NoError(t, err, "Run's error says why")
		_, err = a.WaitForLineFunc(0, func(line string) bool {
			return strings.Contains(line, "Completer") && strings.Contains(line, "(SQLSTATE FR001)")
		})
		require.NoError(t, err, "A tried to complete its attempt, and the fence refused it")

		// A is gone: whatever it tried is over, and B's attempt stands.
		requireBsAttemptStands(t, pool, id, aID, bID)
		dead, rescued := deadAt(t, pool, aID)
		require.True(t, dead)
		require.Equal(t, 1, rescued)
	})

	// Stopped past its lease while its attempt still runs, the worker
	// learns when continued that the job is B's now: it cancels the
	// attempt at once rather than let it run on beside B's for the
	// shutdown grace (an hour here), and exits 1.
	t.Run("PastTheLeaseAttemptCutShort", func(t *testing.T) {
		t.Parallel()
		pool, a, aID, bID, id := stopPastTheLease(t, `{"sleeps":["1h","1h"]}`, "FERRY_SHUTDOWN_GRACE=1h")
		code, err := a.Wait(rescueWatchdog)
		require.NoError(t, err, "A still runs: its attempt was given the shutdown grace of an hour")
		require.Equal(t, 1, code, "a worker declared dead exits 1")
		_, err = a.WaitForLineFunc(0, func(line string) bool {
			var rec struct {
				Msg     string `json:"msg"`
				JobID   int64  `json:"job_id"`
				Attempt int    `json:"attempt"`
				Error   string `json:"error"`
			}
			return json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "job: ") &&
				rec.JobID == id && rec.Attempt == 1 && strings.Contains(rec.Error, "sleep of 1h0m0s cut short")
		})
		require.NoError(t, err, "A's attempt was cancelled")

		requireBsAttemptStands(t, pool, id, aID, bID)
	})

	// Stopped for a second, well within its lease, the worker keeps its
	// session and its job: nothing is rescued, and the job completes on it.
	t.Run("WithinTheLease", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		pool := pgtest.PoolFor(t, url)
		leader, _ := startRescueWorker(t, url, "spare=1", true)
		a, aID := startRescueWorker(t, url, "default=1", false)
		b, _ := startRescueWorker(t, url, "default=1", false)
		id := enqueueID(t, url, "test.sleep", "--args", `{"sleeps":["3s","0s"]}`)
		j := waitRescuedJob(t, pool, id, "running", func(j rescuedJob) bool { return j.State == "running" })
		// Whichever took it is A from here on.
		if j.AttemptedBy[0] != aID {
			a, b = b, a
			aID = j.AttemptedBy[0]
		}

		require.NoError(t, a.Signal(syscall.SIGSTOP))
		time.Sleep(time.Second)
		require.NoError(t, a.Signal(syscall.SIGCONT))

		j = waitRescuedJob(t, pool, id, "completed", func(j rescuedJob) bool { return j.State != "running" })
		require.Equal(t, "completed", j.State)
		require.Equal(t, 1, j.Attempt, "one attempt, A's")
		require.Equal(t, []string{aID}, j.AttemptedBy)
		require.Empty(t, j.Errors)
		require.Zero(t, j.Orphaned)
		dead, rescued := deadAt(t, pool, aID)
		require.False(t, dead, "A was never declared dead")
		require.Zero(t, rescued)
		for _, p := range []*proctest.Proc{leader, b} {
			_, err := p.WaitForLineFunc(0, logtest.Logged("rescue: orphaned jobs rescued"))
			require.Error(t, err, "%s rescued nothing", p)
		}
		stop(t, a, stopTimeout)
	})
}
