package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
	"github.com/ferryq/ferry/workflow"
)

// orderYAML is docs/workflows.md's order: charge and reserve in parallel, then
// ship, then notify; reserve fails (a 404 cancels an http.request) until
// the test lets it succeed.
const orderYAML = `id: order-1234
name: order 1234
steps:
  - name: charge
    kind: ferry.noop
  - name: reserve
    kind: http.request
    args: {url: "URL"}
    max_attempts: 1
  - name: ship
    kind: ferry.noop
    depends_on: [charge, reserve]
  - name: notify
    kind: ferry.noop
    depends_on: [ship]
`

// TestWorkflow_CLI: a workflow added from a file runs on a worker process
// in dependency order; a failed step cancels what depends on it; show,
// list, retry and cancel work on it, and bad files are refused with one
// line and nothing written.
func TestWorkflow_CLI(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	dir := t.TempDir()

	// Bad files: one line, exit 2, nothing written.
	for name, body := range map[string]string{
		"cycle.yaml":   "name: w\nsteps:\n  - {name: a, kind: ferry.noop, depends_on: [b]}\n  - {name: b, kind: ferry.noop, depends_on: [a]}\n",
		"unknown.yaml": "name: w\nsteps:\n  - {name: a, kind: ferry.noop, depends_on: [nope]}\n",
		"dup.yaml":     "name: w\nsteps:\n  - {name: a, kind: ferry.noop}\n  - {name: a, kind: ferry.noop}\n",
		"kind.yaml":    "name: w\nsteps:\n  - {name: a, kind: no.such.kind}\n",
		"key.yaml":     "name: w\nstepz: []\n",
		"empty.yaml":   "name: w\nsteps: []\n",
	} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		stdout, stderr, code := enqueue(t, url, nil, "workflow", "add", "--file", path)
		require.Equal(t, 2, code, "%s: %s", name, stderr)
		require.Empty(t, stdout)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "%s: one line: %q", name, stderr)
	}
	requireBadInput(t, url, "needs --file", "workflow", "add")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry_workflow`).Scan(&n))
	require.Zero(t, n)
	require.Zero(t, countJobs(t, pool))

	var fail atomic.Bool
	fail.Store(true)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if fail.Load() {
			http.Error(w, "out of stock", http.StatusNotFound)
		}
	}))
	t.Cleanup(flaky.Close)
	srv := flaky.URL
	path := filepath.Join(dir, "order.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(orderYAML, "URL", srv, 1)), 0o600))
	stdout, stderr, code := enqueue(t, url, nil, "workflow", "add", "--file", path)
	require.Zero(t, code, stderr)
	require.Equal(t, "order-1234\n", stdout)
	stdout, _, code = enqueue(t, url, nil, "workflow", "add", "--file", path)
	require.Zero(t, code)
	require.Contains(t, stdout, "exists already")

	w := startWorker(t, url, nil)
	in := waitWorkflow(t, url, "order-1234", "failed")
	states := map[string]string{}
	for _, s := range in.Steps {
		states[s.Name] = s.State
	}
	require.Equal(t, map[string]string{"charge": "completed", "reserve": "cancelled", "ship": "cancelled", "notify": "cancelled"}, states)

	stdout, stderr, code = enqueue(t, url, nil, "workflow", "show", "order-1234")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "workflow order-1234 (order 1234): failed")
	require.Regexp(t, `(?m)^ship\s+\d+\s+ferry.noop\s+cancelled \(dependency\)\s+0/\d+\s+charge,reserve`, stdout)

	var list []workflow.Info
	enqueueOK(t, url, &list, "workflow", "list", "--state", "failed")
	require.Len(t, list, 1)
	require.Equal(t, workflow.Progress{Steps: 4, Finished: 4, Completed: 1, Failed: 1, Skipped: 2}, list[0].Progress)

	// The failed step retried, and now it succeeds: the rest runs.
	fail.Store(false)
	var retried map[string]any
	enqueueOK(t, url, &retried, "workflow", "retry", "order-1234")
	require.EqualValues(t, 1, retried["retried"])
	in = waitWorkflow(t, url, "order-1234", "completed")
	for _, s := range in.Steps {
		require.Equal(t, "completed", s.State, s.Name)
	}
	for _, s := range in.Steps {
		if s.Name == "ship" || s.Name == "notify" {
			require.NotNil(t, s.ReadyAt)
			require.True(t, !s.AttemptedAt.Before(*s.ReadyAt), "%s started after its release", s.Name)
		}
	}

	// Cancel: a workflow that waits on an hour-long step.
	long := filepath.Join(dir, "long.yaml")
	require.NoError(t, os.WriteFile(long, []byte("id: long\nname: long\nsteps:\n  - {name: sleep, kind: ferry.noop, args: {sleep: 1h}}\n  - {name: after, kind: ferry.noop, depends_on: [sleep]}\n"), 0o600))
	_, stderr, code = enqueue(t, url, nil, "workflow", "add", "--file", long)
	require.Zero(t, code, stderr)
	waitJobState(t, pool, jobOf(t, url, "long", "sleep"), "running", deadWatchdog)
	_, stderr, code = enqueue(t, url, nil, "workflow", "cancel", "long")
	require.Zero(t, code, stderr)
	waitJobState(t, pool, jobOf(t, url, "long", "sleep"), "cancelled", deadWatchdog)
	require.Equal(t, "cancelled", getJob(t, pool, jobOf(t, url, "long", "after")).State)
	_, stderr, code = enqueue(t, url, nil, "workflow", "cancel", "long")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "workflow long is cancelled")
	_, stderr, code = enqueue(t, url, nil, "workflow", "show", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "workflow: not found")
	requireBadInput(t, url, "--state", "workflow", "list", "--state", "bogus")
	stop(t, w, stopTimeout)
}

func waitWorkflow(t *testing.T, url, id, state string) workflow.Info {
	t.Helper()
	var in workflow.Info
	deadline := time.Now().Add(deadWatchdog)
	for {
		enqueueOK(t, url, &in, "workflow", "show", id)
		if in.State == state {
			return in
		}
		require.True(t, time.Now().Before(deadline), "workflow %s is %s, not %s: %+v", id, in.State, state, in.Steps)
		time.Sleep(100 * time.Millisecond)
	}
}

func jobOf(t *testing.T, url, id, step string) int64 {
	t.Helper()
	var in workflow.Info
	enqueueOK(t, url, &in, "workflow", "show", id)
	for _, s := range in.Steps {
		if s.Name == step {
			return s.JobID
		}
	}
	t.Fatalf("workflow %s has no step %s", id, step)
	return 0
}

// TestWorkflow_KillWorkerMidWorkflow kills -9 the worker running a
// workflow's first step: ferry's rescue gives the step to the next worker,
// whose completion releases the rest (a 50-wide fan-out and its fan-in, a
// diamond, a chain of 20). Oracle, from the rows at the end: every step
// completed, each started after every dependency had ended (its fetch
// after their completion), the killed step twice and no other step more
// than once, and the workflow completed.
func TestWorkflow_KillWorkerMidWorkflow(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	leader, _ := startRescueWorker(t, url, "spare=1", true)
	a, aID := startRescueWorker(t, url, "default=20", false)

	var b strings.Builder
	b.WriteString("id: killed\nname: killed\nsteps:\n  - {name: root, kind: test.sleep, args: {sleeps: [1h, 0s]}, max_attempts: 5}\n")
	var fan []string
	for i := range 50 {
		fmt.Fprintf(&b, "  - {name: fan-%d, kind: ferry.noop, depends_on: [root]}\n", i)
		fan = append(fan, fmt.Sprintf("fan-%d", i))
	}
	fmt.Fprintf(&b, "  - {name: join, kind: ferry.noop, depends_on: [%s]}\n", strings.Join(fan, ", "))
	b.WriteString("  - {name: d1, kind: ferry.noop, depends_on: [root]}\n  - {name: d2, kind: ferry.noop, depends_on: [d1]}\n  - {name: d3, kind: ferry.noop, depends_on: [d1]}\n  - {name: d4, kind: ferry.noop, depends_on: [d2, d3]}\n")
	prev := "join"
	for i := range 20 {
		fmt.Fprintf(&b, "  - {name: chain-%d, kind: ferry.noop, depends_on: [%s]}\n", i, prev)
		prev = fmt.Sprintf("chain-%d", i)
	}
	path := filepath.Join(t.TempDir(), "killed.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	_, stderr, code := enqueue(t, url, nil, "workflow", "add", "--file", path)
	require.Zero(t, code, stderr)

	root := jobOf(t, url, "killed", "root")
	waitRescuedJob(t, pool, root, "running on A", runningOn(nil, aID))
	bProc, _ := startRescueWorker(t, url, "default=20", false)
	require.NoError(t, a.Kill())
	exit, err := a.Wait(stopTimeout)
	require.NoError(t, err)
	require.Equal(t, 137, exit, "killed by SIGKILL")
	waitRescue(t, aID, []*proctest.Proc{leader, bProc}, "count", 1)

	in := waitWorkflow(t, url, "killed", "completed")
	require.Len(t, in.Steps, 76)
	for _, s := range in.Steps {
		require.Equal(t, "completed", s.State, s.Name)
		want := 1
		if s.Name == "root" {
			want = 2
		}
		require.Equal(t, want, s.Attempt, "%s ran %d times", s.Name, s.Attempt)
	}
	var early int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry_workflow_dep e
JOIN ferry_workflow_step ss ON ss.job_id = e.step
JOIN river_job d ON d.id = e.depends_on JOIN river_job s ON s.id = e.step
WHERE ss.workflow_id = 'killed' AND s.attempted_at < d.finalized_at`).Scan(&early))
	require.Zero(t, early, "steps fetched before a dependency completed")
	stop(t, bProc, stopTimeout)
	stop(t, leader, stopTimeout)
}
