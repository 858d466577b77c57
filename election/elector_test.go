package election

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
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
	// runCtx holds, by elector, the context of its latest term's
	// "context" runnable: what Fence takes.
	runCtx sync.Map
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
	e.Register("context", func(ctx context.Context) error {
		b.runCtx.Store(e, ctx)
		<-ctx.Done()
		return nil
	})
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(e.Stop)
	return e
}

// runnableCtx returns the context e's runnables of its current term run
// with, once they run.
func (b *testBundle) runnableCtx(t *testing.T, e *Elector) context.Context {
	t.Helper()
	var ctx context.Context
	require.Eventually(t, func() bool {
		v, ok := b.runCtx.Load(e)
		if ok {
			ctx = v.(context.Context)
		}
		return ok && ctx.Err() == nil
	}, 10*time.Second, 5*time.Millisecond, "the term's runnables did not start")
	return ctx
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
	_, err = New(Config{DatabaseURL: "postgres://x@127.0.0.1/x", Tick: time.Second, TickTimeout: -time.Second})
	require.ErrorContains(t, err, "tick timeout -1s must be above zero")
	_, err = New(Config{DatabaseURL: "postgres://x@127.0.0.1/x", Probe: time.Millisecond})
	require.ErrorContains(t, err, "probe")
	_, err = New(Config{DatabaseURL: "postgres://x@127.0.0.1/x", Tick: time.Millisecond})
	require.ErrorContains(t, err, "leader tick")
	_, err = New(Config{DatabaseURL: "postgres://x@127.0.0.1/x", Tick: 50 * time.Millisecond, Probe: time.Second})
	require.NoError(t, err, "a 50 ms tick is allowed")
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
	logs := &logtest.Recorder{}
	e := b.elector(t, func(c *Config) { c.Registerer = reg; c.Logger = logs.Logger() })

	// First term ever: no predecessor could still run, so no deferral.
	waitLeader(t, 5*time.Second, e)
	acquired := logs.Find(t, "election: leader acquired")
	require.Equal(t, false, acquired["deferred"], "the first term of a key starts at once")
	require.NotContains(t, acquired, "previous_term")
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
	var reason string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT resigned_at IS NOT NULL, started_at, ended_reason FROM ferry_leader_term WHERE term = $1", st.Term).Scan(&resigned, &startedAt, &reason))
	require.True(t, resigned)
	require.Equal(t, "resigned", reason)
	require.NotNil(t, startedAt)
	require.Equal(t, StateStopped, e.Status().State)
	logs.Find(t, "election: resigned")
}

// A stop that lands while the tick's query is in flight must not cancel
// it: the resignation needs the connection.
func TestElector_StopDuringTickResignsCleanly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	logs := &logtest.Recorder{}
	e, err := New(Config{DatabaseURL: b.url, Tick: 300 * time.Millisecond, TickTimeout: 250 * time.Millisecond, Probe: testProbe, Logger: logs.Logger()})
	require.NoError(t, err)
	// Every tick takes 150 ms on the server, within its timeout.
	e.ownershipSQL = "SELECT 1 FROM pg_sleep(0.15), (" + ownershipSQL + ") held"
	e.Register("activity", b.act.runnable)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(e.Stop)
	waitLeader(t, 5*time.Second, e)
	term := e.Term()

	// Wait until the lock session runs the tick, then stop.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND query LIKE '%pg_sleep%'`, e.holder).Scan(&n))
		return n == 1
	}, 5*time.Second, 2*time.Millisecond)
	e.Stop()

	logs.Find(t, "election: resigned")
	require.Empty(t, logs.All("election: resigned uncleanly"))
	var resigned bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT resigned_at IS NOT NULL FROM ferry_leader_term WHERE term = $1", term).Scan(&resigned))
	require.True(t, resigned, "the term is stamped resigned")
}

// Many stops at random moments of a 50 ms tick: every successor sees its
// predecessor resigned.
func TestElector_HandoverUnderFastTicks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.sample(t, KeyElection)
	logs := &logtest.Recorder{}
	fast := func(c *Config) {
		// A check may take a second on a loaded machine without costing
		// the term: only a stop should end one here.
		c.Tick, c.TickTimeout, c.Probe = 50*time.Millisecond, time.Second, time.Minute
		c.Logger = logs.Logger()
	}
	cur := b.elector(t, fast)
	waitLeader(t, 5*time.Second, cur)
	const rounds = 30
	for i := range rounds {
		next := b.elector(t, fast)
		require.Eventually(t, func() bool { return next.Status().State == StateStandby }, 5*time.Second, time.Millisecond)
		// Land the stop anywhere in the tick.
		time.Sleep(time.Duration(i%10) * 5 * time.Millisecond)
		cur.Stop()
		waitLeader(t, 5*time.Second, next)
		cur = next
	}
	failovers := logs.All("election: failover acquired")
	require.Len(t, failovers, rounds, "each standby took over by waiting on the lock")
	for _, rec := range failovers {
		require.Equal(t, true, rec["previous_resigned"], "a successor saw its predecessor unresigned: %v", rec)
		require.Equal(t, false, rec["deferred"])
	}
	require.Empty(t, logs.All("election: resigned uncleanly"))
	require.Empty(t, logs.All("election: demoted"))
	s.finish()
	require.LessOrEqual(t, s.maxActive.Load(), int32(1))
	require.LessOrEqual(t, s.maxHolders.Load(), int32(1))
}

// A leader whose runnables do not stop within a tick of their cancellation
// ends its term unresigned: its successor defers as after a crash.
func TestElector_StuckRunnableLeavesTermUnresigned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	release := make(chan struct{})
	returned := make(chan struct{})
	stuck, err := New(Config{DatabaseURL: b.url, Tick: 200 * time.Millisecond, Probe: testProbe, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	stuck.Register("stuck", func(ctx context.Context) error {
		defer close(returned)
		<-release // ignores ctx
		return nil
	})
	require.NoError(t, stuck.Start(ctx))
	t.Cleanup(func() {
		close(release)
		<-returned
		stuck.Stop()
	})
	waitLeader(t, 5*time.Second, stuck)
	term := stuck.Term()

	logs := &logtest.Recorder{}
	next := b.elector(t, func(c *Config) { c.Logger = logs.Logger() })
	require.Eventually(t, func() bool { return next.Status().State == StateStandby }, 5*time.Second, 5*time.Millisecond)
	stuck.Stop()

	var resigned bool
	var reason string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT resigned_at IS NOT NULL, ended_reason FROM ferry_leader_term WHERE term = $1", term).Scan(&resigned, &reason))
	require.False(t, resigned, "never stamped resigned while a runnable may run")
	require.Contains(t, reason, "abandoned")
	waitLeader(t, 5*time.Second, next)
	rec := logs.Find(t, "election: failover acquired")
	require.Equal(t, false, rec["previous_resigned"])
	require.Equal(t, true, rec["deferred"], "the successor waits out the stuck predecessor")
}

// The leader flag is up before any runnable runs: a runnable's first Fence
// succeeds.
func TestElector_LeaderBeforeRunnables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e, err := New(Config{DatabaseURL: b.url, Tick: testTick, Probe: testProbe, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	const n = 64
	results := make(chan error, n)
	for range n {
		e.Register("first-fence", func(ctx context.Context) error {
			if !e.IsLeader() {
				results <- errors.New("IsLeader false in a runnable")
			} else {
				results <- pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return e.Fence(ctx, tx) })
			}
			<-ctx.Done()
			return nil
		})
	}
	require.NoError(t, e.Start(ctx))
	t.Cleanup(e.Stop)
	for range n {
		select {
		case err := <-results:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("runnables did not start")
		}
	}
}

// A standby waits for the lock holding no snapshot, and takes over a
// crashed holder (which sent no resignation notice) within its poll, far
// under its one-hour probe.
func TestElector_StandbyWaitsWithoutASnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// A crashed leader: a session holding the key, with an unresigned term.
	crashed, err := pgx.Connect(ctx, b.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = crashed.Close(ctx) })
	_, err = crashed.Exec(ctx, "SELECT pg_advisory_lock($1)", KeyElection)
	require.NoError(t, err)
	_, err = crashed.Exec(ctx, "INSERT INTO ferry_leader_term (key, holder, hostname, pid, backend_pid) VALUES ($1, 'ferry-leader:gone:1', 'gone', 1, pg_backend_pid())", KeyElection)
	require.NoError(t, err)

	logs := &logtest.Recorder{}
	e := b.elector(t, func(c *Config) { c.Probe = time.Hour; c.Logger = logs.Logger() })
	require.Eventually(t, func() bool { return e.Status().State == StateStandby }, 5*time.Second, 5*time.Millisecond)
	// The standby has its lock session, and waits holding no snapshot: a
	// row deleted meanwhile is removed by VACUUM. (A wait in
	// pg_advisory_lock would hold the database's xmin horizon for as long
	// as the leader led.)
	var sessions int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`, e.holder).Scan(&sessions))
	require.Equal(t, 1, sessions)
	requireVacuumRemoves(t, b.url)

	require.NoError(t, crashed.Close(ctx))
	waitLeader(t, 10*time.Second, e) // far under the hour-long probe
	rec := logs.Find(t, "election: failover acquired")
	require.Equal(t, false, rec["previous_resigned"])
	require.Equal(t, true, rec["deferred"], "the crashed predecessor never resigned")
	var reason string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT ended_reason FROM ferry_leader_term WHERE holder = 'ferry-leader:gone:1'").Scan(&reason))
	require.Equal(t, "superseded", reason)
}

// requireVacuumRemoves deletes a row of a table of its own in the database
// at url and requires VACUUM to remove it: no session of the database holds
// back its xmin horizon. A try of the lock that began before the delete
// holds a snapshot for a moment, so a few rounds are allowed; a session
// that waits holding one fails every round.
func requireVacuumRemoves(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	var mu sync.Mutex
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n.Message)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE vacuum_probe (id int)")
	require.NoError(t, err)
	deadRE := regexp.MustCompile(`(\d+) are dead but not yet removable`)
	var last string
	for range 20 {
		_, err = conn.Exec(ctx, "INSERT INTO vacuum_probe VALUES (1)")
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "DELETE FROM vacuum_probe")
		require.NoError(t, err)
		mu.Lock()
		notices = nil
		mu.Unlock()
		_, err = conn.Exec(ctx, "VACUUM (VERBOSE) vacuum_probe")
		require.NoError(t, err)
		mu.Lock()
		last = strings.Join(notices, "\n")
		mu.Unlock()
		m := deadRE.FindStringSubmatch(last)
		require.NotNil(t, m, "VACUUM VERBOSE reported no tuple counts: %q", last)
		if m[1] == "0" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("VACUUM could not remove a deleted row: some session holds back the xmin horizon: %s", last)
}

// A leader stopped while it defers to a crashed predecessor ends its term
// unresigned: the predecessor may still run, so the next leader defers too.
func TestElector_StopWhileDeferringLeavesTermUnresigned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	crashedPredecessor(t, b)
	long := func(c *Config) { c.Tick = time.Minute }
	deferring := b.elector(t, long)
	require.Eventually(t, func() bool { return deferring.Status().State == StateDeferred }, 5*time.Second, 5*time.Millisecond)
	term := deferring.Term()
	deferring.Stop()
	require.Zero(t, b.act.starts.Load(), "nothing ran")

	var resigned bool
	var reason string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT resigned_at IS NOT NULL, ended_reason FROM ferry_leader_term WHERE term = $1", term).Scan(&resigned, &reason))
	require.False(t, resigned, "a term stopped while deferring is not a clean resignation")
	require.Contains(t, reason, "deferring")

	logs := &logtest.Recorder{}
	next := b.elector(t, func(c *Config) { c.Tick = time.Minute; c.Logger = logs.Logger() })
	require.Eventually(t, func() bool { return next.Status().State == StateDeferred }, 5*time.Second, 5*time.Millisecond)
	rec := logs.Find(t, "election: leader acquired")
	require.Equal(t, false, rec["previous_resigned"])
	require.Equal(t, true, rec["deferred"])
}

// A fenced runnable starts when the term is recorded, while the leader
// still defers to a crashed predecessor and the other runnables wait; its
// fenced writes commit then, and fail once a newer term begins; the stop
// stops it.
func TestElector_FencedRunnableRunsWhileDeferring(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	crashedPredecessor(t, b)
	_, err := b.pool.Exec(ctx, "CREATE TABLE fenced_writes (term bigint NOT NULL)")
	require.NoError(t, err)

	e, err := New(Config{DatabaseURL: b.url, Tick: time.Minute, Probe: testProbe, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	e.Register("activity", b.act.runnable)
	fence := func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if err := e.Fence(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO fenced_writes VALUES ($1)", e.Term())
			return err
		})
	}
	wrote, stopped := make(chan error, 1), make(chan struct{})
	runCtx := make(chan context.Context, 1)
	e.RegisterFenced("fenced", func(ctx context.Context) error {
		runCtx <- ctx
		wrote <- fence(ctx)
		<-ctx.Done()
		close(stopped)
		return nil
	})
	require.NoError(t, e.Start(ctx))
	t.Cleanup(e.Stop)

	select {
	case err := <-wrote:
		require.NoError(t, err, "the fenced runnable's write")
	case <-time.After(30 * time.Second):
		t.Fatal("the fenced runnable did not run within 30 s")
	}
	require.Equal(t, StateDeferred, e.Status().State, "the deferral (a minute's tick) is not over")
	require.Zero(t, b.act.starts.Load(), "the other runnables wait out the deferral")
	require.False(t, e.IsLeader())
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fenced_writes WHERE term = $1", e.Term()).Scan(&n))
	require.Equal(t, 1, n)

	// A newer term (another leader took over) fences it off.
	_, err = b.pool.Exec(ctx, "INSERT INTO ferry_leader_term (key, holder, hostname, pid, backend_pid) VALUES ($1, 'other', 'h', 1, 1)", KeyElection)
	require.NoError(t, err)
	fctx := <-runCtx
	require.ErrorIs(t, fence(fctx), ErrNotLeader, "no fenced write once a newer term began")
	require.ErrorContains(t, fence(fctx), "superseded", "refused by the database, not for a missing term")

	e.Stop()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the fenced runnable was not stopped with the elector")
	}
}

// crashedPredecessor records a crashed leader's term: unresigned, so the
// next leader defers to it.
func crashedPredecessor(t *testing.T, b *testBundle) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), "INSERT INTO ferry_leader_term (key, holder, hostname, pid, backend_pid) VALUES ($1, 'ferry-leader:gone:1', 'gone', 1, 1)", KeyElection)
	require.NoError(t, err)
}

// Stopping a standby that waits for the lock leaves no waiter on it.
func TestElector_StopWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	holder, err := pgx.Connect(ctx, b.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(ctx) })
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", KeyElection)
	require.NoError(t, err)
	e := b.elector(t, nil)
	require.Eventually(t, func() bool { return e.Status().State == StateStandby }, 5*time.Second, 5*time.Millisecond)
	e.Stop()
	var waiting int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting))
	require.Zero(t, waiting, "no waiter left behind")
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

// Demoted tells a runnable why its context ended: the term lost (here the
// lock session terminated) or the elector stopping.
func TestElector_Demoted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e, err := New(Config{DatabaseURL: b.url, Tick: testTick, Probe: testProbe, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ended := make(chan bool, 2)
	next := func() bool {
		select {
		case d := <-ended:
			return d
		case <-time.After(30 * time.Second): // a watchdog
			t.Fatal("the runnable's context did not end")
			return false
		}
	}
	e.Register("watch", func(ctx context.Context) error {
		<-ctx.Done()
		ended <- Demoted(ctx)
		return nil
	})
	require.NoError(t, e.Start(ctx))
	t.Cleanup(e.Stop)
	waitLeader(t, 5*time.Second, e)

	var ok bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", e.Status().BackendPID).Scan(&ok))
	require.True(t, ok)
	require.True(t, next(), "demoted: the term was lost")

	waitLeader(t, 10*time.Second, e)
	e.Stop()
	require.False(t, next(), "stopped, not demoted")
	require.False(t, Demoted(ctx))
}

func TestElector_GracefulHandover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.sample(t, KeyElection)
	logs := &logtest.Recorder{}
	// An hour-long probe: only the standby's wait on the lock can take over.
	slow := func(c *Config) { c.Probe = time.Hour; c.Logger = logs.Logger() }
	e1 := b.elector(t, slow)
	waitLeader(t, 5*time.Second, e1)
	e2 := b.elector(t, slow)
	require.Eventually(t, func() bool { return e2.Status().State == StateStandby }, 5*time.Second, 10*time.Millisecond)

	start := time.Now()
	e1.Stop()
	waitLeader(t, 10*time.Second, e2)
	t.Logf("graceful handover took %s", time.Since(start))
	rec := logs.Find(t, "election: failover acquired")
	require.Equal(t, true, rec["previous_resigned"])
	require.Equal(t, false, rec["deferred"], "a resigned predecessor: no deferral")
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
	rctx := b.runnableCtx(t, e)

	fence := func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return e.Fence(ctx, tx) })
	}
	require.NoError(t, fence(rctx))
	require.NoError(t, fence(context.WithoutCancel(rctx)), "a context derived from the runnable's carries its term")
	require.ErrorIs(t, fence(ctx), ErrNotLeader, "a context of no runnable carries no term")
	other := b.elector(t, nil)
	require.ErrorIs(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return other.Fence(rctx, tx) }), ErrNotLeader,
		"another elector's runnable context")

	// A newer term (another leader took over) makes this one stale.
	_, err := b.pool.Exec(ctx, "INSERT INTO ferry_leader_term (key, holder, hostname, pid, backend_pid) VALUES ($1, 'other', 'h', 1, 1)", KeyElection)
	require.NoError(t, err)
	require.ErrorContains(t, fence(rctx), "superseded")
	require.ErrorIs(t, fence(rctx), ErrNotLeader)
}

// A stale leader's fenced write racing a new term never commits after the
// new term began: the new term waits for the fenced transaction.
func TestElector_FenceHoldsOffANewTerm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// A slow tick: the old leader still believes it leads after losing the
	// lock, as a zombie would.
	slow := func(c *Config) { c.Tick, c.TickTimeout = 10*time.Second, 5*time.Second }
	old := b.elector(t, slow)
	waitLeader(t, 5*time.Second, old)
	oldTerm := old.Term()
	// The zombie's runnables: their context is cancelled when it demotes,
	// and a write of theirs would have begun before.
	octx := context.WithoutCancel(b.runnableCtx(t, old))
	_, err := b.pool.Exec(ctx, "CREATE TABLE fenced_write (term bigint NOT NULL)")
	require.NoError(t, err)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	require.NoError(t, old.Fence(octx, tx))

	// The lock moves: the old session is terminated, a new elector takes it.
	_, err = b.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", old.Status().BackendPID)
	require.NoError(t, err)
	next := b.elector(t, slow)
	// The new holder is blocked recording its term, not done with it.
	require.Eventually(t, func() bool {
		var newer, blocked int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM ferry_leader_term WHERE term > $1", oldTerm).Scan(&newer))
		require.Zero(t, newer, "a new term began while a fenced write of the old one was uncommitted")
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, next.holder).Scan(&blocked))
		return blocked == 1
	}, 5*time.Second, 2*time.Millisecond)

	_, err = tx.Exec(ctx, "INSERT INTO fenced_write VALUES ($1)", oldTerm)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Eventually(t, func() bool { return next.Term() > oldTerm }, 5*time.Second, 5*time.Millisecond)

	// Once the new term exists, the stale leader's fence fails.
	require.True(t, old.IsLeader(), "the zombie has not ticked yet")
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return old.Fence(octx, tx) })
	require.ErrorIs(t, err, ErrNotLeader)
	require.ErrorContains(t, err, "superseded", "refused by the database: the zombie still believes it leads")

	// Under REPEATABLE READ, a snapshot taken before the new term fails to
	// lock the superseded row instead of missing the new term.
	rr, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rr.Rollback(ctx) })
	_, err = rr.Exec(ctx, "SELECT 1") // the snapshot
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "UPDATE ferry_leader_term SET ended_reason = 'touched' WHERE term = $1", oldTerm)
	require.NoError(t, err)
	require.Error(t, old.Fence(octx, rr))
}

func TestElector_StopWithoutStart(t *testing.T) {
	t.Parallel()
	e, err := New(Config{DatabaseURL: "postgres://x@127.0.0.1/x"})
	require.NoError(t, err)
	e.Stop()
	e.Stop()
}

// The elector has ferry's one lifecycle shape: Start returns once running
// (a second Start does nothing), Started and Stopped signal, Stop is safe
// twice, and a stopped elector can campaign again.
func TestElector_Lifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	e, err := New(Config{DatabaseURL: b.url, Tick: testTick, Probe: testProbe, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	e.Register("activity", b.act.runnable)
	require.NoError(t, e.Start(ctx))
	require.NoError(t, e.Start(ctx), "a second Start is a no-op")
	<-e.Started()
	stopped := e.Stopped()
	waitLeader(t, 5*time.Second, e)
	first := e.Term()
	require.Eventually(t, func() bool { return b.act.starts.Load() >= 1 }, 5*time.Second, 10*time.Millisecond, "the term's runnable started")
	require.Panics(t, func() { e.Register("late", b.act.runnable) })

	e.Stop()
	e.Stop()
	<-stopped
	require.Equal(t, StateStopped, e.Status().State)
	require.Zero(t, b.act.active.Load())

	require.NoError(t, e.Start(ctx))
	t.Cleanup(e.Stop)
	waitLeader(t, 5*time.Second, e)
	require.Greater(t, e.Term(), first, "a restarted elector campaigns for a new term")
	// The leader flag is set before the runnables start: wait for the
	// restarted term's runnable, then count.
	require.Eventually(t, func() bool { return b.act.starts.Load() >= 2 }, 5*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 2, b.act.starts.Load(), "one campaign at a time: the second Start of the first run did nothing")
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

// A runnable of an earlier term that outlives its stop (it ignores its
// cancellation and writes under context.WithoutCancel, as cleanup does)
// is refused by Fence once its process leads again, in a later term: the
// fence checks the term the runnable started in, not the process's.
func TestElector_FenceRefusesAnEarlierTermsRunnable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.pool.Exec(ctx, "CREATE TABLE fenced_writes (term bigint NOT NULL)")
	require.NoError(t, err)

	e, err := New(Config{DatabaseURL: b.url, Tick: testTick, Probe: testProbe, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	var calls atomic.Int32
	started, write, wrote := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	e.Register("stale", func(ctx context.Context) error {
		if calls.Add(1) > 1 {
			<-ctx.Done() // the later terms' runs
			return nil
		}
		close(started)
		<-write // the first term's run ignores its cancellation
		wctx := context.WithoutCancel(ctx)
		wrote <- pgx.BeginFunc(wctx, b.pool, func(tx pgx.Tx) error {
			if err := e.Fence(wctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(wctx, "INSERT INTO fenced_writes VALUES ($1)", e.Term())
			return err
		})
		return nil
	})
	require.NoError(t, e.Start(ctx))
	t.Cleanup(e.Stop)
	var once sync.Once
	release := func() { once.Do(func() { close(write) }) }
	t.Cleanup(release)

	waitLeader(t, 5*time.Second, e)
	first := e.Term()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the runnable did not start")
	}
	// The term is lost (its lock session ended) and won again: the stale
	// run is still running, its process leads a later term.
	_, err = b.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", e.Status().BackendPID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.IsLeader() && e.Term() > first }, 30*time.Second, 10*time.Millisecond,
		"the process leads again in a later term")
	require.Greater(t, calls.Load(), int32(1), "the later term's run started")

	release()
	select {
	case err = <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the stale run did not write")
	}
	require.ErrorIs(t, err, ErrNotLeader, "a runnable of term %d fenced while term %d leads", first, e.Term())
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fenced_writes").Scan(&n))
	require.Zero(t, n, "the stale write did not commit")
}
