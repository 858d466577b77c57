package limit

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

func TestLimitCollector(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ctx := context.Background()
	// Three jobs of acme park behind both limits; two of them run
	// (claimed); an idle rate limit reads 0 in use.
	_, err := pool.Exec(ctx, `
		INSERT INTO ferry_limit (name, kind, key_field, concurrency) VALUES ('per-tenant', 'email.send', 'tenant_id', 2);
		INSERT INTO ferry_limit (name, queue, rate_count, rate_period, burst) VALUES ('api', 'default', 10, '1 second', 1);
		SELECT setval('ferry_limit_on', 1, true);
		INSERT INTO river_job (id, args, kind, max_attempts, queue, state)
		SELECT i, '{"tenant_id": "acme"}', 'email.send', 25, 'default', 'available' FROM generate_series(1, 3) i;
		UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id IN (1, 2);`)
	require.NoError(t, err)
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
