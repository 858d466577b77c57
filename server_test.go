package ferry_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/migrations"
	"github.com/ferryq/ferry/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type echoArgs struct {
	Msg string `json:"msg"`
}

func (echoArgs) Kind() string { return "test.echo" }

type echoWorker struct {
	river.WorkerDefaults[echoArgs]
	got chan string
}

func (w *echoWorker) Work(ctx context.Context, job *river.Job[echoArgs]) error {
	w.got <- job.Args.Msg
	return nil
}

func quietConfig(url string) ferry.Config {
	return ferry.Config{
		Database: ferry.DatabaseConfig{URL: url},
		Admin:    ferry.AdminConfig{Addr: "127.0.0.1:0"},
		Logger:   slog.New(slog.DiscardHandler),
	}
}

// runServer runs srv in the background and returns a stop function that
// cancels it and waits for Run to return.
func runServer(t *testing.T, srv *ferry.Server) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Started():
	case err := <-done:
		t.Fatalf("Run returned before starting: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	var stopped bool
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Run did not return")
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestNew_StaleSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false)
	_, err := ferry.New(context.Background(), quietConfig(url))
	require.ErrorIs(t, err, migrations.ErrSchemaBehind)
	require.ErrorContains(t, err, "worker migrate up")

	cfg := quietConfig(url)
	cfg.Database.Migrate = true
	srv, err := ferry.New(context.Background(), cfg)
	require.NoError(t, err)
	stop := runServer(t, srv)
	require.NoError(t, stop())
}

func TestNew_BadConfig(t *testing.T) {
	t.Parallel()
	cfg := quietConfig(pgtest.URL(t))
	cfg.Queues.Workers = map[string]int{"default": 0}
	_, err := ferry.New(context.Background(), cfg)
	require.ErrorContains(t, err, "workers 0")

	cfg = quietConfig(pgtest.URL(t))
	cfg.Admin.Addr = "0.0.0.0:0"
	_, err = ferry.New(context.Background(), cfg)
	require.ErrorContains(t, err, "FERRY_ADMIN_TOKEN")
}

// A Server runs once; a second Run returns an error instead of panicking.
func TestServer_RunTwice(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	srv, err := ferry.New(context.Background(), quietConfig(url))
	require.NoError(t, err)
	stop := runServer(t, srv)
	require.ErrorIs(t, srv.Run(context.Background()), ferry.ErrRunTwice)
	srv.Close() // does nothing to a running server
	require.NoError(t, srv.Pool().Ping(context.Background()), "Close left the running server's pool open")
	require.NoError(t, stop())
	require.ErrorIs(t, srv.Run(context.Background()), ferry.ErrRunTwice)
}

// A Server built but never run can be closed, which releases its pool.
func TestServer_CloseWithoutRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	srv, err := ferry.New(ctx, quietConfig(url))
	require.NoError(t, err)
	srv.Close()
	srv.Close()
	require.Error(t, srv.Pool().Ping(ctx), "the pool is closed")
	require.ErrorIs(t, srv.Run(ctx), ferry.ErrClosed)
}

// A start that fails after River started stops River (and what started
// before it) before Run returns.
func TestServer_FailureAfterRiverStopsRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	srv, err := ferry.New(ctx, quietConfig(url))
	require.NoError(t, err)
	boom := errors.New("boom")
	riverRunning := make(chan bool, 1)
	srv.AppendServiceForTest(func(context.Context) error {
		select {
		case <-srv.River().Stopped():
			riverRunning <- false
		default:
			riverRunning <- true
		}
		return boom
	}, func() {})
	require.ErrorIs(t, srv.Run(ctx), boom)
	require.True(t, <-riverRunning, "the failing service started after River")
	select {
	case <-srv.River().Stopped():
	default:
		t.Fatal("Run returned with the River client still running")
	}
	require.False(t, srv.Elector().IsLeader())
	require.Equal(t, election.StateStopped, srv.Elector().Status().State, "the elector that started before was stopped")
}

func TestServer_Run(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	w := &echoWorker{got: make(chan string, 1)}
	cfg := quietConfig(url)
	cfg.Kinds = []jobs.Kind{jobs.Define[echoArgs](w, "default", "echo for tests")}
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	stop := runServer(t, srv)

	// The user's kind is published for the enqueue CLI.
	known, ok, err := jobs.Lookup(ctx, srv.Pool(), "test.echo")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "echo for tests", known.Description)

	// A job inserted by a separate inserter is worked.
	pool := pgtest.PoolFor(t, url)
	ins, err := jobs.NewInserter(pool)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = ins.InsertTx(ctx, tx, echoArgs{Msg: "hello"}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	select {
	case msg := <-w.got:
		require.Equal(t, "hello", msg)
	case <-time.After(10 * time.Second):
		t.Fatal("job not worked")
	}

	base := "http://" + srv.AdminAddr()
	body := httpGet(t, base+"/readyz")
	require.Equal(t, "ready\n", body)
	require.Eventually(t, func() bool {
		b := httpGet(t, base+"/metrics")
		return strings.Contains(b, `ferry_job_duration_seconds_count{kind="test.echo",outcome="completed"} 1`)
	}, 5*time.Second, 20*time.Millisecond)
	metrics := httpGet(t, base+"/metrics")
	require.Contains(t, metrics, "ferry_build_info{")
	require.Contains(t, metrics, "ferry_jobs{")

	require.NoError(t, stop())
}

func TestServer_ShutdownCancelsAndRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	cfg := quietConfig(url)
	cfg.Queues.ShutdownGrace = 300 * time.Millisecond
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	stop := runServer(t, srv)

	pool := pgtest.PoolFor(t, url)
	id := insertNoop(t, pool, jobs.NoopArgs{Sleep: jobs.Duration(time.Minute)})
	waitState(t, pool, id, rivertype.JobStateRunning)

	// The job would sleep a minute: its state below shows that the stop
	// cancelled it after the grace period instead of waiting for it.
	require.NoError(t, stop())

	var (
		state string
		errs  int
		tries int
	)
	require.NoError(t, pool.QueryRow(ctx, "SELECT state, coalesce(array_length(errors, 1), 0), attempt FROM river_job WHERE id = $1", id).Scan(&state, &errs, &tries))
	// River puts a job interrupted by its client's stop straight back to
	// available, and the interrupted attempt does not count.
	require.Equal(t, "available", state, "a job cut off by shutdown is retried, not lost")
	require.Equal(t, 0, errs)
	require.Equal(t, 0, tries)
}

func TestServer_ShutdownLetsShortJobsFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	cfg := quietConfig(url)
	cfg.Queues.ShutdownGrace = 10 * time.Second
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	stop := runServer(t, srv)

	pool := pgtest.PoolFor(t, url)
	id := insertNoop(t, pool, jobs.NoopArgs{Sleep: jobs.Duration(700 * time.Millisecond)})
	waitState(t, pool, id, rivertype.JobStateRunning)
	require.NoError(t, stop())
	var state string
	require.NoError(t, pool.QueryRow(ctx, "SELECT state FROM river_job WHERE id = $1", id).Scan(&state))
	require.Equal(t, "completed", state)
}

func insertNoop(t *testing.T, pool *pgxpool.Pool, args jobs.NoopArgs) int64 {
	t.Helper()
	ins, err := jobs.NewInserter(pool)
	require.NoError(t, err)
	res, err := ins.Client().Insert(context.Background(), args, nil)
	require.NoError(t, err)
	return res.Job.ID
}

func waitState(t *testing.T, pool *pgxpool.Pool, id int64, want rivertype.JobState) {
	t.Helper()
	require.Eventually(t, func() bool {
		var state string
		err := pool.QueryRow(context.Background(), "SELECT state FROM river_job WHERE id = $1", id).Scan(&state)
		return err == nil && state == string(want)
	}, 10*time.Second, 20*time.Millisecond, "job %d never reached %s", id, want)
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestServer_RiverUniqueKey(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		srv  *ferry.Server
		pool *pgxpool.Pool
	}

	// One server for the subtests: it is built, not run, so its client
	// inserts but works nothing; each subtest inserts into a queue of its
	// own.
	ctx := context.Background()
	cfg := quietConfig(pgtest.URL(t))
	cfg.Admin.Addr = "off"
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Pool().Close)
	b := &testBundle{srv: srv, pool: srv.Pool()}

	// The key is the queue's name: a key holds per kind, across queues.
	opts := func(queue string) *river.InsertOpts {
		return jobs.WithUniqueKey(&river.InsertOpts{Queue: queue}, queue)
	}
	count := func(t *testing.T, queue string) int {
		t.Helper()
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE queue = $1", queue).Scan(&n))
		return n
	}

	t.Run("Insert", func(t *testing.T) {
		t.Parallel()
		const queue = "unique_insert"
		first, err := b.srv.River().Insert(ctx, jobs.NoopArgs{}, opts(queue))
		require.NoError(t, err)
		require.False(t, first.UniqueSkippedAsDuplicate)
		second, err := b.srv.River().Insert(ctx, jobs.NoopArgs{Sleep: jobs.Duration(time.Second)}, opts(queue))
		require.NoError(t, err)
		require.True(t, second.UniqueSkippedAsDuplicate, "the key holds whatever the args")
		require.Equal(t, first.Job.ID, second.Job.ID)
		require.Equal(t, 1, count(t, queue))
	})

	// In a transaction, one at a time and batched (the relay's and the
	// scheduler's path).
	inTx := map[string]func(tx pgx.Tx, queue string) error{
		"InsertTx": func(tx pgx.Tx, queue string) error {
			_, err := b.srv.River().InsertTx(ctx, tx, jobs.NoopArgs{}, opts(queue))
			return err
		},
		"InsertManyTx": func(tx pgx.Tx, queue string) error {
			_, err := b.srv.River().InsertManyTx(ctx, tx, []river.InsertManyParams{{Args: jobs.NoopArgs{}, InsertOpts: opts(queue)}})
			return err
		},
	}
	for name, insert := range inTx {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			queue := "unique_" + strings.ToLower(name)
			for range 2 {
				require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return insert(tx, queue) }))
			}
			require.Equal(t, 1, count(t, queue))
		})
	}

	t.Run("InsertManyFastRefusesDuplicate", func(t *testing.T) {
		t.Parallel()
		const queue = "unique_insert_many_fast"
		params := []river.InsertManyParams{{Args: jobs.NoopArgs{}, InsertOpts: opts(queue)}}
		_, err := b.srv.River().InsertManyFast(ctx, params)
		require.NoError(t, err)
		_, err = b.srv.River().InsertManyFast(ctx, params)
		require.Error(t, err, "the COPY path cannot skip a duplicate: it refuses it")
		require.Equal(t, 1, count(t, queue))
	})
}

func TestNew_PoolSize(t *testing.T) {
	t.Parallel()

	handle := func(context.Context, pgx.Tx, outbox.Message) error { return nil }
	handler := []outbox.Route{{Topic: "t", Name: "go-handler", Handler: handle}}
	webhook := []outbox.Route{{Topic: "t", Name: "webhook", URL: "http://127.0.0.1:1/hook"}}
	handlers := []outbox.Route{handler[0], {Topic: "t", Name: "wide-handler", Handler: handle, Workers: 40}}
	cases := []struct {
		name   string
		url    string
		queues map[string]int
		routes []outbox.Route
		want   int32
	}{
		{"Default", "", nil, nil, ferry.DefaultPoolMaxConns},
		{"WebhooksHoldNothing", "", map[string]int{"default": 10, "outbox": 50}, webhook, ferry.DefaultPoolMaxConns},
		{"GoHandlerDefaultQueues", "", nil, handler, ferry.DefaultHandlerRouteWorkers + ferry.PoolHeadroom},
		{"GoHandlerAtMostDefault", "", map[string]int{"default": 10, "outbox": 50}, handler, ferry.DefaultHandlerRouteWorkers + ferry.PoolHeadroom},
		{"GoHandlerFewerOutboxWorkers", "", map[string]int{"default": 10, "outbox": 15}, handler, 15 + ferry.PoolHeadroom},
		{"GoHandlerRouteWorkers", "", nil, handlers, ferry.DefaultHandlerRouteWorkers + 40 + ferry.PoolHeadroom},
		{"GoHandlerOutboxNotWorked", "", map[string]int{"default": 50}, handler, ferry.DefaultPoolMaxConns},
		{"URLWins", "pool_max_conns=7", map[string]int{"outbox": 50}, handler, 7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.URL(t)
			if tc.url != "" {
				sep := "?"
				if strings.Contains(url, "?") {
					sep = "&"
				}
				url += sep + tc.url
			}
			cfg := quietConfig(url)
			cfg.Admin.Addr = "off"
			cfg.Queues.Workers = tc.queues
			cfg.Outbox.Routes = tc.routes
			srv, err := ferry.New(context.Background(), cfg)
			require.NoError(t, err)
			t.Cleanup(srv.Pool().Close)
			require.Equal(t, tc.want, srv.Pool().Config().MaxConns)
		})
	}
}

// TestServer_SlowHandlersDoNotStarveOtherQueues: with every outbox worker
// in a slow Go handler, each holding its delivery's transaction, jobs of
// another queue are still fetched and completed.
func TestServer_SlowHandlersDoNotStarveOtherQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	const outboxWorkers, messages, otherJobs = 20, 25, 50

	var inFlight, returned atomic.Int32
	entered := make(chan struct{}, messages)
	release := make(chan struct{})
	cfg := quietConfig(url)
	cfg.Admin.Addr = "off"
	cfg.Queues.ShutdownGrace = time.Second
	cfg.Queues.Workers = map[string]int{"default": 10, "outbox": outboxWorkers}
	cfg.Outbox.Routes = []outbox.Route{{
		Topic: "slow", Name: "slow-handler", Timeout: 10 * time.Minute,
		Handler: func(ctx context.Context, tx pgx.Tx, _ outbox.Message) error {
			defer returned.Add(1)
			inFlight.Add(1)
			entered <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}}
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	runServer(t, srv)
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseAll) // before the server stops (cleanups run last first)

	// The test's own pool: the server's is what is under test.
	pool := pgtest.PoolFor(t, url)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range messages {
			if _, err := outbox.Add(ctx, tx, "slow", map[string]int{"n": i}); err != nil {
				return err
			}
		}
		return nil
	}))

	// Every outbox worker is in the handler, inside its transaction.
	failAfter := time.After(time.Minute)
	for range outboxWorkers {
		select {
		case <-entered:
		case <-failAfter:
			t.Fatalf("only %d of %d slow handlers got a connection (the server's pool has %d)", inFlight.Load(), outboxWorkers, srv.Pool().Config().MaxConns)
		}
	}
	var open int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND application_name LIKE 'ferry-worker:%'`).Scan(&open))
	require.GreaterOrEqual(t, open, outboxWorkers, "each handler holds its delivery's transaction")

	// Jobs of another queue are fetched and completed meanwhile.
	ins, err := jobs.NewInserter(pool)
	require.NoError(t, err)
	params := make([]river.InsertManyParams, otherJobs)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobs.NoopArgs{}}
	}
	_, err = ins.Client().InsertMany(ctx, params)
	require.NoError(t, err)
	completed := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'ferry.noop' AND state = 'completed'").Scan(&n))
		return n
	}
	for n := completed(); n < otherJobs; n = completed() {
		select {
		case <-failAfter:
			t.Fatalf("%d of %d default-queue jobs completed while %d slow handlers hold their transactions (the server's pool has %d)", n, otherJobs, inFlight.Load(), srv.Pool().Config().MaxConns)
		case <-time.After(20 * time.Millisecond):
		}
	}
	require.Zero(t, returned.Load(), "the slow handlers were still holding their transactions")

	// Released, every delivery is delivered, the waiting ones included.
	releaseAll()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM ferry_outbox_delivery WHERE route = 'slow-handler' AND status = 'delivered'").Scan(&n))
		return n == messages
	}, time.Minute, 20*time.Millisecond)
}

// The leader runs retention: a tick older than its keep goes, the newest
// of its schedule stays.
func TestServer_Retention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	_, err := pool.Exec(ctx, `INSERT INTO ferry_periodic_tick (schedule_id, tick_at, term, status, reason) VALUES
		('gone', now() - interval '3 hours', 1, 'skipped', 'test'),
		('gone', now() - interval '2 hours', 1, 'skipped', 'test')`)
	require.NoError(t, err)
	cfg := quietConfig(url)
	cfg.Retention.Ticks = time.Hour
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	runServer(t, srv)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry_periodic_tick WHERE schedule_id = 'gone'`).Scan(&n))
		return n == 1
	}, 30*time.Second, 50*time.Millisecond)
	var age time.Duration
	require.NoError(t, pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - tick_at)::bigint * 1000000000 FROM ferry_periodic_tick WHERE schedule_id = 'gone'`).Scan(&age))
	require.Less(t, age, 150*time.Minute, "the newest tick stayed")
}

// notifyCounter counts the statements that send a notification.
type notifyCounter struct{ n atomic.Int64 }

func (c *notifyCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "pg_notify") {
		c.n.Add(1)
	}
	return ctx
}

func (*notifyCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestServer_RelayInserter: the relay inserts its delivery jobs through a
// River client whose own insert notification (a round trip inside the
// inserting transaction; the relay sends the same one in its last) goes
// out once for a queue, not once per insert as from the server's client,
// and whose inserts go through the server's insert middleware.
func TestServer_RelayInserter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	srv, err := ferry.New(ctx, quietConfig(url))
	require.NoError(t, err)
	t.Cleanup(srv.Close)

	counter := &notifyCounter{}
	pool := pgtest.TracedPoolFor(t, url, counter)

	// Three inserts into one queue, each in a transaction of its own
	// (rolled back: only the statements sent count), spaced past the
	// server's 1 ms fetch cooldown.
	rollback := errors.New("rollback")
	notifications := func(c *river.Client[pgx.Tx], queue string) int64 {
		counter.n.Store(0)
		for range 3 {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := c.InsertManyTx(ctx, tx, []river.InsertManyParams{{Args: outbox.DeliverArgs{MessageID: 1, Route: "r"}, InsertOpts: &river.InsertOpts{Queue: queue}}})
				require.NoError(t, err)
				return rollback
			})
			require.ErrorIs(t, err, rollback)
			time.Sleep(10 * time.Millisecond)
		}
		return counter.n.Load()
	}
	require.EqualValues(t, 3, notifications(srv.River(), "relay_inserter_a"), "the server's client notifies every insert")
	require.EqualValues(t, 1, notifications(srv.RelayInserterForTest(), "relay_inserter_b"), "the relay's client notifies a queue once")

	// The unique-key middleware, one of the server's, holds on its inserts.
	var skipped []bool
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		opts := jobs.WithUniqueKey(&river.InsertOpts{Queue: "relay_inserter_b"}, "k")
		for range 2 {
			res, err := srv.RelayInserterForTest().InsertManyTx(ctx, tx, []river.InsertManyParams{{Args: outbox.DeliverArgs{MessageID: 1, Route: "r"}, InsertOpts: opts}})
			if err != nil {
				return err
			}
			skipped = append(skipped, res[0].UniqueSkippedAsDuplicate)
		}
		return rollback
	})
	require.ErrorIs(t, err, rollback)
	require.Equal(t, []bool{false, true}, skipped)
}
