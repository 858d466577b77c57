package e2e_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/pgbouncer"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// enqueue through PgBouncer in transaction mode, with FERRY_POOLER=
// transaction: concurrent `enqueue job`s and a bulk insert land whole (pgx's
// named prepared statements, its default, would meet other clients' server
// sessions here); the commands that need a session of their own refuse
// with one line; a bad FERRY_POOLER is bad input.
func TestEnqueue_ThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	bouncer := pgbouncer.Start(t, url)
	penv := env(bouncer, "FERRY_POOLER=transaction")
	runEnv := func(e []string, stdin string, args ...string) (string, string, int) {
		return proctest.Run(t, bins(t).enqueue, e, strings.NewReader(stdin), args...)
	}
	run := func(stdin string, args ...string) (string, string, int) { return runEnv(penv, stdin, args...) }

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 3 {
				_, stderr, code := run("", "job", "ferry.noop", "--queue", "pgb", "--json")
				assert.Zero(t, code, "enqueue job: %s", stderr)
			}
		})
	}
	wg.Go(func() {
		_, stderr, code := run(strings.Repeat(`{"kind":"ferry.noop","queue":"pgb"}`+"\n", 1000), "bulk", "--file", "-", "--json")
		assert.Zero(t, code, "enqueue bulk: %s", stderr)
	})
	wg.Wait()
	var n int
	require.NoError(t, pgtest.PoolFor(t, url).QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = 'pgb'`).Scan(&n))
	require.Equal(t, 8*3+1000, n)

	stdout, stderr, code := run("", "queues", "--json")
	require.Zero(t, code, "enqueue queues: %s", stderr)
	require.Contains(t, stdout, `"pgb"`)
	stdout, stderr, code = run("", "jobs", "list", "--queue", "pgb", "--json")
	require.Zero(t, code, "enqueue jobs list: %s", stderr)
	require.Contains(t, stdout, `"ferry.noop"`)

	for _, args := range [][]string{
		{"broadcast", "subscribe", "pgb.events"},
		{"lock", "run", "pgb", "--wait", "5s", "--", "true"},
	} {
		stdout, stderr, code := runEnv(append(penv, "FERRY_BROADCAST_KEYS="+broadcastKey(t)), "", args...)
		require.Equal(t, 2, code, "%v: stderr %s", args, stderr)
		require.Empty(t, stdout)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
		require.Contains(t, stderr, "transaction pooler")
	}
	// worker migrate holds a session lock: refused there.
	stdout, stderr, code = proctest.Run(t, bins(t).worker, penv, nil, "migrate", "up")
	require.Equal(t, 2, code, "stderr %s", stderr)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "transaction pooler")

	_, stderr, code = runEnv(env(bouncer, "FERRY_POOLER=statement"), "", "job", "ferry.noop")
	require.Equal(t, 2, code, "stderr %s", stderr)
	require.Contains(t, stderr, `FERRY_POOLER: want none, session or transaction, got "statement"`)
}

// Workers whose job traffic goes through PgBouncer in transaction mode
// (FERRY_POOLER=transaction), their sessions to Postgres itself
// (FERRY_SESSION_DATABASE_URL): they work jobs inserted through the
// pooler, and when one is killed -9 running jobs, the leader rescues them by
// liveness and the other worker completes them. Without the session URL,
// the worker refuses to start with one line.
func TestWorker_ThroughPgBouncer(t *testing.T) {
	t.Parallel()
	const n = 10
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	bouncer := pgbouncer.Start(t, url)
	through := []string{"DATABASE_URL=" + bouncer, "FERRY_POOLER=transaction", "FERRY_SESSION_DATABASE_URL=" + url}

	stdout, stderr, code := proctest.Run(t, bins(t).worker, env(bouncer, "FERRY_POOLER=transaction"), nil, "run", "--admin-addr", "off")
	require.Equal(t, 2, code, "stderr %s", stderr)
	require.Empty(t, stdout)
	require.Contains(t, oneLine(t, stderr), "FERRY_POOLER=transaction needs FERRY_SESSION_DATABASE_URL")

	leader, _ := startRescueWorker(t, url, "spare=1", true, through...)
	_, err := leader.WaitForLineFunc(0, logtest.Logged("ferry: started", "pooler", "transaction"))
	require.NoError(t, err)
	a, aID := startRescueWorker(t, url, "default=20", false, through...)
	ids := make([]int64, n)
	for i := range ids {
		stdout, stderr, code := proctest.Run(t, bins(t).enqueue, env(bouncer, "FERRY_POOLER=transaction"), nil,
			"job", "test.sleep", "--args", `{"sleeps":["1h","0s"]}`)
		require.Zero(t, code, "enqueue through the pooler: %s", stderr)
		ids[i], err = strconv.ParseInt(strings.TrimSpace(stdout), 10, 64)
		require.NoError(t, err)
	}
	for _, id := range ids {
		waitRescuedJob(t, pool, id, "running on A", runningOn(nil, aID))
	}
	b, bID := startRescueWorker(t, url, "default=20", false, through...)

	require.NoError(t, a.Kill())
	_, err = a.Wait(stopTimeout)
	require.NoError(t, err)
	waitRescue(t, aID, []*proctest.Proc{leader, b}, "count", n, "available", n)
	for _, id := range ids {
		j := waitRescuedJob(t, pool, id, "completed", func(j rescuedJob) bool { return j.State == "completed" })
		require.Equal(t, []string{aID, bID}, j.AttemptedBy, "job %d: A's attempt, then B's", id)
	}
	var tagged int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM ferry_worker WHERE session_tag LIKE 'ferry-w:%' AND client_id = ANY($1)`, []string{aID, bID}).Scan(&tagged))
	require.Equal(t, 2, tagged, "both workers recorded their session tag")
}
