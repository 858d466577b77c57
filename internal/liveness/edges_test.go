package liveness

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/netproxy"
)

// The faults at liveness's edges: a lost reply, a row forgotten, a
// liveness session killed under a live worker. Each test drives the real
// Worker and Rescuer over real sessions, with a proxy where the network
// misbehaves.

// rescueEvery runs the rescuer's passes every few milliseconds until the
// test ends, as a leader whose passes land at the worst moment would.
func (b *testBundle) rescueEvery(t *testing.T, r *Rescuer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = r.RescueOnce(ctx)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// deadAt reads whether the worker clientID's row is declared dead; gone
// when it has no row.
func (b *testBundle) deadAt(t *testing.T, clientID string) (dead, gone bool) {
	t.Helper()
	var n, d int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT count(*), count(dead_at) FROM ferry_worker WHERE client_id = $1", clientID).Scan(&n, &d))
	return d > 0, n == 0
}

// The reply to the registration's COMMIT is lost: the row is committed
// and its session gone with the lock. The worker registers again on the
// row it wrote, takes its lock, and lives: the rescuer, passing all the
// while, never declares it dead.
func TestWorker_RegistrationReplyLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.rescueEvery(t, b.rescuer(t, nil))
	clientID := "test-lost-reply"
	// The worker's pool is connected before it registers, as a server's
	// is (it publishes its kinds first).
	require.NoError(t, b.session(t, clientID).Ping(ctx))

	w, err := b.startWorker(t, clientID, time.Hour, nil, func(p *netproxy.Proxy) { p.DropReplyTo([]byte("commit")) })
	require.NoError(t, err, "the worker registered")
	require.NotZero(t, w.ID())
	require.True(t, b.alive(t, w), "it holds its lock once Start returns")
	require.Never(t, func() bool {
		dead, gone := b.deadAt(t, clientID)
		return dead || gone || !b.alive(t, w)
	}, 2*time.Second, 20*time.Millisecond, "the live worker is never declared dead")
	var rows int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM ferry_worker WHERE client_id = $1", clientID).Scan(&rows))
	require.Equal(t, 1, rows, "one row: the second try found the first's")
}

// A worker whose row was declared dead before it could register (its
// first COMMIT's reply lost, and the rescuer faster than its next try)
// learns it: Start returns ErrDeclaredDead, and the process stops rather
// than work fenced.
func TestWorker_RegistersFindsItselfDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	first := b.worker(t, time.Hour, nil)
	b.kill(t, first)
	res, err := b.rescuer(t, nil).RescueOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)

	_, err = b.startWorker(t, first.ClientID(), time.Hour, nil, nil)
	require.ErrorIs(t, err, ErrDeclaredDead)
}

// A worker declared dead longer ago than the rescuer keeps the rows of
// dead workers (Keep; a day by default) comes back to no row: the fence
// refuses its sessions' writes, and the worker learns it is dead and
// stops.
func TestWorker_ForgottenDeadWorkerIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	died := make(chan error, 1)
	w := b.worker(t, time.Hour, func(err error) { died <- err })
	pool := b.session(t, w.ClientID())
	id := b.running(t, w.ClientID(), 1, 25)

	b.kill(t, w)
	res, err := b.rescuer(t, func(c *RescuerConfig) { c.Stale = time.Nanosecond; c.Keep = time.Nanosecond }).RescueOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	_, gone := b.deadAt(t, w.ClientID())
	require.True(t, gone, "the rescuer forgot the dead worker's row")
	b.refetch(t, id, "another-worker")

	err = complete(pool, id)
	require.True(t, IsDeclaredDead(err), "the forgotten worker's completion is refused, got %v", err)
	require.Equal(t, "running", b.job(t, id).State, "the other worker's attempt stands")

	b.revive(w)
	select {
	case err := <-died:
		require.ErrorIs(t, err, ErrDeclaredDead)
	case <-time.After(30 * time.Second):
		t.Fatal("the worker with no row never learned it is dead")
	}
}

// pg_terminate_backend of a live worker's liveness session alone (an
// idle-session killer, a proxy restart) frees its lock until it takes it
// again on a new session. A pass that lands in between leaves it alone:
// its pool's sessions are connected and its last heartbeat is recent.
// Once its heartbeat is stale (a worker cut off from the server, whose
// sessions the server still shows), it is rescued as before; an
// operator's rescue of its job is refused while a session of it is
// connected.
func TestRescuer_SparesWorkerWhoseLivenessSessionAloneEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := b.worker(t, time.Hour, nil)
	require.NoError(t, b.session(t, w.ClientID()).Ping(ctx))
	id := b.running(t, w.ClientID(), 1, 25)
	b.kill(t, w) // its liveness session ended; partitioned, so it does not take its lock again

	r := b.rescuer(t, func(c *RescuerConfig) { c.Stale = time.Hour })
	res, err := r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res, "a worker with a session connected and a recent heartbeat is alive")
	require.Equal(t, "running", b.job(t, id).State)
	dead, _ := b.deadAt(t, w.ClientID())
	require.False(t, dead)

	_, err = RescueJob(ctx, b.pool, id, 0)
	var alive *WorkerAliveError
	require.True(t, errors.As(err, &alive), "the operator's rescue is refused too, got %v", err)
	require.Equal(t, "running", b.job(t, id).State)

	res, err = b.rescuer(t, staleAtOnce).RescueOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1, "once its heartbeat is stale, it is rescued")
	require.Equal(t, "available", b.job(t, id).State)
}
