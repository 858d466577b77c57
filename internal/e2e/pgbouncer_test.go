package e2e_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/pgbouncer"
	"github.com/ferryq/ferry/internal/testkit/pgtest"
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
	// worker run through a transaction pooler is refused, not half run.
	stdout, stderr, code = proctest.Run(t, bins(t).worker, penv, nil, "run", "--admin-addr", "off")
	require.Equal(t, 2, code, "stderr %s", stderr)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "does not work through a transaction pooler yet")

	_, stderr, code = runEnv(env(bouncer, "FERRY_POOLER=statement"), "", "job", "ferry.noop")
	require.Equal(t, 2, code, "stderr %s", stderr)
	require.Contains(t, stderr, `FERRY_POOLER: want none, session or transaction, got "statement"`)
}
