package election

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/pgtest"
	"github.com/ferryq/ferry/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	testTick  = time.Second
	testProbe = time.Second
)

// activity counts, across electors, how many run their runnables now.
type activity struct {
	active atomic.Int32
	starts atomic.Int32
}

func (a *activity) runnable(ctx context.Context) error {
	a.active.Add(1)
	a.starts.Add(1)
	defer a.active.Add(-1)
	<-ctx.Done()
	return nil
}

type testBundle struct {
	url  string
	pool *pgxpool.Pool
	act  *activity
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	url := pgtest.NewDatabase(t, true)
	return &testBundle{url: url, pool: pgtest.PoolFor(t, url), act: &activity{}}
}

func (b *testBundle) elector(t *testing.T, mod func(*Config)) *Elector {
	t.Helper()
	cfg := Config{DatabaseURL: b.url, Tick: testTick, Probe: testProbe, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg)
	require.NoError(t, err)
	e.Register("activity", b.act.runnable)
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(e.Stop)
	return e
}

// holders counts the sessions holding key in the bundle's database.
func holders(t *testing.T, pool *pgxpool.Pool, key int64) int {
	t.Helper()
	hi, lo := lockParts(key)
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND granted
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, hi, lo).Scan(&n))
	return n
}

func waitLeader(t *testing.T, within time.Duration, electors ...*Elector) *Elector {
	t.Helper()
	var leader *Elector
	require.Eventually(t, func() bool {
		for _, e := range electors {
			if e.IsLeader() {
				leader = e
				return true
			}
		}
		return false
	}, within, 10*time.Millisecond, "no leader within %s", within)
	return leader
}

// sampler checks the invariants every 50 ms until stopped: at most one
// holder of the key in the database, at most one process running runnables.
type sampler struct {
	maxHolders, maxActive atomic.Int32
	stop                  chan struct{}
	done                  chan struct{}
}

func (b *testBundle) sample(t *testing.T, key int64) *sampler {
	t.Helper()
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	hi, lo := lockParts(key)
	go func() {
		defer close(s.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			var n int32
			err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
				WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND granted
				  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, hi, lo).Scan(&n)
			if err == nil && n > s.maxHolders.Load() {
				s.maxHolders.Store(n)
			}
			if a := b.act.active.Load(); a > s.maxActive.Load() {
				s.maxActive.Store(a)
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(s.finish)
	return s
}

func (s *sampler) finish() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func TestKeys_Unique(t *testing.T) {
	t.Parallel()
	seen := map[int64]string{}
	for _, k := range Keys {
		if owner, dup := seen[k.Key]; dup {
			t.Fatalf("advisory key %d has two owners: %s and %s", k.Key, owner, k.Owner)
		}
		seen[k.Key] = k.Owner
	}
	require.Equal(t, migrations.LockKey, KeyMigrations, "the migrations package takes the key the table names")
	require.Equal(t, "election", seen[KeyElection])
}

func TestLockParts(t *testing.T) {
	t.Parallel()
	hi, lo := lockParts(911000001)
	require.Equal(t, int64(0), hi)
	require.Equal(t, int64(911000001), lo)
	hi, lo = lockParts(-5)
	require.Equal(t, int64(4294967295), hi)
	require.Equal(t, int64(4294967291), lo)
}

func TestNew_Validate(t *testing.T) {
	t.Parallel()
	_, err := New(Config{})
	require.ErrorContains(t, err, "database URL is empty")
	_, err = New(Config{DatabaseURL: "postgres://x@127.0.0.1/x", Tick: time.Second, TickTimeout: 2 * time.Second})
	require.ErrorContains(t, err, "under the tick")
	_, err = New(Config{DatabaseURL: "postgres://x@127.0.0.1/x", Probe: time.Millisecond})
	require.ErrorContains(t, err, "probe")
	_, err = New(Config{DatabaseURL: "postgres://u:s3cret@127.0.0.1/x?pool_max_conns=x", Tick: time.Second})
	if err != nil {
		require.NotContains(t, err.Error(), "s3cret")
	}
}

func TestElector_Uncontended(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	reg := prometheus.NewRegistry()
	e := b.elector(t, func(c *Config) { c.Registerer = reg })

	// First term ever: no predecessor record, so the start is deferred one
	// tick plus its timeout.
	start := time.Now()
	waitLeader(t, 5*time.Second, e)
	require.GreaterOrEqual(t, time.Since(start), testTick, "a first term defers its start")
	require.Eventually(t, func() bool { return b.act.active.Load() == 1 }, time.Second, 5*time.Millisecond)
	require.Equal(t, 1, holders(t, b.pool, KeyElection))

	st := e.Status()
	require.Equal(t, StateLeader, st.State)
	require.Positive(t, st.Term)
	require.Equal(t, st.Term, e.Term())
	require.Equal(t, 1.0, testutil.ToFloat64(e.mIsLeader))
	require.Equal(t, float64(st.Term), testutil.ToFloat64(e.mTerm))

	// The holder is idle (no transaction left open) and named.
	var state, app string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT state, application_name FROM pg_stat_activity WHERE pid = $1", st.BackendPID).Scan(&state, &app))
	require.Equal(t, "idle", state)
	require.Equal(t, e.holder, app)
	require.Regexp(t, `^ferry-leader:.+:\d+$`, app)

	e.Stop()
	require.False(t, e.IsLeader())
	require.Zero(t, b.act.active.Load(), "runnables stop before Stop returns")
	require.Equal(t, 0, holders(t, b.pool, KeyElection))
	var resigned bool
	var startedAt *time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT resigned_at IS NOT NULL, started_at FROM ferry_leader_term WHERE term = $1", st.Term).Scan(&resigned, &startedAt))
	require.True(t, resigned)
	require.NotNil(t, startedAt)
	require.Equal(t, StateStopped, e.Status().State)
}

func TestElector_TwoElectorsOneLeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.sample(t, KeyElection)
	e1 := b.elector(t, nil)
	e2 := b.elector(t, nil)
	leader := waitLeader(t, 5*time.Second, e1, e2)
	standby := e1
	if leader == e1 {
		standby = e2
	}
	require.Eventually(t, func() bool { return standby.Status().State == StateStandby }, 3*time.Second, 10*time.Millisecond)
	time.Sleep(2 * testProbe) // let the standby probe a couple of times
	require.False(t, standby.IsLeader())
	require.Equal(t, 1, holders(t, b.pool, KeyElection))
	s.finish()
	require.EqualValues(t, 1, s.maxHolders.Load())
	require.EqualValues(t, 1, s.maxActive.Load())
	require.EqualValues(t, 1, b.act.starts.Load())
}

func TestElector_OtherDatabaseDoesNotConfuse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := setup(t)
	// A leader of the same key in another database on the same server.
	eo := other.elector(t, nil)
	waitLeader(t, 5*time.Second, eo)

	e := b.elector(t, nil)
	waitLeader(t, 5*time.Second, e)
	require.Equal(t, 1, holders(t, b.pool, KeyElection))
	require.Equal(t, 1, holders(t, other.pool, KeyElection))
	// Both keep leading through several ticks: neither's ownership query
	// sees the other's lock.
	time.Sleep(2*testTick + 200*time.Millisecond)
	require.True(t, e.IsLeader())
	require.True(t, eo.IsLeader())
}

func TestElector_TerminateBackend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	s := b.sample(t, KeyElection)
	e1 := b.elector(t, nil)
	e2 := b.elector(t, nil)
	old := waitLeader(t, 5*time.Second, e1, e2)
	next := e1
	if old == e1 {
		next = e2
	}
	oldTerm := old.Term()
	pid := old.Status().BackendPID

	var ok bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok))
	require.True(t, ok)
	killed := time.Now()

	// The old leader demotes within one tick (plus the check's own time).
	require.Eventually(t, func() bool { return !old.IsLeader() }, testTick+old.cfg.TickTimeout+200*time.Millisecond, 5*time.Millisecond)
	demotedAfter := time.Since(killed)
	t.Logf("demoted %s after pg_terminate_backend", demotedAfter)

	// Someone leads again with a newer term; its runnables started only after
	// the old ones stopped (the sampler never saw two).
	newLeader := waitLeader(t, testProbe+2*testTick+time.Second, e1, e2)
	require.Greater(t, newLeader.Term(), oldTerm)
	s.finish()
	require.LessOrEqual(t, s.maxHolders.Load(), int32(1), "holder count exceeded 1")
	require.LessOrEqual(t, s.maxActive.Load(), int32(1), "two processes ran runnables at once")
	_ = next
}

func TestElector_GracefulHandover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.sample(t, KeyElection)
	// A long probe: only the resignation notice can make the handover fast.
	slow := func(c *Config) { c.Probe = time.Minute }
	e1 := b.elector(t, slow)
	waitLeader(t, 5*time.Second, e1)
	e2 := b.elector(t, slow)
	require.Eventually(t, func() bool { return e2.Status().State == StateStandby }, 5*time.Second, 10*time.Millisecond)

	start := time.Now()
	e1.Stop()
	waitLeader(t, time.Second, e2)
	t.Logf("graceful handover took %s", time.Since(start))
	require.Less(t, time.Since(start), time.Second)
	s.finish()
	require.LessOrEqual(t, s.maxActive.Load(), int32(1))
	require.LessOrEqual(t, s.maxHolders.Load(), int32(1))
}

func TestElector_FailClosed(t *testing.T) {
	t.Parallel()

	t.Run("term table missing", func(t *testing.T) {
		t.Parallel()
		// An unmigrated database: the lock is free but the term cannot be
		// recorded, so the elector must release it and start nothing.
		url := pgtest.NewDatabase(t, false)
		b := &testBundle{url: url, pool: pgtest.PoolFor(t, url), act: &activity{}}
		e := b.elector(t, nil)
		require.Eventually(t, func() bool { return e.Status().LastError != "" }, 5*time.Second, 10*time.Millisecond)
		require.Contains(t, e.Status().LastError, "ferry_leader_term")
		// It released the lock (it retries each probe, holding it for a few
		// milliseconds each time) and never started a runnable.
		require.Eventually(t, func() bool { return holders(t, b.pool, KeyElection) == 0 }, 2*time.Second, 10*time.Millisecond)
		time.Sleep(testTick + 500*time.Millisecond)
		require.False(t, e.IsLeader())
		require.Zero(t, b.act.starts.Load())
		require.Equal(t, StateStandby, e.Status().State)
	})

	t.Run("database unreachable", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close()) // nothing listens there now
		b := &testBundle{url: "postgres://ferry:s3cretpw@127.0.0.1:" + strconv.Itoa(port) + "/ferry?connect_timeout=1", act: &activity{}}
		e := b.elector(t, nil)
		require.Eventually(t, func() bool { return e.Status().LastError != "" }, 5*time.Second, 10*time.Millisecond)
		require.False(t, e.IsLeader())
		require.Zero(t, b.act.starts.Load())
		require.NotContains(t, e.Status().LastError, "s3cretpw")
		require.Equal(t, StateStandby, e.Status().State)
	})
}

func TestElector_RunnableRestartsWhileLeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	second := make(chan struct{})
	e, err := New(Config{DatabaseURL: b.url, Tick: testTick, Probe: testProbe, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	e.Register("flaky", func(ctx context.Context) error {
		switch calls.Add(1) {
		case 1:
			return errors.New("first run fails")
		case 2:
			panic("second run panics")
		case 3:
			close(second)
		}
		<-ctx.Done()
		return nil
	})
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(e.Stop)
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatalf("runnable not restarted: %d calls", calls.Load())
	}
	require.True(t, e.IsLeader(), "a failing runnable does not cost the leadership")
}

func TestElector_Fence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e := b.elector(t, nil)
	waitLeader(t, 5*time.Second, e)

	fence := func() error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return e.Fence(ctx, tx) })
	}
	require.NoError(t, fence())

	// A newer term (another leader took over) makes this one stale.
	_, err := b.pool.Exec(ctx, "INSERT INTO ferry_leader_term (key, holder, hostname, pid, backend_pid) VALUES ($1, 'other', 'h', 1, 1)", KeyElection)
	require.NoError(t, err)
	require.ErrorIs(t, fence(), ErrNotLeader)
}

func TestElector_StopWithoutStart(t *testing.T) {
	t.Parallel()
	e, err := New(Config{DatabaseURL: "postgres://x@127.0.0.1/x"})
	require.NoError(t, err)
	e.Stop()
	e.Stop()
}

func TestElector_PoolSettingsInURL(t *testing.T) {
	t.Parallel()
	// DATABASE_URL may carry pgxpool settings for the job pool; the lock
	// connection must not send them to the server.
	b := setup(t)
	sep := "?"
	if strings.Contains(b.url, "?") {
		sep = "&"
	}
	b.url += sep + "pool_max_conns=7&pool_min_conns=1"
	e := b.elector(t, nil)
	waitLeader(t, 5*time.Second, e)
	require.Empty(t, e.Status().LastError)
}

func TestCurrentHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h, err := CurrentHolder(ctx, b.pool, KeyElection)
	require.NoError(t, err)
	require.Nil(t, h, "no one holds the lock")

	// A holder that has not recorded a term is still named, from its
	// application_name.
	conn, err := pgx.Connect(ctx, b.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	_, err = conn.Exec(ctx, "SET application_name = 'ferry-leader:some-host:4242'")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", KeyElection)
	require.NoError(t, err)
	h, err = CurrentHolder(ctx, b.pool, KeyElection)
	require.NoError(t, err)
	require.NotNil(t, h)
	require.Equal(t, 4242, *h.PID)
	require.Equal(t, "some-host", h.Hostname)
	require.Nil(t, h.Term)
	require.Equal(t, "idle", h.SessionState)
}
