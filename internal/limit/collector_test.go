package limit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

func TestLimitCollector(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ctx := context.Background()
	// Three jobs of acme park behind both limits; a worker's claim takes
	// two (the concurrency); a rate limit that leaves no token spent (its
	// tat already past when read) reads 0 in use.
	l, err := New(Config{Pool: pool, Limits: []Limit{
		{Name: "per-tenant", Kind: "email.send", KeyField: "tenant_id", Concurrency: 2},
		{Name: "api", Queue: "default", Rate: Rate{Count: MaxRateCount, Period: time.Second, Burst: 1}},
	}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx))
	_, err = pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state)
		SELECT '{"tenant_id": "acme"}', 'email.send', 25, 'default', 'available' FROM generate_series(1, 3)`)
	require.NoError(t, err)
	claimed, err := l.Claim(ctx, riverpgxv5.New(pool).GetExecutor(), &riverdriver.JobGetAvailableParams{
		ClientID: "collector-test", MaxAttemptedBy: 100, MaxToLock: 10, Queue: "default",
	})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	want := `
# HELP ferry_limit_in_use Use of a limit now, per key with any use or waiting job (the busiest 100): slots held for a concurrency limit, tokens spent for a rate-only limit (read at scrape time, cached 2s).
# TYPE ferry_limit_in_use gauge
ferry_limit_in_use{key="",limit="api"} 0
ferry_limit_in_use{key="acme",limit="per-tenant"} 2
# HELP ferry_limit_waiting Jobs waiting for a limit, per key with any use or waiting job (the busiest 100) (read at scrape time, cached 2s).
# TYPE ferry_limit_waiting gauge
ferry_limit_waiting{key="",limit="api"} 1
ferry_limit_waiting{key="acme",limit="per-tenant"} 1
`
	require.NoError(t, testutil.CollectAndCompare(NewLimitCollector(pool, nil), strings.NewReader(want)))
}
