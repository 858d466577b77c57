package periodic

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/jobs"
)

// TestScheduler_QueueFull: a tick whose queue is at its bound is recorded
// as skipped with reason `queue full` and not tried again, the ticks of
// other queues claimed with it are enqueued, and the schedule's next tick
// enqueues once the queue has room.
func TestScheduler_QueueFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := jobs.SetQueueBounds(ctx, b.pool, []jobs.QueueBound{{Name: "bounded", MaxLength: 1}})
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state) VALUES ('{}', 'ferry.noop', 25, 'bounded', 'available')`)
	require.NoError(t, err)

	full := noopSchedule("full", time.Minute)
	full.InsertOpts, full.Overlap = &river.InsertOpts{Queue: "bounded"}, OverlapAllow
	free := noopSchedule("free", time.Minute)
	s := b.scheduler(t, nil, full, free)
	require.NoError(t, s.sync(ctx, time.Now()))
	base := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

	// Both ticks in one transaction: the full queue's refusal does not
	// take the other tick with it.
	require.NoError(t, s.claimBatch(ctx, []claimReq{{sc: s.durable[0], at: base}, {sc: s.durable[1], at: base}}))
	got := ticks(t, b.pool, "full")
	require.Len(t, got, 1)
	require.Equal(t, "skipped", got[0].Status)
	require.Equal(t, ReasonQueueFull, *got[0].Reason)
	require.Nil(t, got[0].JobID)
	require.Equal(t, "enqueued", ticks(t, b.pool, "free")[0].Status)
	require.Contains(t, b.logs.String(), `"reason":"queue full"`)

	// The skipped tick stays skipped: claiming it again does nothing.
	require.NoError(t, s.claim(ctx, s.durable[0], base, ""))
	require.Equal(t, "skipped", ticks(t, b.pool, "full")[0].Status)

	// A single tick into the full queue (no batch to split) is skipped too.
	require.NoError(t, s.claim(ctx, s.durable[0], base.Add(time.Minute), ""))
	require.Equal(t, ReasonQueueFull, *ticks(t, b.pool, "full")[1].Reason)

	// Room again: the queue's one job leaves it (cancelled through River's
	// client, as an operator would), and the next tick enqueues.
	var left int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM river_job WHERE queue = 'bounded'`).Scan(&left))
	_, err = b.client.JobCancel(ctx, left)
	require.NoError(t, err)
	require.NoError(t, s.claim(ctx, s.durable[0], base.Add(2*time.Minute), ""))
	got = ticks(t, b.pool, "full")
	require.Equal(t, "enqueued", got[2].Status)
	require.NotNil(t, got[2].JobID)
}
