package ferry

// The floor plan. A Server is built in three storeys, each using only the
// ones below it:
//
//  1. the configuration: Config with its defaults and checks, the config
//     file, and each capability's constructor, which validates its own
//     section (nothing connects yet);
//  2. the shared parts: the pools, the schema's check, the job kinds'
//     registry, the metrics registry and the elector;
//  3. the capabilities, in the order of the list in New: each records what
//     it contributes in one capability.Build (kinds, middleware by layer,
//     services, leader runnables, collectors, readiness); the River client
//     is built from the record, and Run starts what was recorded.
//
// A new capability is a package with a constructor and a Build method
// (package internal/capability says what it may record) and one line in
// New's list. The outbox, Telegram, broadcast, locks, bounded queues and
// the admin console are still wired in New itself, on their way into the
// list.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"riverqueue.com/riverui"

	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/admin"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/internal/config"
	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/internal/logging"
	"github.com/ferryq/ferry/internal/metrics"
	"github.com/ferryq/ferry/internal/retention"
	"github.com/ferryq/ferry/internal/sealcap"
	"github.com/ferryq/ferry/internal/tracing"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/locks"
	"github.com/ferryq/ferry/migrations"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

// hardStopBudget is how long a stopping Server waits, after the grace period
// has cancelled running jobs, for them to return. A job that ignores its
// context past this is left to River's rescuer.
const hardStopBudget = 15 * time.Second

// relayNotifyCooldown is the fetch cooldown of the relay's insert-only
// River client, and so the least time between two insert notifications
// River itself sends for one queue through it: the relay sends its own in
// every transaction that inserts jobs.
const relayNotifyCooldown = 24 * time.Hour

// Server is one ferry process: a River client working every registered kind,
// and the admin HTTP server.
type Server struct {
	cfg  Config
	pool *pgxpool.Pool
	// sessions is a small pool on cfg.ElectionDatabaseURL for what needs a
	// session (the migrations' lock, lock waits, the relay's LISTEN) when
	// pool goes through a transaction pooler; pool itself otherwise.
	sessions *pgxpool.Pool
	river    *river.Client[pgx.Tx]
	registry *jobs.Registry
	migrator *migrations.Migrator
	metrics  *metrics.Metrics
	locks    *locks.Client
	admin    *admin.Server
	riverUI  *riverui.Handler
	elector  *election.Elector
	sched    *periodic.Scheduler
	relay    *outbox.Relay
	// relayInserter is the insert-only River client the relay inserts
	// its delivery jobs with (see New).
	relayInserter *river.Client[pgx.Tx]
	// limiter enforces the config file's limits (none: it does nothing).
	limiter *limit.Limiter
	// broadcast is this process's broadcast Broker (Broadcast).
	broadcast *broadcast.Broker
	// announcing holds the leader-release announcements a demotion left
	// running (announceLeader); close waits for them.
	announcing sync.WaitGroup
	// routes are the outbox routes this process delivers (none when it
	// does not work the outbox queue), published at start.
	routes    *outbox.Routes
	botStatus []func() telegram.BotStatus
	// outboxMaxAttempts is what relayed and reset deliveries get.
	outboxMaxAttempts int
	started           chan struct{}

	// build is what the capabilities contributed (internal/capability): its
	// services start after River, in order, and stop in reverse order.
	build *capability.Build
	// dead is cancelled with liveness.ErrDeclaredDead when this worker
	// learns that the rescuer declared it dead.
	deadMu sync.Mutex
	dead   context.CancelCauseFunc

	// mu guards the lifecycle: Run once, Close any time.
	mu      sync.Mutex
	running bool // Run was called
	closed  bool // Close was called, or Run returned
}

// Errors of the Server's lifecycle.
var (
	// ErrRunTwice is returned by a second Run: a Server runs once.
	ErrRunTwice = errors.New("ferry: Run called twice; a Server runs once")
	// ErrClosed is returned by Run on a Server that was closed.
	ErrClosed = errors.New("ferry: Run called on a closed Server")
)

// New validates cfg, connects to Postgres, checks (or with cfg.Migrate,
// applies) the schema, and builds the River client. Nothing runs until Run.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	registry := &jobs.Registry{}
	if err := registry.Add(jobs.Builtin()...); err != nil {
		return nil, err
	}
	if err := registry.Add(cfg.Kinds...); err != nil {
		return nil, err
	}
	file, err := config.Load(cfg.ConfigFile, registry)
	if err != nil {
		return nil, &configError{err: err}
	}
	scheduled, err := periodic.NewCapability(append(slices.Clone(cfg.Schedules), file.Schedules...))
	if err != nil {
		return nil, &configError{err: err}
	}
	if err := applyFileQueues(&cfg, file.Queues); err != nil {
		return nil, &configError{err: err}
	}
	// Telegram: a client per bot whose token is set; a bot whose token
	// variable is unset stays off and says so, and nothing else changes.
	clients := map[string]*telegram.Client{}
	for _, b := range file.Bots {
		if b.Token == "" {
			cfg.Logger.Warn("telegram: bot off: its token variable is unset", "bot", b.Name, "token_env", b.TokenEnv)
			continue
		}
		clients[b.Name] = telegram.NewClient(cfg.TelegramAPIURL, b.Token, nil)
	}
	// Command routers' replies are telegram.send jobs, which the bots'
	// clients send outside any transaction.
	if err := registry.Add(telegram.NewSendWorker(clients, cfg.Logger).Kind()); err != nil {
		return nil, err
	}
	routeList := append(slices.Clone(cfg.OutboxRoutes), file.Routes...)
	for _, bot := range slices.Sorted(maps.Keys(cfg.TelegramRouters)) {
		client, ok := clients[bot]
		if !ok {
			if slices.ContainsFunc(file.Bots, func(b config.Bot) bool { return b.Name == bot }) {
				continue // configured but off
			}
			return nil, &configError{err: fmt.Errorf("telegram: a command router is registered for bot %q, which the config file does not name", bot)}
		}
		routeList = append(routeList, cfg.TelegramRouters[bot].Route(bot, "telegram-"+bot+"-commands", client))
	}
	limits, err := limit.NewCapability(file.Limits, cfg.FetchPollInterval)
	if err != nil {
		return nil, &configError{err: err}
	}
	retained, err := retention.NewCapability(retention.Section{Ticks: cfg.TickRetention, Terms: cfg.TermRetention, TelegramMalformed: cfg.TelegramMalformedRetention})
	if err != nil {
		return nil, err
	}
	routes, err := outbox.NewRoutes(routeList...)
	if err != nil {
		return nil, &configError{err: err}
	}
	maxAttempts := cmp.Or(cfg.OutboxMaxAttempts, file.OutboxMaxAttempts, outbox.DefaultMaxAttempts)
	// A process that works the outbox queue delivers its routes, each from
	// a queue of its own with RouteWorkers workers; one that does not
	// delivers (and declares) none.
	delivered := routes
	if cfg.Queues[outbox.Queue] == 0 {
		delivered, _ = outbox.NewRoutes()
	}
	for _, q := range delivered.Queues() {
		if _, taken := cfg.Queues[q]; taken {
			return nil, &configError{err: fmt.Errorf("queues: %q is the queue of an outbox route; name yours otherwise", q)}
		}
	}

	// A deployment in a schema of its own: every session finds its tables
	// first (through a transaction pooler, the role's search_path must,
	// which the migrator's check makes sure of).
	if cfg.Schema != "" {
		if cfg.Pooler != dburl.PoolerTransaction {
			if cfg.DatabaseURL, err = dburl.WithSearchPath(cfg.DatabaseURL, cfg.Schema); err != nil {
				return nil, &configError{err: err}
			}
		}
		if cfg.ElectionDatabaseURL, err = dburl.WithSearchPath(cfg.ElectionDatabaseURL, cfg.Schema); err != nil {
			return nil, &configError{err: err}
		}
	}
	clientID := newClientID()
	pool, err := openPool(ctx, cfg.DatabaseURL, "ferry-worker", poolMaxConns(cfg.Queues, delivered), clientID, cfg.Pooler)
	if err != nil {
		return nil, err
	}
	sessions := pool
	pooled := cfg.Pooler == dburl.PoolerTransaction
	if pooled {
		if sessions, err = openPool(ctx, cfg.ElectionDatabaseURL, "ferry-worker-session", 4, "", dburl.PoolerNone); err != nil {
			pool.Close()
			return nil, err
		}
	}
	s := &Server{cfg: cfg, pool: pool, sessions: sessions, registry: registry, routes: delivered, outboxMaxAttempts: maxAttempts, started: make(chan struct{})}
	fail := func(err error) (*Server, error) {
		pool.Close()
		if pooled {
			sessions.Close()
		}
		return nil, err
	}

	// An ordered chain's turn goes to this process's relay (set below,
	// before any job runs), which starts many chains' next deliveries in
	// one transaction.
	advance := func(t outbox.Turn) { s.relay.Advance(t) }
	deliver := outbox.NewDeliverWorker(outbox.DeliverConfig{Pool: pool, Routes: routes, MaxAttempts: maxAttempts, Logger: cfg.Logger, Tracer: tracing.Outbox(cfg.TracerProvider), Advance: advance,
		ChainBudget: chainBudget(file.Limits, routes)})
	if err := registry.Add(deliver.Kind()); err != nil {
		return fail(err)
	}

	s.migrator, err = migrations.New(sessions, cfg.Logger, migrations.InSchema(cfg.Schema))
	if err != nil {
		return fail(err)
	}
	if cfg.Migrate {
		if _, err := s.migrator.Up(ctx); err != nil {
			return fail(err)
		}
	} else if err := s.migrator.Check(ctx); err != nil {
		if errors.Is(err, migrations.ErrSchemaBehind) {
			return fail(fmt.Errorf("%w; run `worker migrate up` (or start with --migrate)", err))
		}
		return fail(err)
	}

	if err := migrations.CheckSchema(ctx, pool, cfg.Schema); err != nil {
		return fail(err)
	}
	queueWorkerCounts := queueWorkers(cfg.Queues, delivered)
	changes, err := jobs.SetQueueBounds(ctx, pool, queueBounds(cfg, queueWorkerCounts))
	if err != nil {
		return fail(err)
	}
	jobs.LogBoundChanges(cfg.Logger, changes)

	s.metrics = metrics.New(pool, cfg.Version, cfg.Logger)
	if s.broadcast, err = newBroadcast(cfg, pool, s.metrics.Registry); err != nil {
		return fail(err)
	}
	lockObserver, err := metrics.NewLockObserver(s.metrics.Registry)
	if err != nil {
		return fail(err)
	}
	s.locks = locks.New(sessions, locks.Config{Observer: lockObserver})
	queues := make(map[string]river.QueueConfig, len(queueWorkerCounts))
	for name, n := range queueWorkerCounts {
		queues[name] = river.QueueConfig{MaxWorkers: n}
	}
	// The elector is the leader layer the capabilities register their
	// leader runnables on; it needs nothing they build.
	s.elector, err = election.New(election.Config{
		DatabaseURL: cfg.ElectionDatabaseURL,
		Key:         cfg.ElectionKey,
		Tick:        cfg.LeaderTick,
		TickTimeout: cfg.LeaderTickTimeout,
		Probe:       cfg.StandbyProbe,
		Logger:      cfg.Logger,
		Registerer:  s.metrics.Registry,
	})
	if err != nil {
		return fail(err)
	}
	s.build = &capability.Build{Pool: pool, Sessions: sessions, Schema: cfg.Schema, ClientID: clientID, Logger: cfg.Logger,
		Kinds: registry, Metrics: s.metrics.Registry, Elector: s.elector, Queues: queueWorkerCounts}
	build := s.build
	// The jobs' own middleware: the unique-key middleware makes
	// jobs.WithUniqueKey hold on every insert through this client (the
	// scheduler's, the relay's, Telegram's, an embedder's), as it does
	// through a jobs.Inserter; innermost, the error middleware bounds (or,
	// for kinds with jobs.SensitiveErrors, withholds) an error's message
	// before ferry logs it and River stores it.
	build.Middleware(capability.LayerInsert, jobs.Middleware(nil)...)
	build.Middleware(capability.LayerErrors, jobs.ErrorMiddleware(registry.Sensitive))
	// The capabilities, in order. The seal's verifier comes before the
	// limits in the admit layer: a job ferry did not seal is refused before
	// it may hold a limit's slot. The metrics middleware wraps the tracing
	// one, which wraps the error middleware, so that a span's status holds
	// the error as River stores it (bounded, or withheld).
	alive := liveness.NewCapability(liveness.Section{SettleAfter: cfg.SettleAfter, RescueInterval: cfg.RescueInterval, MaxOrphaned: cfg.MaxOrphaned},
		cfg.ElectionDatabaseURL, cfg.LeaderTick, cfg.LeaderTickTimeout, s.declaredDead)
	sealed := sealcap.New(sealcap.Section{Keys: cfg.SealKeys, Encrypt: cfg.SealEncrypt, ReplayWindow: cfg.SealReplayWindow})
	if err := build.Add(alive, sealed, limits, scheduled, s.metrics, tracing.NewCapability(cfg.TracerProvider), retained); err != nil {
		return fail(configOr(err))
	}
	s.sched = scheduled.Scheduler()
	s.limiter = limits.Limiter()
	middleware := build.WorkMiddleware()
	// Every kind registered by now, the capabilities' among them.
	workers, err := registry.WorkersWith(build.WrapJobContext())
	if err != nil {
		return fail(err)
	}
	s.river, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		// The id is the worker's identity in attempted_by, in ferry_worker
		// and in the fence on river_job (internal/liveness).
		ID: clientID,
		// Through a transaction pooler, LISTEN would hear nothing: River
		// polls every FetchPollInterval instead.
		PollOnly: pooled,
		// River qualifies its tables and names its LISTEN channels after
		// the schema, so two deployments' notifications never cross.
		Schema:               cfg.Schema,
		RescueStuckJobsAfter: rescueStuckJobsAfter(cfg),
		// River's job cleaner; negative is River's -1, keep forever.
		CompletedJobRetentionPeriod: riverRetention(cfg.CompletedJobRetention),
		CancelledJobRetentionPeriod: riverRetention(cfg.CancelledJobRetention),
		DiscardedJobRetentionPeriod: riverRetention(cfg.DiscardedJobRetention),
		FetchCooldown:               cfg.FetchCooldown,
		FetchPollInterval:           cfg.FetchPollInterval,
		JobTimeout:                  cfg.JobTimeout,
		Logger:                      logging.River(cfg.Logger),
		Middleware:                  middleware,
		Queues:                      queues,
		SoftStopTimeout:             cfg.ShutdownGrace,
		Workers:                     workers,
	})
	if err != nil {
		return fail(fmt.Errorf("ferry: new river client: %w", err))
	}
	build.SetRiver(s.river)

	// The routes this worker delivers count for every relay while its
	// liveness lock is held; they are declared before its River client
	// fetches their queues.
	build.Around(capability.Step(func(ctx context.Context) error {
		return outbox.Publish(ctx, s.pool, clientID, s.routes)
	}))
	build.Leader("broadcast-leader", s.announceLeader)
	build.Leader("broadcast-console", s.watchConsole)
	// The relay inserts its delivery jobs through a River client of its
	// own, which works no queue and carries the same insert middleware
	// (unique keys, seals, trace context, metrics). River's client sends an
	// insert notification per queue at most once per FetchCooldown (1 ms
	// by default here), in a round trip of its own inside the inserting
	// transaction; the relay sends the same notification in the round
	// trip that records its deliveries (see outbox.RelayConfig.Inserter),
	// so River's would cost each relay transaction one round trip for
	// nothing. With a cooldown of a day it is sent at most once a day per
	// queue.
	s.relayInserter, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:            cfg.Schema,
		FetchCooldown:     relayNotifyCooldown,
		FetchPollInterval: relayNotifyCooldown,
		Logger:            logging.River(cfg.Logger),
		Middleware:        middleware,
	})
	if err != nil {
		return fail(fmt.Errorf("ferry: new river client for the relay: %w", err))
	}
	s.relay = outbox.NewRelay(outbox.RelayConfig{Pool: pool, ListenConfig: sessions.Config().ConnConfig, Schema: cfg.Schema, Inserter: s.relayInserter, Routes: delivered, RouteGrace: cfg.OutboxRouteGrace, MaxAttempts: maxAttempts, Tracer: tracing.Outbox(cfg.TracerProvider), Logger: cfg.Logger,
		ReleaseElsewhere: true})
	// The election runs beside the workers: whatever it does (an
	// unreachable lock database, a lost lock), jobs keep being worked. The
	// local schedules and the outbox relay run in every process.
	build.Service(s.elector)
	build.Service(s.relay)
	// The release pass of ordered deliveries reads every waiting one: on
	// the leader only, not on every replica.
	build.Leader("outbox-release", s.relay.RunReleases)
	if err := s.metrics.Registry.Register(metrics.NewOutboxCollector(pool, cfg.Logger)); err != nil {
		return fail(err)
	}
	for _, b := range file.Bots {
		client, ok := clients[b.Name]
		if !ok {
			if err := s.metrics.Registry.Register(telegram.OffCollector(b.Name)); err != nil {
				return fail(err)
			}
			s.botStatus = append(s.botStatus, func() telegram.BotStatus { return telegram.OffStatus(b.Name) })
			continue
		}
		p, err := telegram.NewPoller(telegram.PollerConfig{
			Bot: b.Name, Client: client, Pool: pool, Leader: s.elector,
			PollTimeout: b.PollTimeout, AllowedUpdates: b.AllowedUpdates,
			Logger: cfg.Logger, Registerer: s.metrics.Registry,
		})
		if err != nil {
			return fail(&configError{err: err})
		}
		s.botStatus = append(s.botStatus, p.Status)
		build.Leader("telegram."+b.Name, p.Run)
	}
	// Bounded queues: give back, every minute, the admissions of
	// transactions that rolled back (package jobs, "Bounded queues").
	build.Leader("queue-recount", jobs.QueueRecounter(pool, time.Minute, cfg.Logger))
	// The deliveries of a route that no live worker declares any more wait
	// for it, then are stuck, on the same grace as messages.
	build.Leader("outbox-route-sweep", outbox.RouteSweeper{Pool: pool, Client: s.river, Grace: cfg.OutboxRouteGrace, Logger: cfg.Logger}.Run)
	if cfg.OutboxRetention > 0 {
		build.Leader("outbox-retention", outbox.Retention{Pool: pool, Keep: cfg.OutboxRetention, Logger: cfg.Logger}.Run)
	}
	for _, r := range cfg.LeaderRunnables {
		build.Leader(r.Name, r.Run)
	}
	capability.RegisterLeaders[election.Runnable](build, s.elector)

	if cfg.AdminAddr != "off" {
		s.riverUI, err = riverui.NewHandler(&riverui.HandlerOpts{
			Endpoints: riverui.NewEndpoints(s.river, nil),
			Logger:    logging.River(cfg.Logger),
			Prefix:    "/riverui",
		})
		if err != nil {
			return fail(fmt.Errorf("ferry: new river ui handler: %w", err))
		}
		s.admin, err = admin.New(admin.Config{
			Addr:     cfg.AdminAddr,
			Token:    cfg.AdminToken,
			Replica:  clientID,
			Gatherer: s.metrics.Registry,
			Ready:    s.ready,
			Console:  console{s},
			Events:   s.broadcast,
			RiverUI:  s.riverUI,
			Logger:   cfg.Logger,
		})
		if err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// poolMaxConns is the size of the server's pool unless DATABASE_URL sets
// pool_max_conns: max(DefaultPoolMaxConns, held + PoolHeadroom), where held
// is the number of workers that may hold a connection for as long as their
// job runs (see Config.DatabaseURL). routes are the routes this process
// delivers, each from its own queue with RouteWorkers workers.
func poolMaxConns(queues map[string]int, routes *outbox.Routes) int32 {
	held := 0
	for _, r := range routes.All() {
		if r.Handler != nil {
			// A Go handler runs inside its delivery's transaction.
			held += RouteWorkers(r, queues[outbox.Queue])
		}
	}
	return int32(max(DefaultPoolMaxConns, held+PoolHeadroom))
}

// openPool opens a pgx pool with ferry's defaults: an application_name that
// names the process, and maxConns connections unless the URL sets
// pool_max_conns.
func openPool(ctx context.Context, url, role string, maxConns int32, clientID, pooler string) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("ferry: database URL: %s", redact.Postgres(err.Error()))
	}
	if _, set := pcfg.ConnConfig.RuntimeParams["application_name"]; !set {
		host, _ := os.Hostname()
		pcfg.ConnConfig.RuntimeParams["application_name"] = role + ":" + host + ":" + strconv.Itoa(os.Getpid())
	}
	if !strings.Contains(strings.ToLower(url), "pool_max_conns") {
		pcfg.MaxConns = maxConns
	}
	if clientID != "" {
		liveness.ConfigurePool(pcfg, clientID)
	}
	dburl.ApplyPooler(pcfg.ConnConfig, pooler)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("ferry: open database pool: %s", redact.Postgres(err.Error()))
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ferry: connect to database %s: %s", redact.Postgres(pcfg.ConnConfig.Host+"/"+pcfg.ConnConfig.Database), redact.PostgresConnect(err))
	}
	return pool, nil
}

// riverRetention is a River job retention period from ferry's: zero is
// River's default, negative River's -1 (keep forever).
func riverRetention(d time.Duration) time.Duration {
	if d < 0 {
		return -1
	}
	return d
}

// Pool is the server's connection pool, for the caller's own queries.
func (s *Server) Pool() *pgxpool.Pool { return s.pool }

// River is the server's River client (insert jobs with InsertTx). It
// enforces jobs.WithUniqueKey, like a jobs.Inserter.
func (s *Server) River() *river.Client[pgx.Tx] { return s.river }

// Locks returns the named-lock client (package locks) on the server's
// pool: the locks it acquires show in /metrics (ferry_locks_held,
// ferry_lock_acquisitions_total, ferry_lock_losses_total by name).
func (s *Server) Locks() *locks.Client { return s.locks }

// TelegramStatus returns a snapshot of every configured bot (polling,
// standby, backing off, or off), for the admin surface.
func (s *Server) TelegramStatus() []telegram.BotStatus {
	out := make([]telegram.BotStatus, 0, len(s.botStatus))
	for _, st := range s.botStatus {
		out = append(out, st())
	}
	return out
}

// Scheduler is the server's scheduler (NextRun).
func (s *Server) Scheduler() *periodic.Scheduler { return s.sched }

// Elector is the server's leader elector (IsLeader, Term, Status, Fence).
func (s *Server) Elector() *election.Elector { return s.elector }

// Started is closed once Run has started the admin server and the River
// client.
func (s *Server) Started() <-chan struct{} { return s.started }

// AdminAddr is the admin server's bound address ("" when disabled); read it
// after Started.
func (s *Server) AdminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.Addr()
}

func (s *Server) ready(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("database unreachable: %s", redact.Postgres(err.Error()))
	}
	if err := s.migrator.Check(ctx); err != nil {
		return err
	}
	return s.build.CheckReady(ctx)
}

// Run publishes the registered kinds, starts the admin server, the River
// client, the elector, the local schedules and the outbox relay, and works
// jobs until ctx is done. Then it resigns, stops fetching, gives running
// jobs ShutdownGrace to finish, cancels the rest, and returns. River puts
// each interrupted job back to available without counting the attempt, so
// it is worked again, never lost. A worker declared dead by the rescuer
// (liveness.ErrDeclaredDead, which Run then returns) gives its running jobs
// no grace: it cancels them at once, since they run elsewhere now.
//
// Run runs once: a second call returns ErrRunTwice. Whatever Run started is
// stopped before it returns, also when a later start fails, and the pool is
// closed.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.running:
		s.mu.Unlock()
		return ErrRunTwice
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	}
	s.running = true
	s.mu.Unlock()
	defer s.close()

	// A worker declared dead stops as if signalled, and Run says why.
	ctx, stopDead := context.WithCancelCause(ctx)
	defer stopDead(nil)
	s.deadMu.Lock()
	s.dead = stopDead
	s.deadMu.Unlock()

	log := s.cfg.Logger
	if err := s.registry.Publish(ctx, s.pool); err != nil {
		return err
	}
	for _, k := range s.registry.Kinds() {
		if _, ok := s.cfg.Queues[k.Queue]; !ok {
			log.Warn("ferry: a kind's queue is not worked by this process", "kind", k.Name, "queue", k.Queue)
		}
	}
	if s.admin != nil {
		// River UI's background services stop with uiCtx.
		uiCtx, stopUI := context.WithCancel(ctx)
		defer stopUI()
		if err := s.riverUI.Start(uiCtx); err != nil {
			return fmt.Errorf("ferry: start river ui: %w", err)
		}
		if err := s.admin.Start(ctx); err != nil {
			return err
		}
		defer s.admin.Stop()
	}
	// What the capabilities do before River fetches a job (the worker's
	// liveness, the routes it declares, the seal's trigger, the limits),
	// in order; each stops after River has stopped, in reverse order.
	for _, svc := range s.build.AroundServices() {
		if err := svc.Start(ctx); err != nil {
			return err
		}
		defer svc.Stop()
	}
	// River's work contexts must outlive ctx: stopRiver is what ends them,
	// after the grace period. From here on every return stops River.
	if err := s.river.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("ferry: start river client: %w", err)
	}
	riverStopped := false
	defer func() {
		if !riverStopped {
			s.stopRiver()
		}
	}()
	// The capabilities' services (build.Service), in order.
	for _, svc := range s.build.Services() {
		if err := svc.Start(ctx); err != nil {
			return err
		}
		defer svc.Stop()
	}
	close(s.started)
	log.Info("ferry: started",
		"version", s.cfg.Version,
		"queues", queueSummary(s.cfg.Queues),
		"pool_max_conns", s.pool.Config().MaxConns,
		"pooler", s.cfg.Pooler,
		"kinds", len(s.registry.Kinds()),
		"admin_addr", s.AdminAddr())

	select {
	case <-ctx.Done():
	case <-s.river.Stopped():
		return errors.New("ferry: river client stopped unexpectedly")
	}

	// Resign first: a standby takes over the singletons in milliseconds
	// while this process drains its jobs.
	s.elector.Stop()
	riverStopped = true
	if err := context.Cause(ctx); errors.Is(err, liveness.ErrDeclaredDead) {
		s.cancelRiver()
		return err
	}
	s.stopRiver()
	return nil
}

// configOr is err, reported as ErrConfig when a capability said it is one
// of its configuration (capability.Invalid).
func configOr(err error) error {
	if errors.Is(err, capability.ErrConfig) {
		return &configError{err: err}
	}
	return err
}

// declaredDead is the liveness worker's OnDead: Run stops and returns err.
func (s *Server) declaredDead(err error) {
	s.deadMu.Lock()
	defer s.deadMu.Unlock()
	if s.dead != nil {
		s.dead(err)
	}
}

// newClientID names this process's River client, and so its worker:
// host, pid and start time, unique across restarts and hosts.
func newClientID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, host)
	return fmt.Sprintf("%s_%d_%s", host, os.Getpid(), time.Now().UTC().Format("20060102T150405.000000"))
}

// rescueStuckJobsAfter is River's own rescuer's horizon, the backstop for
// what ferry's liveness cannot see (a River client that is not a ferry
// worker): the job timeout, the shutdown grace and its budget, and a
// minute, instead of a flat hour. River skips a job whose own timeout has
// not run out, or that has none. Without a job timeout, River's hour.
func rescueStuckJobsAfter(cfg Config) time.Duration {
	if cfg.JobTimeout < 0 {
		return 0
	}
	return cfg.JobTimeout + cfg.ShutdownGrace + hardStopBudget + time.Minute
}

// stopRiver gives running jobs the grace period, then cancels them and
// waits for them a little longer.
func (s *Server) stopRiver() {
	log := s.cfg.Logger
	log.Info("ferry: stopping; running jobs have the grace period to finish", "grace", s.cfg.ShutdownGrace)
	stopCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace+hardStopBudget)
	defer cancel()
	err := s.river.Stop(stopCtx)
	// The slots of the jobs that ended go back before the process does.
	s.limiter.Wait()
	if err != nil {
		log.Error("ferry: jobs still running after the grace period and their cancellation; River's rescuer will retry them", "error", err)
		return
	}
	log.Info("ferry: stopped")
}

// cancelRiver stops River without a grace period: running jobs are
// cancelled at once. It is how a worker declared dead stops: its running
// jobs were rescued and run elsewhere now, and the fence refuses whatever
// outcome it would write for them.
func (s *Server) cancelRiver() {
	log := s.cfg.Logger
	log.Warn("ferry: stopping without grace; running jobs are cancelled, since they run elsewhere now")
	stopCtx, cancel := context.WithTimeout(context.Background(), hardStopBudget)
	defer cancel()
	err := s.river.StopAndCancel(stopCtx)
	s.limiter.Wait()
	if err != nil {
		log.Error("ferry: jobs still running after their cancellation", "error", err)
		return
	}
	log.Info("ferry: stopped")
}

// Close releases what New opened (the pool) for a Server that will not
// Run; a Run after Close returns ErrClosed. It does nothing to a Server
// that Run: cancel Run's context to stop it, and Run releases everything
// when it returns. Safe to call twice.
func (s *Server) Close() {
	s.mu.Lock()
	running := s.running
	s.mu.Unlock()
	if !running {
		s.close()
	}
}

func (s *Server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.announcing.Wait()
	if s.broadcast != nil {
		s.broadcast.Close()
	}
	s.pool.Close()
	if s.sessions != s.pool {
		s.sessions.Close()
	}
}

func queueSummary(q map[string]int) string {
	var out []byte
	for i, name := range slices.Sorted(maps.Keys(q)) {
		if i > 0 {
			out = append(out, ',')
		}
		out = fmt.Appendf(out, "%s=%d", name, q[name])
	}
	return string(out)
}

// chainBudget is the outbox's DeliverConfig.ChainBudget: its default, or
// none (-1) when a limit applies to delivery jobs (their kind, the outbox
// queue or a route's queue). A limit counts jobs, and a job that goes on
// with its ordered key's next messages would deliver them past a rate or
// a concurrency meant for the receiver; under such a limit each message
// gets a job of its own.
func chainBudget(limits []limit.Limit, routes *outbox.Routes) time.Duration {
	for _, l := range limits {
		if l.Kind == (outbox.DeliverArgs{}).Kind() || l.Queue == outbox.Queue {
			return -1
		}
		for _, r := range routes.All() {
			if l.Queue == outbox.QueueFor(r.Name) {
				return -1
			}
		}
	}
	return 0
}
