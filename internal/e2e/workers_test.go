package e2e_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// workersQueue is worked by the second worker of TestWorkers only, so
// that the test knows which worker runs its job.
const workersQueue = "workers_list"

// workersByClient runs enqueue workers --json and indexes the answer.
func workersByClient(t *testing.T, url string, args ...string) map[string]liveness.WorkerInfo {
	t.Helper()
	var ws []liveness.WorkerInfo
	enqueueOK(t, url, &ws, append([]string{"workers"}, args...)...)
	out := map[string]liveness.WorkerInfo{}
	for _, w := range ws {
		out[w.ClientID] = w
	}
	require.Len(t, out, len(ws), "one entry per worker")
	return out
}

// tableRow returns the fields of the line of a table that starts with the
// client id.
func tableRow(t *testing.T, table, clientID string) []string {
	t.Helper()
	for line := range strings.SplitSeq(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == clientID {
			return f
		}
	}
	t.Fatalf("no row for %s in\n%s", clientID, table)
	return nil
}

// enqueue workers, with and without --json, through a worker's whole life:
// alive with its running job, killed and declared dead with what was
// rescued from it, stopped gracefully.
func TestWorkers(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	begun := time.Now()

	requireBadInput(t, url, `workers takes no arguments, got "extra"`, "workers", "extra")
	requireBadInput(t, url, `invalid value "soon" for flag -since`, "workers", "--since", "soon")
	requireBadInput(t, url, "--since 0s: must be a positive duration", "workers", "--since", "0s")

	stdout, stderr, code := enqueue(t, url, nil, "workers")
	require.Zero(t, code, stderr)
	require.Equal(t, "no worker alive, and none dead or stopped in the last 1h0m0s\n", stdout)
	require.Empty(t, workersByClient(t, url))

	// a leads (and so rescues); b alone works workersQueue.
	a := startWorker(t, url, nil, "--leader-tick", "1s", "--standby-probe", "1s")
	_, err := a.WaitForLineFunc(10*time.Second, logtest.Logged("election: runnables started"))
	require.NoError(t, err)
	aID := workerClientID(t, a)
	b := startWorker(t, url, []string{"FERRY_QUEUES=" + workersQueue + "=1"}, "--leader-tick", "1s", "--standby-probe", "1s")
	bID := workerClientID(t, b)
	jobID := enqueueID(t, url, "ferry.noop", "--args", `{"sleep":"10m"}`, "--queue", workersQueue)
	waitJobState(t, pool, jobID, "running", 10*time.Second)

	ws := workersByClient(t, url)
	require.Len(t, ws, 2)
	for id, p := range map[string]*proctest.Proc{aID: a, bID: b} {
		w := ws[id]
		require.Equal(t, liveness.StateAlive, w.State, id)
		require.Equal(t, p.Pid(), w.PID, id)
		require.NotEmpty(t, w.Hostname, id)
		requireBetween(t, begun, w.StartedAt, id)
		require.Nil(t, w.DeadAt, id)
		require.Nil(t, w.StoppedAt, id)
	}
	require.Zero(t, ws[aID].RunningJobs)
	require.Equal(t, 1, ws[bID].RunningJobs, "b runs the job")

	stdout, stderr, code = enqueue(t, url, nil, "workers")
	require.Zero(t, code, stderr)
	require.Empty(t, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 3, stdout)
	require.Regexp(t, `^CLIENT ID +HOST +PID +STATE +SINCE +LAST SEEN +RUNNING +ENDED +RESCUED$`, lines[0])
	stamp := `\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ`
	require.Regexp(t, fmt.Sprintf(`^%s \S+ %d alive %s %s 1 - -$`, regexp.QuoteMeta(bID), b.Pid(), stamp, stamp),
		strings.Join(tableRow(t, stdout, bID), " "), "b's row: alive since, last seen, one running job")
	require.Equal(t, []string{"alive", "0", "-", "-"}, rowTail(tableRow(t, stdout, aID)))

	// kill -9: the leader declares b dead within a tick and takes its job back.
	killed := time.Now()
	require.NoError(t, b.Kill())
	_, err = a.WaitForLineFunc(10*time.Second, logtest.Logged("rescue: orphaned jobs rescued", "worker", bID, "count", 1))
	require.NoError(t, err)
	require.Equal(t, "available", getJob(t, pool, jobID).State, "nobody else works its queue")

	ws = workersByClient(t, url)
	require.Equal(t, liveness.StateAlive, ws[aID].State)
	dead := ws[bID]
	require.Equal(t, liveness.StateDead, dead.State)
	require.NotNil(t, dead.DeadAt)
	requireBetween(t, killed, *dead.DeadAt, "dead_at")
	require.Equal(t, 1, dead.RescuedJobs)
	require.Zero(t, dead.RunningJobs)

	stdout, stderr, code = enqueue(t, url, nil, "workers")
	require.Zero(t, code, stderr)
	require.Equal(t, []string{"dead", "0", dead.DeadAt.UTC().Format("2006-01-02 15:04:05Z"), "1"},
		rowTail(tableRow(t, stdout, bID)), "when, and what was rescued")

	// The admin console of a shows the same.
	var api []liveness.WorkerInfo
	require.NoError(t, json.Unmarshal([]byte(adminGet(t, adminAddr(t, a), "/admin/api/workers")), &api))
	require.Len(t, api, 2)
	require.Equal(t, aID, api[0].ClientID, "alive first")
	require.Equal(t, liveness.StateAlive, api[0].State)
	require.Equal(t, bID, api[1].ClientID)
	require.Equal(t, liveness.StateDead, api[1].State)
	require.Equal(t, 1, api[1].RescuedJobs)
	page := adminGet(t, adminAddr(t, a), "/admin/workers")
	require.Contains(t, page, fmt.Sprintf(`<tr data-worker="%s" data-state="alive">`, aID))
	require.Contains(t, page, fmt.Sprintf(`<tr data-worker="%s" data-state="dead">`, bID))

	// A graceful stop: a is stopped, not dead.
	stop(t, a, stopTimeout)
	ws = workersByClient(t, url)
	require.Equal(t, liveness.StateStopped, ws[aID].State)
	require.NotNil(t, ws[aID].StoppedAt)
	require.Equal(t, liveness.StateDead, ws[bID].State)

	// Ended longer ago than --since: not listed.
	time.Sleep(10 * time.Millisecond)
	stdout, stderr, code = enqueue(t, url, nil, "workers", "--since", "10ms")
	require.Zero(t, code, stderr)
	require.Equal(t, "no worker alive, and none dead or stopped in the last 10ms\n", stdout)
}

// rowTail is what a workers table row says of the worker's end, from its
// fields (client id, host, pid, state, since and last seen as a date and
// a time each, running, ended as a date and a time or -, rescued): state,
// running jobs, ended, rescued.
func rowTail(f []string) []string {
	return []string{f[3], f[8], strings.Join(f[9:len(f)-1], " "), f[len(f)-1]}
}

// requireBetween: at is a time of this test's, after since and not after
// now (the test's own clock and the database's are the machine's).
func requireBetween(t *testing.T, since, at time.Time, what string) {
	t.Helper()
	require.False(t, at.Before(since.Truncate(time.Microsecond)), "%s %s is before %s", what, at, since)
	require.False(t, at.After(time.Now()), "%s %s is in the future", what, at)
}
