package e2e_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// limitInfo is one limit of `enqueue limits --json`.
type limitInfo struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	Concurrency int    `json:"concurrency"`
	Running     int    `json:"running"`
	Waiting     int    `json:"waiting"`
}

func listLimits(t *testing.T, url string) []limitInfo {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, nil, "limits", "--json")
	require.Zero(t, code, stderr)
	var ls []limitInfo
	require.NoError(t, json.Unmarshal([]byte(stdout), &ls), stdout)
	return ls
}

// TestLimits_KilledHolder: a concurrency limit across worker processes
// parks jobs over it behind its gate (visible in `enqueue limits`),
// without burning their attempts; when the worker running the limit's
// jobs is killed -9, ferry's rescue settles its jobs, their room frees,
// and the parked jobs and the rescued ones all run, never more than the
// limit at once.
func TestLimits_KilledHolder(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	cfg := writeFile(t, "ferry.yaml", "limits:\n  - {name: sleepers, kind: test.sleep, concurrency: 3}\n")
	leader, _ := startRescueWorker(t, url, "spare=1", true, "FERRY_CONFIG="+cfg)
	a, aID := startRescueWorker(t, url, "default=20", false, "FERRY_CONFIG="+cfg)

	var held, waiting []int64
	for range 3 {
		held = append(held, enqueueID(t, url, "test.sleep", "--args", `{"sleeps":["1h","200ms"]}`))
	}
	for _, id := range held {
		waitRescuedJob(t, pool, id, "running on A", runningOn(nil, aID))
	}
	for range 5 {
		waiting = append(waiting, enqueueID(t, url, "test.sleep", "--args", `{"sleeps":["200ms"]}`))
	}
	require.Eventually(t, func() bool {
		ls := listLimits(t, url)
		require.Len(t, ls, 1)
		require.LessOrEqual(t, ls[0].Running, 3)
		return ls[0].Running == 3 && ls[0].Waiting == 5
	}, 30*time.Second, 50*time.Millisecond, "three running on A, five waiting")
	stdout, stderr, code := enqueue(t, url, nil, "limits")
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^sleepers\s+kind test\.sleep\s+-\s+3\s+-\s+3\s+0\s+5$`, stdout)
	require.Eventually(t, func() bool {
		return count(t, pool, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND attempt = 0 AND state = 'pending' AND metadata ? 'ferry_gate'`, waiting) == 5
	}, 10*time.Second, 20*time.Millisecond, "the waiting jobs are parked behind the limit's gate, never attempted")

	b, _ := startRescueWorker(t, url, "default=20", false, "FERRY_CONFIG="+cfg)
	require.NoError(t, a.Kill())
	code, err := a.Wait(stopTimeout)
	require.NoError(t, err)
	require.Equal(t, 137, code, "killed by SIGKILL")

	deadline := time.Now().Add(rescueWatchdog)
	for {
		ls := listLimits(t, url)
		require.Len(t, ls, 1)
		require.LessOrEqual(t, ls[0].Running, 3, "never more than the limit")
		if count(t, pool, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'completed'`, append(held, waiting...)) == 8 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the jobs did not all complete")
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range held {
		require.Equal(t, 2, getRescuedJob(t, pool, id).Attempt, "job %d: the killed attempt, then one", id)
	}
	for _, id := range waiting {
		require.Equal(t, 1, getRescuedJob(t, pool, id).Attempt, "job %d: waiting burned no attempt", id)
	}
	require.Zero(t, count(t, pool, `SELECT count(*) FROM river_job WHERE state IN ('pending', 'running')`), "nobody waits, nothing runs")
	for _, p := range []*proctest.Proc{b, leader} {
		stop(t, p, 30*time.Second)
	}
}

func TestLimits_ConfigErrors(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	for name, tc := range map[string]struct{ doc, want string }{
		"UnknownKind": {"limits:\n  - {kind: nope, concurrency: 2}\n", `limits[0] (name "kind:nope"): kind: "nope" is not a job kind this worker runs`},
		"BadRate":     {"limits:\n  - {kind: ferry.noop, rate: 10/fortnight}\n", `limits[0] (name "kind:ferry.noop"): rate: "10/fortnight": the unit "fortnight" is not s, m or h`},
		"Nothing":     {"limits:\n  - {queue: default}\n", `limits[0] (name "queue:default"): concurrency, rate: give one or both`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireConfigRefused(t, url, tc.doc, tc.want)
		})
	}
	require.Zero(t, count(t, pgtest.PoolFor(t, url), `SELECT count(*) FROM ferry_limit`), "nothing written")
}

// `enqueue limits` with no limit configured lists none; an argument is
// refused with one line, exit 2.
func TestEnqueue_LimitsEmptyAndBadArgs(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	stdout, stderr, code := enqueue(t, url, nil, "limits", "--json")
	require.Zero(t, code, stderr)
	require.JSONEq(t, "[]", stdout)
	stdout, stderr, code = enqueue(t, url, nil, "limits")
	require.Zero(t, code, stderr)
	require.Regexp(t, `^NAME\s+APPLIES TO\s+KEY\s+CONCURRENCY\s+RATE\s+RUNNING\s+TOKENS\s+WAITING\s*\n$`, stdout)
	_, stderr, code = enqueue(t, url, nil, "limits", "email")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, oneLine(t, stderr), `limits takes no arguments, got "email"`)
}
