package liveness

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
)

// A running job whose cancellation was requested (River's JobCancel) when
// its worker died is cancelled by the rescue, as River's rescuer would: the
// dead worker never saw the request. The others are made available.
func TestRescuer_CancelRequestedIsCancelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := b.worker(t, time.Hour, nil)
	cancelled := b.running(t, w.ClientID(), 1, 25)
	orphan := b.running(t, w.ClientID(), 1, 25)
	client, err := river.NewClient[pgx.Tx](riverpgxv5.New(b.pool), &river.Config{})
	require.NoError(t, err)
	j, err := client.JobCancel(ctx, cancelled)
	require.NoError(t, err)
	require.Equal(t, "running", string(j.State), "only requested: its worker must see it")

	b.kill(t, w)
	r := b.rescuer(t, nil)
	res, err := r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []Rescue{{WorkerID: w.ID(), ClientID: w.ClientID(), Available: 1, Cancelled: 1}}, res)
	got := b.job(t, cancelled)
	require.Equal(t, "cancelled", got.State)
	require.True(t, got.Finalize)
	require.Contains(t, got.LastErr, "before it saw the cancellation")
	require.Equal(t, "available", b.job(t, orphan).State)
}

// RunningOn names the worker of a running job's latest attempt and its
// state by its liveness lock.
func TestRunningOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	live := b.worker(t, time.Hour, nil)
	lost := b.worker(t, time.Hour, nil)
	onLive := b.running(t, live.ClientID(), 1, 25)
	onLost := b.running(t, lost.ClientID(), 1, 25)
	foreign := b.running(t, "not-a-ferry-worker", 1, 25)
	b.kill(t, lost)

	for _, tc := range []struct {
		id              int64
		clientID, state string
	}{
		{onLive, live.ClientID(), StateAlive},
		{onLost, lost.ClientID(), StateLost},
		{foreign, "not-a-ferry-worker", ""},
		{999999, "", ""},
	} {
		clientID, state, err := RunningOn(ctx, b.pool, tc.id)
		require.NoError(t, err)
		require.Equal(t, tc.clientID, clientID, "job %d", tc.id)
		require.Equal(t, tc.state, state, "job %d", tc.id)
	}
}
