package outbox

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/pgtest"
)

// deliveryState is a delivery as the sweep leaves it, with its job's state.
type deliveryState struct {
	Status    string
	LastError *string
	Waiting   bool
	JobID     int64
	JobState  string
}

func deliveryOf(t *testing.T, b *relayBundle, messageID int64, route string) deliveryState {
	t.Helper()
	var d deliveryState
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT d.status, d.last_error, d.route_wait_since IS NOT NULL, d.job_id, j.state::text
		FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id
		WHERE d.message_id = $1 AND d.route = $2`, messageID, route).
		Scan(&d.Status, &d.LastError, &d.Waiting, &d.JobID, &d.JobState))
	return d
}

// TestRouteSweeper: the deliveries of a route that no live worker declares
// any more wait for it, visibly; a worker declaring it again ends the
// wait; after the grace they are stuck and their jobs cancelled, and
// Reset puts them back with one job and a new grace.
func TestRouteSweeper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	b := &relayBundle{pool: pool, client: client}
	sweeper := RouteSweeper{Pool: pool, Client: client, Grace: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	sweep := func(s RouteSweeper) (waiting, stuck int) {
		t.Helper()
		waiting, stuck, err := s.SweepOnce(ctx)
		require.NoError(t, err)
		return waiting, stuck
	}

	first := liveWorker(t, url, "first")
	require.NoError(t, Publish(ctx, pool, "first", mustRoutes(t, webhook("audit.logged", "audit"))))
	id := b.add(t, "audit.logged", `{}`)
	n, err := b.relay(t).RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	w, s := sweep(sweeper)
	require.Zero(t, w, "the route is live")
	require.Zero(t, s)
	require.False(t, deliveryOf(t, b, id, "audit").Waiting)

	// The route's only worker goes (a deploy removed the route): the
	// delivery waits for it, once marked.
	first.Stop()
	w, s = sweep(sweeper)
	require.Equal(t, 1, w)
	require.Zero(t, s)
	d := deliveryOf(t, b, id, "audit")
	require.True(t, d.Waiting)
	require.Equal(t, "pending", d.Status)
	require.Equal(t, "available", d.JobState)
	stats, err := Stats(ctx, pool)
	require.NoError(t, err)
	require.Contains(t, stats, Stat{Topic: "audit.logged", Route: "audit", Status: StatusWaiting, Count: 1})
	w, _ = sweep(sweeper)
	require.Zero(t, w, "marked once")

	// A worker declares the route again: the wait ends.
	second := liveWorker(t, url, "second")
	require.NoError(t, Publish(ctx, pool, "second", mustRoutes(t, webhook("audit.logged", "audit"))))
	w, s = sweep(sweeper)
	require.Zero(t, w)
	require.Zero(t, s)
	require.False(t, deliveryOf(t, b, id, "audit").Waiting, "the wait ends when the route is back")

	// Gone again, and this time for longer than the grace (a grace of a
	// nanosecond: the wait began in an earlier transaction).
	second.Stop()
	w, _ = sweep(sweeper)
	require.Equal(t, 1, w)
	short := sweeper
	short.Grace = time.Nanosecond
	w, s = sweep(short)
	require.Zero(t, w)
	require.Equal(t, 1, s)
	d = deliveryOf(t, b, id, "audit")
	require.Equal(t, "stuck", d.Status)
	require.Equal(t, ErrRouteGone.Error(), *d.LastError)
	require.Equal(t, "cancelled", d.JobState, "its job is cancelled with it: no second job of one delivery remains")
	m := messageOf(t, b, id)
	require.Equal(t, "stuck", m.Status)
	require.Equal(t, "route audit: "+ErrRouteGone.Error(), *m.LastError)
	oldJob := d.JobID

	// Reset: pending again, with a new job and a new grace.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		deliveries, _, err := Reset(ctx, tx, client, []int64{id}, 0)
		require.Equal(t, 1, deliveries)
		return err
	}))
	d = deliveryOf(t, b, id, "audit")
	require.Equal(t, "pending", d.Status)
	require.False(t, d.Waiting, "a new grace")
	require.NotEqual(t, oldJob, d.JobID)
	require.Equal(t, "available", d.JobState)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'outbox.deliver'
		AND (args->>'message_id')::bigint = $1 AND state NOT IN ('cancelled', 'completed', 'discarded')`, id))
}
