package liveness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/netproxy"
	"github.com/ferryq/ferry/internal/testkit/pgbouncer"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// leader fences nothing: the rescuer's fence is the elector's, tested there.
type leader struct{}

func (leader) Fence(context.Context, pgx.Tx) error { return nil }

type testBundle struct {
	url  string
	pool *pgxpool.Pool
	seq  atomic.Int32

	mu      sync.Mutex
	proxies map[*Worker]*netproxy.Proxy // each worker's way to the server
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	url := pgtest.NewDatabase(t, true)
	return &testBundle{url: url, pool: pgtest.PoolFor(t, url)}
}

// worker starts a Worker with the tick given (an hour: no heartbeat
// during the test) and a unique client id, whose liveness session goes
// through a proxy of its own (kill).
func (b *testBundle) worker(t *testing.T, tick time.Duration, onDead func(error)) *Worker {
	t.Helper()
	w, err := b.startWorker(t, fmt.Sprintf("test-%d", b.seq.Add(1)), tick, onDead, nil)
	require.NoError(t, err)
	return w
}

// startWorker starts a Worker clientID whose liveness session goes through
// a proxy of its own, which arm gets before the Start (when not nil), and
// returns Start's error.
func (b *testBundle) startWorker(t *testing.T, clientID string, tick time.Duration, onDead func(error), arm func(*netproxy.Proxy)) (*Worker, error) {
	t.Helper()
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	proxy, err := netproxy.Start(u.Host)
	require.NoError(t, err)
	u.Host = proxy.Addr()
	w, err := New(Config{
		DatabaseURL: u.String(), ClientID: clientID,
		Tick: tick, TickTimeout: time.Second, OnDead: onDead, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	if arm != nil {
		arm(proxy)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	err = w.Start(context.Background())
	t.Cleanup(w.Stop)
	t.Cleanup(func() { _ = proxy.Close() }) // first: a crashed worker's stop finds its session closed
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proxies == nil {
		b.proxies = map[*Worker]*netproxy.Proxy{}
	}
	b.proxies[w] = proxy
	return w, err
}

// staleAtOnce has a rescuer take any heartbeat for stale: a test whose
// killed worker keeps a session connected (a worker cut off from the
// server, whose pool's sessions the server still shows) stands for the
// server's end of its liveness session after the lease, three ticks
// after its last heartbeat.
func staleAtOnce(c *RescuerConfig) { c.Stale = time.Nanosecond }

func (b *testBundle) rescuer(t *testing.T, mod func(*RescuerConfig)) *Rescuer {
	t.Helper()
	cfg := RescuerConfig{Pool: b.pool, Leader: leader{}, Every: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	r, err := NewRescuer(cfg)
	require.NoError(t, err)
	return r
}

// running inserts a job in state running, attempted by clientID, as River's
// fetch leaves it.
func (b *testBundle) running(t *testing.T, clientID string, attempt, maxAttempts int) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `INSERT INTO river_job
		(args, kind, max_attempts, queue, state, attempt, attempted_at, attempted_by, scheduled_at)
		VALUES ('{}', 'ferry.noop', $1, 'default', 'running', $2, now(), ARRAY[$3], now()) RETURNING id`,
		maxAttempts, attempt, clientID).Scan(&id))
	return id
}

// refetch has the rescued job id fetched under clientID by River's own
// fetch (the driver's JobGetAvailable, the query a River client's producer
// runs): the attempt counted, the client appended.
func (b *testBundle) refetch(t *testing.T, id int64, clientID string) {
	t.Helper()
	res, err := riverpgxv5.New(b.pool).GetExecutor().JobGetAvailable(context.Background(), &riverdriver.JobGetAvailableParams{
		ClientID: clientID, MaxAttemptedBy: 100, MaxToLock: 1, Queue: "default",
	})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1, "River fetched the rescued job")
	require.Equal(t, id, res.Jobs[0].ID)
}

type jobRow struct {
	State    string
	Attempt  int
	Deaths   int
	LastErr  string
	Finalize bool
}

func (b *testBundle) job(t *testing.T, id int64) jobRow {
	t.Helper()
	var j jobRow
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT state::text, attempt,
		coalesce((metadata->>'ferry_orphaned')::int, 0), coalesce(errors[cardinality(errors)]->>'error', ''), finalized_at IS NOT NULL
		FROM river_job WHERE id = $1`, id).Scan(&j.State, &j.Attempt, &j.Deaths, &j.LastErr, &j.Finalize))
	return j
}

// kill is the death of the worker's process as the database sees it: its
// liveness session ends and nothing takes the lock again. The worker's
// network is cut first (its proxy partitioned), so that it never hears
// of the end, and the server ends the session. revive heals it.
func (b *testBundle) kill(t *testing.T, w *Worker) {
	t.Helper()
	b.proxy(w).Partition()
	b.endSession(t, w)
	require.Eventually(t, func() bool { return !b.alive(t, w) }, 5*time.Second, 5*time.Millisecond)
}

// revive ends the partition of a killed worker: what the server sent
// meanwhile (the end of its session) reaches it.
func (b *testBundle) revive(w *Worker) { b.proxy(w).Heal() }

func (b *testBundle) proxy(w *Worker) *netproxy.Proxy {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.proxies[w]
}

// endSession has the server end the worker's liveness session
// (pg_terminate_backend), as a restart or an operator would.
func (b *testBundle) endSession(t *testing.T, w *Worker) {
	t.Helper()
	pid := b.holder(t, w)
	require.NotZero(t, pid, "the worker holds its lock")
	var ended bool
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", pid).Scan(&ended))
	require.True(t, ended)
}

// retaken has the server end the worker's liveness session and waits for
// the worker to take its lock again on a new one.
func (b *testBundle) retaken(t *testing.T, w *Worker) {
	t.Helper()
	old := b.holder(t, w)
	b.endSession(t, w)
	require.Eventually(t, func() bool {
		h := b.holder(t, w)
		return h != 0 && h != old
	}, 30*time.Second, 10*time.Millisecond, "the lock taken again on a new session")
}

// holder is the backend pid that holds the worker's lock, 0 for none.
func (b *testBundle) holder(t *testing.T, w *Worker) int {
	t.Helper()
	var pid int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1::int::oid AND objid = $2::int::oid AND objsubid = 2 AND granted
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, Namespace, w.ID()).Scan(&pid))
	return pid
}

// session is a pool whose sessions belong to the worker clientID, as a
// worker's own pool (ConfigurePool).
func (b *testBundle) session(t *testing.T, clientID string) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(b.url)
	require.NoError(t, err)
	ConfigurePool(pc, clientID)
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// complete runs River's completer's own statement (JobSetStateIfRunningMany)
// for job id on a session of p, as a worker's completer would.
func complete(p *pgxpool.Pool, id int64) error {
	now := time.Now()
	_, err := riverpgxv5.New(p).GetExecutor().JobSetStateIfRunningMany(context.Background(), &riverdriver.JobSetStateIfRunningManyParams{
		ID: []int64{id}, Attempt: []*int{nil}, ErrData: [][]byte{nil}, FinalizedAt: []*time.Time{&now},
		MetadataDoMerge: []bool{false}, MetadataUpdates: [][]byte{nil}, Now: &now,
		ScheduledAt: []*time.Time{nil}, State: []rivertype.JobState{rivertype.JobStateCompleted},
	})
	return err
}

func (b *testBundle) alive(t *testing.T, w *Worker) bool {
	t.Helper()
	return b.holder(t, w) != 0
}

func TestWorker_Lifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := b.worker(t, time.Hour, nil)
	require.True(t, b.alive(t, w), "alive from Start on")
	var host, app string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT w.hostname, a.application_name FROM ferry_worker w
		JOIN pg_stat_activity a ON a.pid = w.backend_pid WHERE w.client_id = $1`, w.ClientID()).Scan(&host, &app))
	require.NotEmpty(t, host)
	require.Regexp(t, `^ferry-liveness:.+:\d+$`, app)

	w.Stop()
	w.Stop()
	require.False(t, b.alive(t, w), "the lock is released on Stop")
	var stopped bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT stopped_at IS NOT NULL FROM ferry_worker WHERE id = $1", w.ID()).Scan(&stopped))
	require.True(t, stopped)
}

// The rescuer takes back the running jobs of a dead worker, and only those.
func TestRescuer_RescuesOnlyDeadWorkersJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	dead := b.worker(t, time.Hour, nil)
	live := b.worker(t, time.Hour, nil)
	orphan := b.running(t, dead.ClientID(), 1, 25)
	last := b.running(t, dead.ClientID(), 25, 25)
	kept := b.running(t, live.ClientID(), 1, 25)
	// A job the dead worker ran before, now running on the live one.
	moved := b.running(t, dead.ClientID(), 1, 25)
	_, err := b.pool.Exec(ctx, "UPDATE river_job SET attempt = 2, attempted_by = array_append(attempted_by, $2) WHERE id = $1", moved, live.ClientID())
	require.NoError(t, err)
	// A job of a River client that is no ferry worker: River's own rescuer's.
	foreign := b.running(t, "not-a-ferry-worker", 1, 25)

	reg := prometheus.NewRegistry()
	logs := &logtest.Recorder{}
	r := b.rescuer(t, func(c *RescuerConfig) { c.Registerer = reg; c.Logger = logs.Logger() })
	res, err := r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res, "nobody is dead yet")

	b.kill(t, dead)
	res, err = r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []Rescue{{WorkerID: dead.ID(), ClientID: dead.ClientID(), Available: 1, Exhausted: 1}}, res)

	j := b.job(t, orphan)
	require.Equal(t, "available", j.State, "available again at once")
	require.Equal(t, 1, j.Attempt, "the attempt counts: the next fetch makes it 2")
	require.Equal(t, 1, j.Deaths)
	require.Contains(t, j.LastErr, "ferry: the worker running this job died ("+dead.ClientID()+")")
	require.False(t, j.Finalize)
	j = b.job(t, last)
	require.Equal(t, "discarded", j.State, "no attempt left")
	require.True(t, j.Finalize)
	require.Equal(t, "running", b.job(t, kept).State, "a live worker's job is never rescued")
	require.Equal(t, "running", b.job(t, moved).State, "only jobs whose latest attempt is the dead worker's")
	require.Equal(t, "running", b.job(t, foreign).State)

	rec := logs.Find(t, "rescue: orphaned jobs rescued")
	require.Equal(t, dead.ClientID(), rec["worker"])
	require.EqualValues(t, 2, rec["count"])
	require.Equal(t, 1.0, testutil.ToFloat64(r.mRescued.WithLabelValues("orphaned")))
	require.Equal(t, 1.0, testutil.ToFloat64(r.mRescued.WithLabelValues("exhausted")))
	var deadAt bool
	var rescued int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT dead_at IS NOT NULL, rescued_jobs FROM ferry_worker WHERE id = $1", dead.ID()).Scan(&deadAt, &rescued))
	require.True(t, deadAt)
	require.Equal(t, 2, rescued)

	res, err = r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res, "a worker is declared dead once")
}

// TestRescuer_ResignsRiverLeadership: the rescue of a dead worker that
// held River's leadership resigns it with River's own statement, and a
// live River client, told on River's channel, is elected before the dead
// leader's term would have run out (River alone elects only after it);
// a dead worker that does not lead River leaves River's leader alone.
func TestRescuer_ResignsRiverLeadership(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	dead := b.worker(t, time.Hour, nil)
	bystander := b.worker(t, time.Hour, nil)
	live := b.worker(t, time.Hour, nil)
	exec := riverpgxv5.New(b.pool).GetExecutor()
	// The dead worker's River client was elected (River's elector's own
	// statement, at River's TTL).
	term, err := exec.LeaderAttemptElect(ctx, &riverdriver.LeaderElectParams{LeaderID: dead.ClientID(), TTL: 15 * time.Second})
	require.NoError(t, err)
	require.Equal(t, dead.ClientID(), term.LeaderID)

	// A River client of the live worker, a follower.
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[ledgerArgs]) error { return nil }))
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{
		ID: live.ClientID(), Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers: workers, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(context.WithoutCancel(ctx))) })
	// River's leader now (a zero one while there is none).
	leader := func() riverdriver.Leader {
		l, err := exec.LeaderGetElectedLeader(ctx, &riverdriver.LeaderGetElectedLeaderParams{})
		if errors.Is(err, rivertype.ErrNotFound) {
			return riverdriver.Leader{}
		}
		assert.NoError(t, err)
		if l == nil {
			return riverdriver.Leader{}
		}
		return *l
	}

	logs := &logtest.Recorder{}
	r := b.rescuer(t, func(c *RescuerConfig) { c.Logger = logs.Logger() })
	b.kill(t, dead)
	res, err := r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []Rescue{{WorkerID: dead.ID(), ClientID: dead.ClientID(), RiverLeader: true}}, res)
	require.Equal(t, dead.ClientID(), logs.Find(t, "rescue: River's leadership of the dead worker resigned")["worker"])
	require.Eventually(t, func() bool { return leader().LeaderID == live.ClientID() }, 30*time.Second, 10*time.Millisecond,
		"the live River client is elected")
	require.True(t, leader().ElectedAt.Before(term.ExpiresAt),
		"elected while the dead leader's term still ran: on its resignation, not on its expiry")

	b.kill(t, bystander)
	res, err = r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []Rescue{{WorkerID: bystander.ID(), ClientID: bystander.ClientID()}}, res)
	require.Equal(t, live.ClientID(), leader().LeaderID, "a dead worker that did not lead River leaves River's leader alone")
}

// A job whose worker dies under it MaxOrphaned times is discarded as poison.
func TestRescuer_PoisonAfterMaxOrphaned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.rescuer(t, func(c *RescuerConfig) { c.MaxOrphaned = 3 })
	w := b.worker(t, time.Hour, nil)
	id := b.running(t, w.ClientID(), 1, 25)
	for death := 1; death <= 3; death++ {
		b.kill(t, w)
		res, err := r.RescueOnce(context.Background())
		require.NoError(t, err)
		require.Len(t, res, 1)
		j := b.job(t, id)
		require.Equal(t, death, j.Deaths)
		if death < 3 {
			require.Equal(t, "available", j.State, "death %d", death)
			w = b.worker(t, time.Hour, nil)
			b.refetch(t, id, w.ClientID())
			continue
		}
		require.Equal(t, 1, res[0].Poison)
		require.Equal(t, "discarded", j.State)
		require.Equal(t, "ferry: the worker died running this job 3 times", j.LastErr)
	}
}

// A worker whose session the server ends takes its lock again on a new
// session at once, not at its next heartbeat (here an hour away): after
// the server ended every session, the rescuer holds back for only a tick
// and its timeout (RescuerConfig.Settle).
func TestWorker_TakesItsLockBackAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worker(t, time.Hour, nil)
	old := b.holder(t, w)
	b.endSession(t, w)
	// Taken again, and the new session recorded in the worker's row (the
	// heartbeat that follows the lock).
	require.Eventually(t, func() bool {
		var recorded int
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT backend_pid FROM ferry_worker WHERE id = $1", w.ID()).Scan(&recorded))
		h := b.holder(t, w)
		return h != 0 && h != old && h == recorded
	}, 30*time.Second, 10*time.Millisecond, "the lock is taken again on a new session without a heartbeat (the tick is an hour)")
}

// While no session of a ferry worker on the server is older than Settle
// (the server has just ended every session: a restart, a promoted
// standby), the rescuer holds back, since a live worker may not have taken
// its lock again yet; once one is, it rescues.
func TestRescuer_HoldsBackWhileEverySessionIsNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := b.worker(t, time.Hour, nil)
	id := b.running(t, w.ClientID(), 1, 25)
	b.kill(t, w)
	// The leader's own pool: its live worker's sessions (ConfigurePool),
	// all opened now.
	own := b.session(t, b.worker(t, time.Hour, nil).ClientID())
	require.NoError(t, own.Ping(ctx))

	held := b.rescuer(t, func(c *RescuerConfig) { c.Pool = own; c.Settle = time.Hour })
	res, err := held.RescueOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res, "no ferry session is an hour old")
	require.Equal(t, "running", b.job(t, id).State)

	settled := b.rescuer(t, func(c *RescuerConfig) { c.Pool = own; c.Settle = 200 * time.Millisecond })
	require.Eventually(t, func() bool {
		res, err := settled.RescueOnce(ctx)
		require.NoError(t, err)
		return len(res) == 1
	}, 30*time.Second, 50*time.Millisecond, "rescued once a ferry session is older than Settle")
	require.Equal(t, "available", b.job(t, id).State)
}

// A fleet that has just started has only young sessions too, but nothing
// ended them: with its own worker (Self) on the session it registered on
// and no worker on a later one, the rescuer takes a dead worker's jobs
// back within Settle; once a live worker has taken its lock again on a new
// session (what a server that ended every session leaves), or while Self
// holds no lock, it holds back as before.
func TestRescuer_FreshFleetRescuesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// Settle just short of the server's age: no ferry session of this
	// test's database is that old, and the server started before it.
	var age time.Duration
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT now() - pg_postmaster_start_time()").Scan(&age))
	require.Greater(t, age, 5*time.Second, "the server has just started")
	settle := age - time.Second

	self := b.worker(t, time.Hour, nil)
	victim := b.worker(t, time.Hour, nil)
	id := b.running(t, victim.ClientID(), 1, 25)
	b.kill(t, victim)

	anon := b.rescuer(t, func(c *RescuerConfig) { c.Settle = settle })
	res, err := anon.RescueOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res, "without Self, no ferry session older than Settle holds it back")
	require.Equal(t, "running", b.job(t, id).State)

	r := b.rescuer(t, func(c *RescuerConfig) { c.Settle = settle; c.Self = self.ClientID() })
	res, err = r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []Rescue{{WorkerID: victim.ID(), ClientID: victim.ClientID(), Available: 1}}, res)
	require.Equal(t, "available", b.job(t, id).State)

	// A live worker on a new session: the server may have ended every
	// session, and another live worker may not have its lock back yet.
	other := b.worker(t, time.Hour, nil)
	b.retaken(t, other)
	second := b.worker(t, time.Hour, nil)
	id2 := b.running(t, second.ClientID(), 1, 25)
	b.kill(t, second)
	res, err = r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res, "a worker took its lock again on a new session")
	require.Equal(t, "running", b.job(t, id2).State)

	// Self's own lock on a new session, and no other worker's: the same.
	b.kill(t, other)
	b.retaken(t, self)
	res, err = r.RescueOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res, "Self took its lock again on a new session")
	require.Equal(t, "running", b.job(t, id2).State)
}

// A worker that comes back after the rescuer declared it dead learns it and
// stops; until it is declared dead, it takes its lock again and lives on.
func TestWorker_ComesBack(t *testing.T) {
	t.Parallel()

	t.Run("NotRescuedLivesOn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var died atomic.Bool
		w := b.worker(t, 50*time.Millisecond, func(error) { died.Store(true) })
		b.kill(t, w)
		b.revive(w)
		require.Eventually(t, func() bool { return b.alive(t, w) }, 5*time.Second, 10*time.Millisecond, "the lock is taken again on a new session")
		require.False(t, died.Load())
	})

	t.Run("RescuedStops", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dead := make(chan error, 1)
		w := b.worker(t, time.Hour, func(err error) { dead <- err })
		r := b.rescuer(t, nil)
		b.kill(t, w)
		res, err := r.RescueOnce(context.Background())
		require.NoError(t, err)
		require.Len(t, res, 1)
		// Back, it hears of its session's end, takes its lock again and
		// finds itself declared dead.
		b.revive(w)
		select {
		case err := <-dead:
			require.ErrorIs(t, err, ErrDeclaredDead)
		case <-time.After(10 * time.Second):
			t.Fatal("the worker did not learn it was declared dead")
		}
		require.False(t, b.alive(t, w), "a dead worker does not take its lock again")
	})
}

// The fence: once a worker is declared dead, no session of it may change
// river_job; other sessions may.
func TestFence_DeadWorkerCannotWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	dead := b.worker(t, time.Hour, nil)
	live := b.worker(t, time.Hour, nil)
	id := b.running(t, dead.ClientID(), 1, 25)
	deadPool, livePool := b.session(t, dead.ClientID()), b.session(t, live.ClientID())
	completeBy := func(p *pgxpool.Pool) error { return complete(p, id) }

	b.kill(t, dead)
	_, err := b.rescuer(t, nil).RescueOnce(ctx)
	require.NoError(t, err)
	b.refetch(t, id, live.ClientID()) // the next attempt runs on the live worker

	err = completeBy(deadPool)
	require.Error(t, err, "the dead worker's late completion would overwrite the live attempt")
	require.True(t, IsDeclaredDead(err), "%v", err)
	require.Equal(t, "running", b.job(t, id).State)
	// Any column but kind is fenced (the trigger's column list).
	_, err = deadPool.Exec(ctx, `UPDATE river_job SET metadata = metadata || '{"late": true}' WHERE id = $1`, id)
	require.True(t, IsDeclaredDead(err), "%v", err)
	// River's insert changes no job (its ON CONFLICT … DO UPDATE sets
	// kind to itself) and does not call the fence: a job the dead
	// worker's session inserts is inserted.
	now := time.Now()
	ins, err := riverpgxv5.New(deadPool).GetExecutor().JobInsertFastMany(ctx, &riverdriver.JobInsertFastManyParams{Jobs: []*riverdriver.JobInsertFastParams{{
		EncodedArgs: []byte(`{}`), Kind: "fence_test", MaxAttempts: 25, Metadata: []byte(`{}`), Priority: 1,
		Queue: river.QueueDefault, ScheduledAt: &now, State: rivertype.JobStateAvailable,
	}}})
	require.NoError(t, err, "River's insert from a dead worker's session")
	require.Len(t, ins, 1)
	require.NoError(t, completeBy(livePool))
	require.Equal(t, "completed", b.job(t, id).State)
	require.False(t, IsDeclaredDead(errors.New("other")))
}

// The fence's trigger fires for an UPDATE of any column of river_job but
// kind, which River's insert sets (to itself) on a conflict (migration
// 025). A column River adds must be added to the list.
func TestFence_Columns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var fenced, all []string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT
		(SELECT array_agg(a.attname ORDER BY a.attname) FROM pg_trigger g
		   JOIN pg_attribute a ON a.attrelid = g.tgrelid AND a.attnum = ANY (g.tgattr)
		   WHERE g.tgrelid = 'river_job'::regclass AND g.tgname = 'ferry_worker_fence'),
		(SELECT array_agg(attname ORDER BY attname) FROM pg_attribute
		   WHERE attrelid = 'river_job'::regclass AND attnum > 0 AND NOT attisdropped AND attname <> 'kind')`).Scan(&fenced, &all))
	require.NotEmpty(t, all)
	require.Equal(t, all, fenced)
}

// An operator's rescue of one job: refused on a live worker, the whole
// worker's rescue on a dead one, the job alone for a client that is no
// ferry worker.
func TestRescueJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	live := b.worker(t, time.Hour, nil)
	dead := b.worker(t, time.Hour, nil)
	onLive := b.running(t, live.ClientID(), 1, 25)
	onDead := b.running(t, dead.ClientID(), 1, 25)
	alsoOnDead := b.running(t, dead.ClientID(), 1, 25)
	foreign := b.running(t, "not-a-ferry-worker", 1, 25)

	_, err := RescueJob(ctx, b.pool, onLive, 5)
	var alive *WorkerAliveError
	require.ErrorAs(t, err, &alive)
	require.Equal(t, live.ClientID(), alive.ClientID)
	require.Equal(t, "running", b.job(t, onLive).State)

	b.kill(t, dead)
	res, err := RescueJob(ctx, b.pool, onDead, 5)
	require.NoError(t, err)
	require.Equal(t, "available", res.State)
	require.Equal(t, "available", b.job(t, alsoOnDead).State, "the dead worker's other jobs are taken back with it")
	var declared bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT dead_at IS NOT NULL FROM ferry_worker WHERE id = $1", dead.ID()).Scan(&declared))
	require.True(t, declared, "declared dead, so its late writes are fenced")

	res, err = RescueJob(ctx, b.pool, foreign, 5)
	require.NoError(t, err)
	require.Equal(t, "available", res.State)

	_, err = RescueJob(ctx, b.pool, foreign, 5)
	require.ErrorIs(t, err, ErrJobNotRunning)
	_, err = RescueJob(ctx, b.pool, 1<<40, 5)
	require.ErrorIs(t, err, ErrJobNotFound)
}

// The fence and a rescue never pass each other: a fetch by the dead
// worker's session that is still in flight when the rescue starts is waited
// for and its job rescued; a fetch that comes while the rescue is in flight
// waits for it and is refused. Either way no job is left running under a
// worker declared dead (which only River's hour-long rescuer would see).
func TestFence_FetchInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fetchParams := func(clientID string) *riverdriver.JobGetAvailableParams {
		return &riverdriver.JobGetAvailableParams{ClientID: clientID, MaxAttemptedBy: 100, MaxToLock: 10, Queue: "default"}
	}
	available := func(t *testing.T, b *testBundle) int64 {
		t.Helper()
		var id int64
		require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
			VALUES ('{}', 'ferry.noop', 25, 'default', 'available', now() - interval '1 second') RETURNING id`).Scan(&id))
		return id
	}
	// waiting reports whether some session waits for the fence lock in mode.
	waiting := func(t *testing.T, b *testBundle, mode string) bool {
		t.Helper()
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = $1::int::oid AND objsubid = 2 AND NOT granted AND mode = $2`,
			FenceNamespace, mode).Scan(&n))
		return n > 0
	}

	t.Run("FetchBeforeRescue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := b.worker(t, time.Hour, nil)
		id := available(t, b)
		tx, err := b.session(t, w.ClientID()).Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		res, err := riverpgxv5.New(nil).UnwrapExecutor(tx).JobGetAvailable(ctx, fetchParams(w.ClientID()))
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1, "the worker fetched the job")

		b.kill(t, w)
		done := make(chan []Rescue, 1)
		go func() {
			rescued, err := b.rescuer(t, staleAtOnce).RescueOnce(ctx)
			assert.NoError(t, err)
			done <- rescued
		}()
		require.Eventually(t, func() bool { return waiting(t, b, "ExclusiveLock") }, 10*time.Second, 5*time.Millisecond,
			"the rescue waits for the fetch in flight")
		require.NoError(t, tx.Commit(ctx))
		rescued := <-done
		require.Len(t, rescued, 1)
		require.Equal(t, 1, rescued[0].Available, "the job the fetch committed is rescued")
		require.Equal(t, "available", b.job(t, id).State)
	})

	t.Run("RescueBeforeFetch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := b.worker(t, time.Hour, nil)
		id := available(t, b)
		pool := b.session(t, w.ClientID())
		require.NoError(t, pool.Ping(ctx))

		b.kill(t, w)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, ok, err := rescueWorker(ctx, tx, w.ID(), w.ClientID(), DefaultMaxOrphaned)
		require.NoError(t, err)
		require.True(t, ok, "declared dead (not committed yet)")

		fetched := make(chan error, 1)
		go func() {
			_, err := riverpgxv5.New(pool).GetExecutor().JobGetAvailable(ctx, fetchParams(w.ClientID()))
			fetched <- err
		}()
		require.Eventually(t, func() bool { return waiting(t, b, "ShareLock") }, 10*time.Second, 5*time.Millisecond,
			"the fetch waits for the rescue in flight")
		require.NoError(t, tx.Commit(ctx))
		err = <-fetched
		require.True(t, IsDeclaredDead(err), "the fetch after the rescue is refused: %v", err)
		require.Equal(t, "available", b.job(t, id).State)
	})
}

// A dead worker's session left inside a transaction that wrote river_job
// (a partition: the server cannot see the session is gone, and by default
// its keepalives take hours) does not hold the rescue back past a tick:
// the rescuer ends it and rescues the job in the same pass.
func TestRescuer_EndsSessionsLeftInATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := b.worker(t, time.Hour, nil)
	id := b.running(t, w.ClientID(), 1, 25)
	// The worker's completion, sent and never committed: the fence lock and
	// the job's row stay held while the session waits for a COMMIT that
	// never comes.
	tx, err := b.session(t, w.ClientID()).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "UPDATE river_job SET metadata = metadata || '{\"done\": true}' WHERE id = $1", id)
	require.NoError(t, err)

	b.kill(t, w)
	rescued, err := b.rescuer(t, staleAtOnce).RescueOnce(ctx)
	require.NoError(t, err)
	require.Len(t, rescued, 1, "the worker is declared dead in this pass")
	require.Equal(t, 1, rescued[0].SessionsEnded, "the session left in a transaction was ended")
	require.Equal(t, 1, rescued[0].Available)
	j := b.job(t, id)
	require.Equal(t, "available", j.State)
	require.Equal(t, 1, j.Deaths)
	require.Error(t, tx.Commit(ctx), "the dead worker's transaction never commits")
}

// Through PgBouncer in transaction mode, the fence names the right worker:
// a live worker's completion on the very server session that last ran a
// dead worker's statement goes through, the dead worker's is refused, and
// a session of another client (with an application_name of its own) is
// never fenced. A session setting would stay with the server session and
// name the dead worker for all of them.
func TestFence_ThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	dead := b.worker(t, time.Hour, nil)
	live := b.worker(t, time.Hour, nil)
	id := b.running(t, dead.ClientID(), 1, 25)
	bouncer := pgbouncer.Start(t, b.url)
	through := func(clientID string) *pgxpool.Pool {
		pc, err := pgxpool.ParseConfig(bouncer)
		require.NoError(t, err)
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		pc.MaxConns = 1
		if clientID != "" {
			ConfigurePool(pc, clientID)
		} else {
			// PgBouncer sets only what the client sent: a client with no
			// application_name keeps the last one its server session had
			// (documented in docs/deploying.md, "Poolers").
			pc.ConnConfig.RuntimeParams["application_name"] = "some-service"
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	deadPool, livePool, otherPool := through(dead.ClientID()), through(live.ClientID()), through("")
	backend := func(p *pgxpool.Pool) (pid int) {
		require.NoError(t, p.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		return pid
	}
	completeBy := func(p *pgxpool.Pool) error { return complete(p, id) }

	b.kill(t, dead)
	_, err := b.rescuer(t, nil).RescueOnce(ctx)
	require.NoError(t, err)
	b.refetch(t, id, live.ClientID())

	// The pools take turns, so PgBouncer lends each the one idle server
	// session: the same for all three.
	server := backend(deadPool)
	err = completeBy(deadPool)
	require.True(t, IsDeclaredDead(err), "the dead worker's completion through the pooler: %v", err)
	require.Equal(t, server, backend(otherPool), "the pooler lent the same server session")
	_, err = otherPool.Exec(ctx, `UPDATE river_job SET tags = tags WHERE id = $1`, id)
	require.NoError(t, err, "a session of no worker is not fenced")
	require.Equal(t, server, backend(livePool), "the pooler lent the same server session")
	require.NoError(t, completeBy(livePool), "the live worker's completion on the dead worker's last server session")
	require.Equal(t, "completed", b.job(t, id).State)
}

// The tag survives Postgres's 63-byte cut of application_name: the base is
// cut instead.
func TestSessionName(t *testing.T) {
	t.Parallel()
	tag := SessionTag("host_1_20261201T000000.000000")
	require.Regexp(t, `^ferry-w:[0-9a-f]{12}$`, tag)
	require.Len(t, tag, 20, "the fence reads the last 20 characters")
	require.Equal(t, "worker:h:1 "+tag, SessionName("worker:h:1", "host_1_20261201T000000.000000"))
	require.Equal(t, tag, SessionName("", "host_1_20261201T000000.000000"))
	long := SessionName(strings.Repeat("x", 100), "host_1_20261201T000000.000000")
	require.Len(t, long, 63)
	require.True(t, strings.HasSuffix(long, " "+tag))
	require.NotEqual(t, tag, SessionTag("host_1_20261201T000000.000001"))
}
