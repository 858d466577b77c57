package liveness

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

func TestList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	begun := time.Now().Truncate(time.Microsecond)

	alive := b.worker(t, time.Hour, nil)
	lost := b.worker(t, time.Hour, nil)
	dead := b.worker(t, time.Hour, nil)
	stopped := b.worker(t, time.Hour, nil)
	old := b.worker(t, time.Hour, nil)
	b.running(t, alive.ClientID(), 1, 25)
	b.running(t, alive.ClientID(), 1, 25)
	b.running(t, dead.ClientID(), 1, 25)
	b.running(t, dead.ClientID(), 25, 25)
	b.running(t, old.ClientID(), 1, 25)
	// A job alive ran before, now running on lost: counted for lost only.
	moved := b.running(t, alive.ClientID(), 1, 25)
	_, err := b.pool.Exec(ctx, "UPDATE river_job SET attempt = 2, attempted_by = array_append(attempted_by, $2) WHERE id = $1", moved, lost.ClientID())
	require.NoError(t, err)

	stopped.Stop()
	b.kill(t, dead)
	b.kill(t, old)
	_, err = b.rescuer(t, nil).RescueOnce(ctx)
	require.NoError(t, err)
	// Declared dead two hours ago: outside the last hour.
	_, err = b.pool.Exec(ctx, "UPDATE ferry_worker SET dead_at = now() - interval '2 hours' WHERE id = $1", old.ID())
	require.NoError(t, err)
	// lost dies after the rescuer's pass: nobody has declared it dead yet.
	b.kill(t, lost)
	// Its lock held by a session of another database: still lost, as the
	// rescuer sees it (advisory locks are per database).
	other := pgtest.PoolFor(t, pgtest.NewDatabase(t, false))
	conn, err := other.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", Namespace, lost.ID())
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock_all()") })

	ws, err := List(ctx, b.pool, time.Hour)
	require.NoError(t, err)
	byClient := map[string]WorkerInfo{}
	var order []string
	for _, w := range ws {
		byClient[w.ClientID] = w
		order = append(order, w.State)
	}
	require.Equal(t, []string{StateAlive, StateLost, StateDead, StateStopped}, order,
		"alive first, then lost, then the latest ended first (stopped before the rescuer's pass); old is left out")
	require.NotContains(t, byClient, old.ClientID(), "dead for longer than since")

	a := byClient[alive.ClientID()]
	require.Equal(t, alive.ID(), a.ID)
	require.Equal(t, StateAlive, a.State)
	require.NotEmpty(t, a.Hostname)
	require.Positive(t, a.PID)
	require.False(t, a.StartedAt.Before(begun) || a.StartedAt.After(time.Now()), "started at %s, during the test", a.StartedAt)
	require.False(t, a.LastSeenAt.Before(a.StartedAt))
	require.Equal(t, 2, a.RunningJobs, "only jobs whose latest attempt is the worker's")
	require.Nil(t, a.StoppedAt)
	require.Nil(t, a.DeadAt)
	require.Zero(t, a.RescuedJobs)

	l := byClient[lost.ClientID()]
	require.Equal(t, StateLost, l.State, "its lock is free in this database")
	require.Equal(t, 1, l.RunningJobs, "its jobs wait for the rescue")
	require.Nil(t, l.DeadAt)

	d := byClient[dead.ClientID()]
	require.Equal(t, StateDead, d.State)
	require.NotNil(t, d.DeadAt)
	require.Equal(t, 2, d.RescuedJobs)
	require.Zero(t, d.RunningJobs)
	require.Nil(t, d.StoppedAt)

	s := byClient[stopped.ClientID()]
	require.Equal(t, StateStopped, s.State, "a graceful stop, though the rescuer has declared it dead since")
	require.NotNil(t, s.StoppedAt)
	require.NotNil(t, s.DeadAt)
	require.Zero(t, s.RescuedJobs)

	ws, err = List(ctx, b.pool, 3*time.Hour)
	require.NoError(t, err)
	require.Len(t, ws, 5, "old is within three hours")
	require.Equal(t, old.ClientID(), ws[4].ClientID)
	require.Equal(t, 1, ws[4].RescuedJobs)

	_, err = List(ctx, b.pool, 0)
	require.ErrorContains(t, err, "not positive")
}

// A worker that took its lock again after its session was lost is alive,
// however stale its last_seen_at.
func TestList_AliveIsTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := b.worker(t, time.Hour, nil)
	_, err := b.pool.Exec(ctx, "UPDATE ferry_worker SET last_seen_at = now() - interval '1 day' WHERE id = $1", w.ID())
	require.NoError(t, err)
	ws, err := List(ctx, b.pool, time.Hour)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, StateAlive, ws[0].State)

	b.kill(t, w)
	_, err = b.pool.Exec(ctx, "UPDATE ferry_worker SET last_seen_at = now() WHERE id = $1", w.ID())
	require.NoError(t, err)
	ws, err = List(ctx, b.pool, time.Hour)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, StateLost, ws[0].State, "a fresh last_seen_at does not make it alive")
}
