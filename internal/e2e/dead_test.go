package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
)

// deadWatchdog stops a test whose worker never gets to a job.
const deadWatchdog = 30 * time.Second

// TestDead_CancelledByFailure: an http.request answered 404 is cancelled by
// its worker, and is a dead letter with the reason: listed, requeued (and
// cancelled again by the next 404), discarded. Jobs cancelled by a person,
// queued or running, stay out of the dead letters.
func TestDead_CancelledByFailure(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	}))
	t.Cleanup(gone.Close)

	failed := enqueueID(t, url, "http.request", "--args", fmt.Sprintf(`{"url":%q}`, gone.URL+"/gone"))
	queued := enqueueID(t, url, "ferry.noop", "--in", "1h")
	running := enqueueID(t, url, "ferry.noop", "--args", `{"sleep":"1h"}`)
	_, stderr, code := enqueue(t, url, nil, "jobs", "cancel", fmt.Sprint(queued))
	require.Zero(t, code, stderr)

	w := startWorker(t, url, nil, "--job-timeout", "2h")
	require.Equal(t, 1, waitJobState(t, pool, failed, "cancelled", deadWatchdog).Errors, "the 404 is recorded")
	waitJobState(t, pool, running, "running", deadWatchdog)
	_, stderr, code = enqueue(t, url, nil, "jobs", "cancel", fmt.Sprint(running))
	require.Zero(t, code, stderr)
	require.Equal(t, 1, waitJobState(t, pool, running, "cancelled", deadWatchdog).Errors,
		"a person's cancel of a running job is recorded as an error too")

	var list []jobOut
	enqueueOK(t, url, &list, "dead", "list")
	require.Equal(t, []int64{failed}, listIDs(list), "only the job cancelled by a failure")
	require.Equal(t, "cancelled", list[0].State)
	require.Contains(t, list[0].Errors[0].Error, "status 404", "the reason")

	stdout, stderr, code := enqueue(t, url, nil, "dead", "list", "--kind", "http.request")
	require.Zero(t, code, stderr)
	require.Regexp(t, fmt.Sprintf(`(?m)^%d\s+http.request\s+default\s+cancelled\s+1/\d+\s+\S+ \S+\s+.*status 404`, failed), stdout)

	stdout, stderr, code = enqueue(t, url, nil, "dead", "discard", "--yes", fmt.Sprint(queued), fmt.Sprint(running))
	require.Equal(t, 1, code, stderr)
	require.Equal(t, fmt.Sprintf("discarded 0 dead letters\njob %d: cancelled by a person, not a dead letter\njob %d: cancelled by a person, not a dead letter\n", queued, running), stdout)
	require.Equal(t, "cancelled", getJob(t, pool, queued).State, "left alone")

	// requeue is retry: the job runs again, and the next 404 cancels it again.
	var out deadOut
	enqueueOK(t, url, &out, "dead", "requeue", "--yes", fmt.Sprint(failed))
	require.Equal(t, deadOut{Count: 1, IDs: []int64{failed}, Skipped: []actionOut{}}, out)
	require.Equal(t, 2, waitJobState(t, pool, failed, "cancelled", deadWatchdog).Errors, "worked again, cancelled again")

	enqueueOK(t, url, &out, "dead", "discard", "--all", "--yes")
	require.Equal(t, deadOut{Count: 1, IDs: []int64{failed}, Skipped: []actionOut{}}, out)
	require.Equal(t, 2, countJobs(t, pool), "the jobs cancelled by a person stay")
	stop(t, w, stopTimeout)
}

// TestJobs_CancelRunning: cancelling a running job requests it; the live
// worker sees the request and the job ends cancelled. A job whose worker was
// killed (and no leader is left to rescue it) is reported as such, with the
// way out: jobs rescue, which cancels it, since its cancellation was asked.
func TestJobs_CancelRunning(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	// The leader works queue slow; its rescuer passes once at start, then
	// every hour (--rescue-interval: the rescuer keeps its own pace, not the
	// leader tick's): a worker killed later stays lost, its job running.
	live := startWorker(t, url, nil, "--queues", "slow=1", "--leader-tick", "1h", "--rescue-interval", "1h", "--job-timeout", "2h")
	_, err := live.WaitForLineFunc(startTimeout, logtest.Logged("election: runnables started"))
	require.NoError(t, err)
	kept := enqueueID(t, url, "ferry.noop", "--args", `{"sleep":"1h"}`, "--queue", "slow")
	waitJobState(t, pool, kept, "running", deadWatchdog)

	orphaned := enqueueID(t, url, "ferry.noop", "--args", `{"sleep":"1h"}`, "--queue", "orphan")
	killed := startWorker(t, url, nil, append(electionArgs(time.Second), "--queues", "orphan=1", "--job-timeout", "2h")...)
	waitJobState(t, pool, orphaned, "running", deadWatchdog)
	require.NoError(t, killed.Kill())
	waitWorkerLost(t, url)

	// Retry of running jobs: refused, naming the worker and, for the lost
	// one, the way out.
	stdout, stderr, code := enqueue(t, url, nil, "jobs", "retry", fmt.Sprint(kept), fmt.Sprint(orphaned))
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "enqueue: 2 of 2 jobs not retried", oneLine(t, stderr))
	require.Regexp(t, fmt.Sprintf(`(?m)^%d\s+failed: running on alive worker \S+: not retried$`, kept), stdout)
	require.Regexp(t, fmt.Sprintf("(?m)^%d\\s+failed: running on lost worker \\S+, which will never finish it: not retried; take it back with `enqueue jobs rescue %d`$", orphaned, orphaned), stdout)

	// Cancel: requested of the live worker (exit 0, still running until it
	// sees it); refused for the lost one (exit 1), pointing at rescue.
	stdout, stderr, code = enqueue(t, url, nil, "jobs", "cancel", fmt.Sprint(kept), fmt.Sprint(orphaned), "--json")
	require.Equal(t, 1, code, stderr)
	var results []actionOut
	require.NoError(t, json.Unmarshal([]byte(stdout), &results), stdout)
	require.Len(t, results, 2)
	require.True(t, results[0].OK, "%+v", results[0])
	require.Equal(t, "running", results[0].State)
	require.Regexp(t, `^cancel requested: still running until alive worker \S+ sees it`, results[0].Note)
	require.False(t, results[1].OK)
	require.Equal(t, "running", results[1].State)
	require.Contains(t, results[1].Error, "cancel requested, but the job runs on lost worker")
	require.Contains(t, results[1].Error, fmt.Sprintf("`enqueue jobs rescue %d` takes it back and cancels it", orphaned))
	require.Equal(t, 1, waitJobState(t, pool, kept, "cancelled", deadWatchdog).Errors, "the live worker saw the request")
	require.Equal(t, "running", getJob(t, pool, orphaned).State, "nobody saw the request")

	// Rescue: the job whose cancellation was asked ends cancelled, not
	// available again.
	stdout, stderr, code = enqueue(t, url, nil, "jobs", "rescue", fmt.Sprint(orphaned))
	require.Zero(t, code, stderr)
	require.Regexp(t, fmt.Sprintf(`(?m)^%d\s+rescued \(cancelled\)$`, orphaned), stdout)
	j := getRescuedJob(t, pool, orphaned)
	require.Equal(t, "cancelled", j.State)
	require.Len(t, j.Errors, 1)
	require.Contains(t, j.Errors[0], "before it saw the cancellation")

	var list []jobOut
	enqueueOK(t, url, &list, "dead", "list")
	require.Empty(t, list, "jobs cancelled by a person are not dead letters")
	stop(t, live, stopTimeout)
}

// waitWorkerLost polls `enqueue workers` until one worker is lost.
func waitWorkerLost(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(deadWatchdog)
	for {
		var ws []struct {
			State string `json:"state"`
		}
		enqueueOK(t, url, &ws, "workers")
		for _, w := range ws {
			if w.State == "lost" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no worker lost after %s: %+v", deadWatchdog, ws)
		}
		time.Sleep(pollEvery)
	}
}
