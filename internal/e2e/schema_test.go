package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
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

// deployment is one ferry deployment of TestSchema_TwoDeployments: its
// schema, its workers and its webhook receiver.
type deployment struct {
	schema  string
	workers []*proctest.Proc
	hook    *hook
}

// enqueueIn runs enqueue args… against the deployment in schema s.
func enqueueIn(t *testing.T, url, s string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return proctest.Run(t, bins(t).enqueue, env(url, "FERRY_SCHEMA="+s), nil, args...)
}

// inSchema returns the ids of rows of query in schema s (a pool of its own,
// with that search_path).
func inSchema(t *testing.T, url, s, query string, args ...any) []string {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	pc.ConnConfig.RuntimeParams["search_path"] = s
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	defer pool.Close()
	rows, err := pool.Query(context.Background(), query, args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// Two deployments in one database, each in its own schema (FERRY_SCHEMA)
// with two worker processes, a schedule and an outbox route of its own,
// beside the default deployment's tables in public: each has its own
// leader at the same time, runs only its own jobs, records only its own
// ticks, delivers only its own messages to its own receiver, and sees only
// its own workers, all four of them registered at once (their liveness
// locks would collide without the schema's namespace: both schemas number
// their workers from 1).
func TestSchema_TwoDeployments(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ok := func(w http.ResponseWriter, _ *http.Request, _ hookRequest, _ int) {
		w.WriteHeader(http.StatusNoContent)
	}

	deps := []*deployment{{schema: "alpha"}, {schema: "beta"}}
	for _, d := range deps {
		stdout, stderr, code := proctest.Run(t, bins(t).worker, env(url, "FERRY_SCHEMA="+d.schema), nil, "migrate", "up")
		require.Zero(t, code, "worker migrate up in %s: %s", d.schema, stderr)
		require.Contains(t, stdout, "017")
		d.hook = newHook(t, ok)
		cfg := writeConfig(t, fmt.Sprintf(`
schedules:
  - id: %[1]s-tick
    every: 1s
    kind: ferry.noop
outbox:
  routes:
    - topic: order.placed
      name: hook
      url: %[2]s/hook
      secret_env: HOOK_SECRET
`, d.schema, d.hook.URL))
		extra := []string{"FERRY_SCHEMA=" + d.schema, "FERRY_CONFIG=" + cfg, "HOOK_SECRET=" + hookSecret}
		for range 2 {
			d.workers = append(d.workers, startWorker(t, url, extra, electionArgs(time.Second)...))
		}
	}

	// Each deployment has a leader of its own, one of its workers, and
	// the same time as the other's.
	for _, d := range deps {
		var pid int
		require.Eventually(t, func() bool {
			stdout, _, code := enqueueIn(t, url, d.schema, "leader", "--json")
			var out struct {
				Leader *struct {
					PID *int `json:"pid"`
				} `json:"leader"`
			}
			if code != 0 || json.Unmarshal([]byte(stdout), &out) != nil || out.Leader == nil || out.Leader.PID == nil {
				return false
			}
			pid = *out.Leader.PID
			return true
		}, startTimeout, pollEvery)
		require.True(t, slices.ContainsFunc(d.workers, func(p *proctest.Proc) bool { return p.Pid() == pid }),
			"the leader of %s (pid %d) is one of its workers", d.schema, pid)
	}
	for _, d := range deps {
		require.Eventually(t, func() bool {
			return slices.ContainsFunc(d.workers, func(w *proctest.Proc) bool {
				_, err := w.WaitForLineFunc(10*time.Millisecond, logtest.Logged("election: runnables started"))
				return err == nil
			})
		}, startTimeout, pollEvery, "a worker of %s started its leader runnables", d.schema)
	}

	// Workers: two alive in each, each deployment seeing only its own.
	for _, d := range deps {
		stdout, stderr, code := enqueueIn(t, url, d.schema, "workers", "--json")
		require.Zero(t, code, stderr)
		var ws []liveness.WorkerInfo
		require.NoError(t, json.Unmarshal([]byte(stdout), &ws))
		var pids []int
		for _, w := range ws {
			require.Equal(t, liveness.StateAlive, w.State, "%s: %+v", d.schema, w)
			pids = append(pids, w.PID)
		}
		want := []int{d.workers[0].Pid(), d.workers[1].Pid()}
		slices.Sort(pids)
		slices.Sort(want)
		require.Equal(t, want, pids, "%s's workers", d.schema)
	}

	// Jobs and messages, each deployment's own.
	jobs := map[string][]string{}
	for _, d := range deps {
		for range 10 {
			stdout, stderr, code := enqueueIn(t, url, d.schema, "job", "ferry.noop")
			require.Zero(t, code, stderr)
			jobs[d.schema] = append(jobs[d.schema], strings.TrimSpace(stdout))
		}
		_, stderr, code := enqueueIn(t, url, d.schema, "outbox", "add", "order.placed", "--payload", fmt.Sprintf(`{"from":%q}`, d.schema))
		require.Zero(t, code, stderr)
	}
	for _, d := range deps {
		req := d.hook.next(t, deliverTimeout)
		require.NoError(t, req.VerifyErr)
		require.JSONEq(t, fmt.Sprintf(`{"from":%q}`, d.schema), string(req.Body), "%s's receiver got its own message", d.schema)
		require.Eventually(t, func() bool {
			done := inSchema(t, url, d.schema, `SELECT id::text FROM river_job WHERE id = ANY($1::bigint[]) AND state = 'completed'`, jobs[d.schema])
			return len(done) == len(jobs[d.schema])
		}, deliverTimeout, pollEvery, "%s's jobs completed", d.schema)
	}

	// Wait for a few ticks in each, then look at everything.
	time.Sleep(3 * time.Second)
	clients := map[string][]string{}
	for _, d := range deps {
		clients[d.schema] = inSchema(t, url, d.schema, `SELECT client_id FROM ferry_worker`)
		require.Len(t, clients[d.schema], 2)
	}
	for _, d := range deps {
		other := "alpha"
		if d.schema == "alpha" {
			other = "beta"
		}
		runners := inSchema(t, url, d.schema, `SELECT DISTINCT unnest(attempted_by) FROM river_job`)
		require.NotEmpty(t, runners)
		for _, r := range runners {
			require.Contains(t, clients[d.schema], r, "a job of %s ran on a worker of %s", d.schema, other)
		}
		schedules := inSchema(t, url, d.schema, `SELECT DISTINCT schedule_id FROM ferry_periodic_tick`)
		require.Equal(t, []string{d.schema + "-tick"}, schedules, "%s records its own schedule only", d.schema)
		ticks := inSchema(t, url, d.schema, `SELECT count(*)::text FROM ferry_periodic_tick`)
		n, err := strconv.Atoi(ticks[0])
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, 3, "%s's ticks", d.schema)
		dupes := inSchema(t, url, d.schema, `SELECT tick_at::text FROM ferry_periodic_tick GROUP BY schedule_id, tick_at HAVING count(*) > 1`)
		require.Empty(t, dupes, "%s: a tick recorded twice", d.schema)
		for _, req := range d.hook.requests() {
			require.JSONEq(t, fmt.Sprintf(`{"from":%q}`, d.schema), string(req.Body), "%s's receiver got another's message", d.schema)
		}
		require.Len(t, d.hook.requests(), 1, "%s's receiver", d.schema)
	}
	// The default deployment's tables in public saw none of it.
	for _, q := range []string{`SELECT id::text FROM river_job`, `SELECT id::text FROM ferry_worker`, `SELECT id::text FROM ferry_outbox`, `SELECT schedule_id FROM ferry_periodic_tick`} {
		require.Empty(t, inSchema(t, url, "public", q), q)
	}
	var holders int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND objid = 911000001`).Scan(&holders))
	require.Equal(t, 2, holders, "two leader locks, one per deployment, on keys of their own")

	for _, d := range deps {
		for _, w := range d.workers {
			stop(t, w, stopTimeout)
		}
	}
}
