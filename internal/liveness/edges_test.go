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

// The reply to the registration's COMMIT is lost, and a rescue pass
// lands before the next try: no session of the worker shows its tag (as
// through PgBouncer, where a server session shows a client's
// application_name only while it is lent to it), so the rescue declares
// the row, whose lock has no holder yet, dead. It took no job back (the
// worker fetches none before it is registered): the worker, registering
// again, takes the declaration back and lives, and later passes leave it.
func TestWorker_RegistrationReplyLostRescuedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := b.rescuer(t, nil)
	clientID := "test-lost-reply-rescued"
	var (
		rescued []Rescue
		rerr    error
	)
	passed := make(chan struct{})
	w, err := b.startWorker(t, clientID, time.Hour, nil, func(p *netproxy.Proxy) {
		p.DropReplyToThen([]byte("commit"), func() {
			// The worker's next try is held back until a pass declared
			// the row dead (once the server has ended the session whose
			// reply was lost).
			p.Partition()
			go func() {
				defer p.Heal()
				defer close(passed)
				deadline := time.Now().Add(10 * time.Second)
				for len(rescued) == 0 && rerr == nil && time.Now().Before(deadline) {
					rescued, rerr = r.RescueOnce(ctx)
					time.Sleep(5 * time.Millisecond)
				}
			}()
		})
	})
	<-passed
	require.NoError(t, rerr)
	require.Len(t, rescued, 1, "a pass declared the row of the lost reply dead")
	require.Zero(t, rescued[0].Total())
	require.NoError(t, err, "the worker registered")
	require.True(t, b.alive(t, w), "it holds its lock once Start returns")
	dead, gone := b.deadAt(t, clientID)
	require.False(t, gone)
	require.False(t, dead, "the declaration that took nothing back is taken back")
	res, err := r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res, "the registered worker is left alone")
}

// A worker whose row's rescue took jobs back (a process that reused a
// dead worker's client id) learns it: Start returns ErrDeclaredDead, and
// writes nothing, and the process stops rather than work fenced.
func TestWorker_RegistersFindsItselfDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	first := b.worker(t, time.Hour, nil)
	b.running(t, first.ClientID(), 1, 25)
	b.kill(t, first)
	res, err := b.rescuer(t, nil).RescueOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, 1, res[0].Total())
	var before time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT started_at FROM ferry_worker WHERE client_id = $1", first.ClientID()).Scan(&before))

	_, err = b.startWorker(t, first.ClientID(), time.Hour, nil, nil)
	require.ErrorIs(t, err, ErrDeclaredDead)
	dead, _ := b.deadAt(t, first.ClientID())
	require.True(t, dead)
	var after time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT started_at FROM ferry_worker WHERE client_id = $1", first.ClientID()).Scan(&after))
	require.Equal(t, before, after, "the dead row is left as it was")
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
