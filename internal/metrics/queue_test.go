package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// TestQueueMetrics: ferry_queue_length follows a bounded queue's length,
// and ferry_queue_full_total counts the inserts a full queue refused
// through a River client with the middleware.
func TestQueueMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	_, err := jobs.SetQueueBounds(ctx, pool, []jobs.QueueBound{{Name: "reports", MaxLength: 2}, {Name: "free"}})
	require.NoError(t, err)
	m := New(pool, "test", nil)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: []rivertype.Middleware{m.Middleware()}})
	require.NoError(t, err)

	insert := func(queue string) error {
		_, err := client.Insert(ctx, jobs.NoopArgs{}, &river.InsertOpts{Queue: queue})
		return err
	}
	require.NoError(t, insert("reports"))
	require.NoError(t, insert("reports"))
	require.ErrorContains(t, insert("reports"), "queue full")
	require.ErrorContains(t, insert("reports"), "queue full")
	require.NoError(t, insert("free"))

	require.InDelta(t, 2, testutil.ToFloat64(m.queueFull.WithLabelValues("reports")), 0)
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP ferry_queue_length Jobs available, scheduled, retryable, pending and running in each bounded queue, as its bound counts them (read at scrape time, cached for 5s).
# TYPE ferry_queue_length gauge
ferry_queue_length{queue="reports"} 2
`), "ferry_queue_length"), "an unbounded queue has no length series")
}
