package metrics

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

// TestJobsCollector: the waiting and running states are read at every
// refresh, the finished ones (most of a large table) at most every
// finalTTL, their last counts reported meanwhile.
func TestJobsCollector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	insert := func(state string, n int) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at, finalized_at)
			SELECT '{}', 'ferry.noop', 25, 'default', $1::river_job_state, now(),
				CASE WHEN $1 IN ('completed', 'cancelled', 'discarded') THEN now() END
			FROM generate_series(1, $2)`, state, n)
		require.NoError(t, err)
	}
	c := &jobsCollector{pool: pool, logger: slog.New(slog.DiscardHandler), ttl: 0, finalTTL: time.Hour}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	want := func(available, running, completed, discarded int) string {
		return `
# HELP ferry_jobs ` + jobsHelp + `
# TYPE ferry_jobs gauge
` + strings.Join(nonZero(map[string]int{"available": available, "completed": completed, "discarded": discarded, "running": running}), "\n") + "\n"
	}

	insert("available", 3)
	insert("completed", 5)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want(3, 0, 5, 0)), "ferry_jobs"))

	insert("available", 1)
	insert("running", 2)
	insert("completed", 4)
	insert("discarded", 1)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want(4, 2, 5, 0)), "ferry_jobs"),
		"waiting and running read again; finished ones as last read")

	c.mu.Lock()
	c.finalAt = time.Time{} // finalTTL is over
	c.mu.Unlock()
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want(4, 2, 9, 1)), "ferry_jobs"),
		"finished ones read again once finalTTL is over")
}

// nonZero renders the default queue's series for the states counted, in
// the order the registry sorts them.
func nonZero(counts map[string]int) []string {
	var out []string
	for _, state := range []string{"available", "completed", "discarded", "running"} {
		if n := counts[state]; n > 0 {
			out = append(out, `ferry_jobs{queue="default",state="`+state+`"} `+strconv.Itoa(n))
		}
	}
	return out
}
