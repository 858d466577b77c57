package locks_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/locks"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	pool *pgxpool.Pool
	obs  *countObserver
	a, b *locks.Client
}

// setup gives each test a database of its own: waiters LISTEN, and the
// channel is per database.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	obs := &countObserver{}
	return &testBundle{
		pool: pool,
		obs:  obs,
		// An hour's poll: a waiter that wakes does so for a notification
		// or an expiry, never for the poll.
		a: locks.New(pool, locks.Config{Holder: "a", PollInterval: time.Hour, Observer: obs}),
		b: locks.New(pool, locks.Config{Holder: "b", PollInterval: time.Hour}),
	}
}

type countObserver struct{ acquired, released, lost atomic.Int64 }

func (o *countObserver) Acquired(string) { o.acquired.Add(1) }
func (o *countObserver) Released(string) { o.released.Add(1) }
func (o *countObserver) Lost(string)     { o.lost.Add(1) }

func release(t *testing.T, l *locks.Lock) {
	t.Helper()
	t.Cleanup(func() { _ = l.Release(context.Background()) })
}

func TestClient_Acquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OneHolderAndIncreasingTokens", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l1, err := b.a.Acquire(ctx, "report", locks.Options{TTL: time.Minute})
		require.NoError(t, err)
		require.True(t, l1.Held())

		_, err = b.b.Acquire(ctx, "report", locks.Options{TTL: time.Minute})
		require.ErrorIs(t, err, locks.ErrNotAcquired)
		var held *locks.HeldError
		require.ErrorAs(t, err, &held)
		require.Equal(t, "a", held.Holder.Holder)
		require.Equal(t, l1.Token(), held.Holder.Token)
		require.Positive(t, held.Holder.ExpiresIn)

		require.NoError(t, l1.Release(ctx))
		require.False(t, l1.Held())
		require.ErrorIs(t, context.Cause(l1.Context()), locks.ErrReleased)
		require.NoError(t, l1.Release(ctx), "a second release is a no-op")

		l2, err := b.b.Acquire(ctx, "report", locks.Options{TTL: time.Minute})
		require.NoError(t, err)
		release(t, l2)
		require.Greater(t, l2.Token(), l1.Token())
		require.EqualValues(t, 1, b.obs.acquired.Load())
		require.EqualValues(t, 1, b.obs.released.Load())
	})

	t.Run("InvalidName", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, name := range []string{"", "a b", "ünï", string(make([]byte, 129))} {
			_, err := b.a.Acquire(ctx, name, locks.Options{})
			require.ErrorIs(t, err, locks.ErrInvalidName, name)
		}
		// The database checks the same, for plain-SQL writers.
		_, err := b.pool.Exec(ctx, `INSERT INTO ferry_lock (name, token, holder, acquired_at, expires_at)
			VALUES ('a b', 1, 'x', now(), now())`)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "ferry_lock_name_format", pgErr.ConstraintName)
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM ferry_lock`).Scan(&n))
		require.Zero(t, n)
	})

	t.Run("Unavailable", func(t *testing.T) {
		t.Parallel()
		// Nothing listens on port 1.
		pool, err := pgxpool.New(ctx, "postgres://ferry:ferry@127.0.0.1:1/ferry?sslmode=disable&connect_timeout=2")
		require.NoError(t, err)
		defer pool.Close()
		c := locks.New(pool, locks.Config{})
		_, err = c.Acquire(ctx, "report", locks.Options{})
		require.ErrorIs(t, err, locks.ErrUnavailable)
		_, err = c.Acquire(ctx, "report", locks.Options{Wait: time.Second})
		require.ErrorIs(t, err, locks.ErrUnavailable)
	})

	t.Run("ReleaseWakesWaiter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l1, err := b.a.Acquire(ctx, "report", locks.Options{TTL: time.Hour})
		require.NoError(t, err)
		got := make(chan *locks.Lock, 1)
		go func() {
			l, err := b.b.Acquire(ctx, "report", locks.Options{TTL: time.Hour, Wait: time.Minute})
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- l
		}()
		waitForListener(t, b.pool)
		require.NoError(t, l1.Release(ctx))
		// The holder's ttl and the waiter's poll are an hour: only the
		// release's NOTIFY can wake the waiter before the test times out.
		l2 := <-got
		require.NotNil(t, l2)
		release(t, l2)
		require.Equal(t, l1.Token()+1, l2.Token())
	})

	t.Run("WaitRunsOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l1, err := b.a.Acquire(ctx, "report", locks.Options{TTL: time.Hour})
		require.NoError(t, err)
		release(t, l1)
		_, err = b.b.Acquire(ctx, "report", locks.Options{TTL: time.Hour, Wait: 200 * time.Millisecond})
		var held *locks.HeldError
		require.ErrorAs(t, err, &held)
		require.Equal(t, "a", held.Holder.Holder)
		require.ErrorIs(t, err, locks.ErrNotAcquired)
	})

	t.Run("DeadHolderExpires", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		pool := pgtest.PoolFor(t, url)
		// A holder that died: its row, unrenewed.
		_, err := pool.Exec(ctx, `INSERT INTO ferry_lock (name, token, holder, acquired_at, expires_at)
			VALUES ('report', 7, 'dead', clock_timestamp(), clock_timestamp() + interval '1 hour')`)
		require.NoError(t, err)
		// The waiter's statements are traced; it polls every second, so it
		// sees the expiry brought near below, and its attempt at the
		// expiry is the one that takes the lock (no release is sent).
		wpool, tracer := tracedPool(t, url)
		waiter := locks.New(wpool, locks.Config{Holder: "waiter", PollInterval: time.Second})
		type result struct {
			l   *locks.Lock
			err error
		}
		done := make(chan result, 1)
		go func() {
			l, err := waiter.Acquire(ctx, "report", locks.Options{TTL: time.Hour, Wait: locks.Forever})
			done <- result{l, err}
		}()
		waitForListener(t, pool)
		var deadExpiry time.Time
		require.NoError(t, pool.QueryRow(ctx, `UPDATE ferry_lock SET expires_at = clock_timestamp() + interval '3 seconds'
			WHERE name = 'report' RETURNING expires_at`).Scan(&deadExpiry))
		res := <-done
		require.NoError(t, res.err)
		release(t, res.l)
		require.EqualValues(t, 8, res.l.Token())
		var acquiredAt time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT acquired_at FROM ferry_lock WHERE name = 'report'`).Scan(&acquiredAt))
		require.False(t, acquiredAt.Before(deadExpiry), "taken only once the dead holder's lock expired")
		// The attempt that took it waited in the database for the expiry,
		// in its round trip: the waiter's own wake-up is not on the path
		// from the expiry to the next holder.
		require.Equal(t, []string{"await expiry", "acquire"}, tracer.lastBatch(),
			"the attempt that took the lock was sent with the statement that waits for the expiry")
	})
}

// tracedPool is a pool on url whose statements an attemptTracer sees.
func tracedPool(t *testing.T, url string) (*pgxpool.Pool, *attemptTracer) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	tracer := &attemptTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, tracer
}

// attemptTracer records the statements of the last batch a pool sent, and
// counts the attempts sent alone.
type attemptTracer struct {
	mu       sync.Mutex
	batch    []string
	attempts atomic.Int64
}

func (a *attemptTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "WITH free AS") {
		a.attempts.Add(1)
	}
	return ctx
}
func (*attemptTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (a *attemptTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.batch = nil
	return ctx
}
func (a *attemptTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case d.Err != nil:
		a.batch = append(a.batch, "error: "+d.Err.Error())
	case strings.HasPrefix(d.SQL, "SELECT pg_sleep"):
		a.batch = append(a.batch, "await expiry")
	case strings.HasPrefix(d.SQL, "WITH free AS"):
		a.batch = append(a.batch, "acquire")
	default:
		a.batch = append(a.batch, d.SQL)
	}
}
func (*attemptTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (a *attemptTracer) lastBatch() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.batch
}

// waitForListener waits until a waiter has made its first try and sleeps:
// it LISTENs from before that try.
func waitForListener(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle'
			  AND query LIKE 'WITH free AS%' AND pid <> pg_backend_pid()`).Scan(&n)
		return err == nil && n > 0
	}, time.Minute, 5*time.Millisecond)
}

func TestLock_Renewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("KeepsTheLockPastItsTTL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A ttl long enough that a loaded machine's scheduling delays
		// cannot make a renewal late.
		l, err := b.a.Acquire(ctx, "report", locks.Options{TTL: 2 * time.Second})
		require.NoError(t, err)
		release(t, l)
		var first time.Time
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT expires_at FROM ferry_lock WHERE name = 'report'`).Scan(&first))
		// Renewals move expires_at past the first expiry, and the lock is
		// still this holder's.
		require.Eventually(t, func() bool {
			var later bool
			err := b.pool.QueryRow(ctx, `SELECT expires_at > $1::timestamptz + interval '2 seconds' FROM ferry_lock WHERE name = 'report'`, first).Scan(&later)
			return err == nil && later
		}, time.Minute, 10*time.Millisecond)
		require.True(t, l.Held())
		_, err = b.b.Acquire(ctx, "report", locks.Options{})
		require.ErrorIs(t, err, locks.ErrNotAcquired)
	})

	t.Run("TakenRowIsLost", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l, err := b.a.Acquire(ctx, "report", locks.Options{TTL: 300 * time.Millisecond})
		require.NoError(t, err)
		// Someone else acquired it (as after an expiry the holder missed).
		_, err = b.pool.Exec(ctx, `UPDATE ferry_lock SET token = token + 1, holder = 'other' WHERE name = 'report'`)
		require.NoError(t, err)
		<-l.Lost()
		require.False(t, l.Held())
		require.False(t, l.Expiry().After(time.Now()), "another holder may act already: Expiry has come")
		require.ErrorIs(t, context.Cause(l.Context()), locks.ErrLost)
		require.ErrorIs(t, l.Release(ctx), locks.ErrLost)
		require.EqualValues(t, 1, b.obs.lost.Load())
		var holder string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT holder FROM ferry_lock WHERE name = 'report'`).Scan(&holder))
		require.Equal(t, "other", holder, "the loser's release leaves the new holder alone")
	})

	t.Run("BlockedRenewalsLoseBeforeExpiry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The holder gives up a fifth of the ttl (600 ms) before the
		// database's expiry: a margin this test's read of expires_at has
		// to fit in, on a loaded machine too.
		l, err := b.a.Acquire(ctx, "report", locks.Options{TTL: 3 * time.Second})
		require.NoError(t, err)
		// Renewals cannot get through: the table is locked.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `LOCK TABLE ferry_lock IN ACCESS EXCLUSIVE MODE`)
		require.NoError(t, err)
		<-l.Lost()
		require.True(t, time.Now().Before(l.Expiry()), "lost at the deadline, a fifth of the ttl before Expiry")
		// The holder gave up while the database still counts it as the
		// holder: it stops acting before anyone else can start.
		var live bool
		require.NoError(t, tx.QueryRow(ctx, `SELECT expires_at > clock_timestamp() FROM ferry_lock WHERE name = 'report'`).Scan(&live))
		require.True(t, live, "lost only after the database's expiry")
		require.NoError(t, tx.Rollback(ctx))
		require.ErrorIs(t, l.Release(ctx), locks.ErrLost)
	})
}

func TestFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("StaleTokenFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l1, err := b.a.Acquire(ctx, "report", locks.Options{TTL: time.Minute})
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return l1.Fence(ctx, tx) }))
		require.NoError(t, l1.Release(ctx))
		l2, err := b.b.Acquire(ctx, "report", locks.Options{TTL: time.Minute})
		require.NoError(t, err)
		release(t, l2)
		err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return locks.Fence(ctx, tx, "report", l1.Token()) })
		require.ErrorIs(t, err, locks.ErrLost)
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return locks.Fence(ctx, tx, "report", l2.Token()) }))
		err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return locks.Fence(ctx, tx, "never", 1) })
		require.ErrorIs(t, err, locks.ErrLost)
	})

	t.Run("ExpiredTokenFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.pool.Exec(ctx, `INSERT INTO ferry_lock (name, token, holder, acquired_at, expires_at)
			VALUES ('report', 3, 'dead', clock_timestamp(), clock_timestamp())`)
		require.NoError(t, err)
		err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return locks.Fence(ctx, tx, "report", 3) })
		require.ErrorIs(t, err, locks.ErrLost)
	})

	t.Run("NewerAcquisitionWaitsForFencedWrite", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A holder whose lock expires while its fenced transaction is open.
		_, err := b.pool.Exec(ctx, `INSERT INTO ferry_lock (name, token, holder, acquired_at, expires_at)
			VALUES ('report', 1, 'slow', clock_timestamp(), clock_timestamp() + interval '300 milliseconds')`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `CREATE TABLE fenced (token bigint, at timestamptz DEFAULT clock_timestamp())`)
		require.NoError(t, err)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		require.NoError(t, locks.Fence(ctx, tx, "report", 1))
		require.Eventually(t, func() bool {
			var expired bool
			err := b.pool.QueryRow(ctx, `SELECT expires_at <= clock_timestamp() FROM ferry_lock WHERE name = 'report'`).Scan(&expired)
			return err == nil && expired
		}, time.Minute, 5*time.Millisecond)

		// The acquirer's attempts are traced: it tries the expired lock,
		// finds its row locked by the fenced transaction, and tries again.
		apool, tracer := tracedPool(t, b.pool.Config().ConnString())
		acquirer := locks.New(apool, locks.Config{Holder: "next", PollInterval: time.Hour})
		got := make(chan *locks.Lock, 1)
		go func() {
			l, err := acquirer.Acquire(ctx, "report", locks.Options{TTL: time.Minute, Wait: time.Minute})
			if err != nil {
				t.Errorf("acquire: %v", err)
			}
			got <- l
		}()
		require.Eventually(t, func() bool { return tracer.attempts.Load() >= 3 }, time.Minute, time.Millisecond)
		var token int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT token FROM ferry_lock WHERE name = 'report'`).Scan(&token))
		require.EqualValues(t, 1, token, "not taken while the fenced transaction is open")
		_, err = tx.Exec(ctx, `INSERT INTO fenced (token) VALUES (1)`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		l := <-got
		require.NotNil(t, l)
		release(t, l)
		require.EqualValues(t, 2, l.Token())
		// The stale write committed before the new acquisition.
		var before bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT at FROM fenced) < acquired_at FROM ferry_lock WHERE name = 'report'`).Scan(&before))
		require.True(t, before)
		// And a write fenced by the old token now fails.
		err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return locks.Fence(ctx, tx, "report", 1) })
		require.ErrorIs(t, err, locks.ErrLost)
	})
}

// TestClient_Acquire_WaitRunsOutOnALockedRow: a free lock whose row another
// transaction holds for the whole wait (a fenced write of a holder whose
// lease ran out) is not taken, and the wait ends in ErrNotAcquired.
func TestClient_Acquire_WaitRunsOutOnALockedRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.pool.Exec(ctx, `INSERT INTO ferry_lock (name, token, holder, acquired_at, expires_at)
		VALUES ('report', 1, 'slow', clock_timestamp() - interval '1 minute', clock_timestamp() - interval '1 second')`)
	require.NoError(t, err)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The fence fails (expired) and keeps the row locked until tx ends.
	require.ErrorIs(t, locks.Fence(ctx, tx, "report", 1), locks.ErrLost)

	_, err = b.b.Acquire(ctx, "report", locks.Options{TTL: time.Minute, Wait: 300 * time.Millisecond})
	require.ErrorIs(t, err, locks.ErrNotAcquired)
	var held *locks.HeldError
	require.False(t, errors.As(err, &held), "no holder to name: %v", err)
	require.Contains(t, err.Error(), "before any attempt saw a live holder")
	require.NoError(t, tx.Rollback(ctx))
	var token int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT token FROM ferry_lock WHERE name = 'report'`).Scan(&token))
	require.EqualValues(t, 1, token, "not taken")
}

// TestClient_Acquire_WaitRunsOutBeforeAnAttempt: a wait that runs out
// before its first attempt (here before it has a connection; on a loaded
// machine, a short wait) ends in the same ErrNotAcquired as one whose
// attempts saw no holder, naming the lock, and takes nothing.
func TestClient_Acquire_WaitRunsOutBeforeAnAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.b.Acquire(ctx, "report", locks.Options{TTL: time.Minute, Wait: time.Nanosecond})
	require.ErrorIs(t, err, locks.ErrNotAcquired)
	var held *locks.HeldError
	require.False(t, errors.As(err, &held), "no holder to name: %v", err)
	require.Contains(t, err.Error(), "report: the wait ran out before any attempt saw a live holder")
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM ferry_lock WHERE name = 'report'`).Scan(&n))
	require.Zero(t, n, "not taken")
}

// TestClient_Acquire_HeldLockIsOnlyRead: an attempt on a held lock locks
// nothing, so it neither waits for the holder's fenced transaction nor
// makes the holder's fences and release wait for it.
func TestClient_Acquire_HeldLockIsOnlyRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	l1, err := b.a.Acquire(ctx, "report", locks.Options{TTL: time.Minute})
	require.NoError(t, err)
	release(t, l1)
	_, err = b.b.Acquire(ctx, "report", locks.Options{TTL: time.Minute})
	var held *locks.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, l1.Token(), held.Holder.Token)
	// A row lock leaves its transaction's id in the row's xmax.
	var xmax string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT xmax::text FROM ferry_lock WHERE name = 'report'`).Scan(&xmax))
	require.Equal(t, "0", xmax, "the attempt locked the row")

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, l1.Fence(ctx, tx))
	// An attempt that locked the row would wait for tx; this one answers
	// while tx is open (the deadline only ends a wait that never would).
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = b.b.Acquire(actx, "report", locks.Options{TTL: time.Minute})
	require.ErrorAs(t, err, &held)
	require.Equal(t, l1.Token(), held.Holder.Token)
	require.NoError(t, tx.Commit(ctx))
}

func TestList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	l1, err := b.a.Acquire(ctx, "b-lock", locks.Options{TTL: time.Minute})
	require.NoError(t, err)
	release(t, l1)
	l2, err := b.b.Acquire(ctx, "a-lock", locks.Options{TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
	hs, err := b.a.List(ctx)
	require.NoError(t, err)
	require.Len(t, hs, 1, "a released lock is not listed")
	require.Equal(t, "b-lock", hs[0].Name)
	require.Equal(t, "a", hs[0].Holder)
	require.Equal(t, l1.Token(), hs[0].Token)
}
