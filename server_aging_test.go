package ferry_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	ferry "github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// TestServer_PriorityAging: a server with FERRY_PRIORITY_AGING (one
// worker) starts a priority-4 job that has waited past three periods
// before the priority-1 jobs inserted after it; River's order would start
// it last.
func TestServer_PriorityAging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	require.NoError(t, err)
	var ids []int64
	for _, p := range []int{1, 4, 1, 1} {
		res, err := ins.Client().Insert(ctx, echoArgs{Msg: "p"}, &river.InsertOpts{Priority: p})
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	// The priority-4 job has waited 5 s (River would insert a job given a
	// past scheduled_at as scheduled, for its scheduler).
	_, err = pool.Exec(ctx, `UPDATE river_job SET scheduled_at = scheduled_at - interval '5 seconds' WHERE id = $1`, ids[1])
	require.NoError(t, err)

	w := &echoWorker{got: make(chan string, len(ids))}
	cfg := quietConfig(url)
	cfg.Kinds = []jobs.Kind{jobs.Define[echoArgs](w, "default", "echo for tests")}
	cfg.Queues.Workers = map[string]int{"default": 1}
	cfg.Queues.PriorityAging = time.Second
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	stop := runServer(t, srv)
	for range ids {
		select {
		case <-w.got:
		case <-time.After(20 * time.Second):
			t.Fatal("jobs not worked")
		}
	}
	require.NoError(t, stop())
	var first int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM river_job ORDER BY attempted_at, id LIMIT 1`).Scan(&first))
	require.Equal(t, ids[1], first, "the aged priority-4 job started first")
}
