package ferry

// The floor plan. A Server is built in three storeys, each using only the
// ones below it: (1) the configuration, Config with a section per
// capability whose defaults and checks live in the capability's package,
// and the config file; (2) the shared parts: pools, schema check, kinds'
// registry, metrics registry, elector; (3) the capabilities, in the order
// of New's list, each recording in one capability.Build what it
// contributes (kinds, middleware by layer, services, leader runnables,
// collectors, readiness, admin pages); River is built from the record and
// Run starts it. A new capability is a package, its section's field in
// Config and one line of the list (docs/floor-plan.md).

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

	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/admin"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/broadcastcap"
	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/internal/config"
	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/internal/lockcap"
	"github.com/ferryq/ferry/internal/logging"
	"github.com/ferryq/ferry/internal/metrics"
	"github.com/ferryq/ferry/internal/outboxcap"
	"github.com/ferryq/ferry/internal/pilot"
	"github.com/ferryq/ferry/internal/queuecap"
	"github.com/ferryq/ferry/internal/retention"
	"github.com/ferryq/ferry/internal/sealcap"
	"github.com/ferryq/ferry/internal/tracing"
	"github.com/ferryq/ferry/internal/workflowcap"
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
	// sessions is a small pool on cfg.Database.SessionURL for what needs a
	// session (the migrations' lock, lock waits, the relay's LISTEN) when
	// pool goes through a transaction pooler; pool itself otherwise.
	sessions *pgxpool.Pool
	river    *river.Client[pgx.Tx]
	registry *jobs.Registry
	migrator *migrations.Migrator
	metrics  *metrics.Metrics
	locks    *locks.Client
	elector  *election.Elector
	// broadcast is the broadcast capability: its Broker (Broadcast), and
	// the announcements close waits for.
	broadcast *broadcastcap.Capability
	// The capabilities the server reads after they built (the console,
	// Scheduler, TelegramStatus, the limits' slots at the stop).
	schedules *periodic.Capability
	limits    *limit.Capability
	outbox    *outboxcap.Capability
	telegram  *telegram.Capability
	console   *admin.Capability
	// clientID is this process's River client id: its worker's identity.
	clientID string
	started  chan struct{}

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

// New validates cfg, connects to Postgres, checks (or with cfg.Database.Migrate,
// applies) the schema, and builds the River client. Nothing runs until Run.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	registry := &jobs.Registry{}
	if err := registry.Add(append(jobs.Builtin(), cfg.Kinds...)...); err != nil {
		return nil, err
	}
	file, err := config.Load(cfg.ConfigFile, registry)
	if err != nil {
		return nil, &configError{err: err}
	}
	if err := applyFileQueues(&cfg, file.Queues); err != nil {
		return nil, &configError{err: err}
	}
	if err := inSchema(&cfg.Database); err != nil {
		return nil, &configError{err: err}
	}
	s := &Server{cfg: cfg, registry: registry, started: make(chan struct{})}
	// The capabilities, each checking its own section; nothing connects yet.
	c, err := s.capabilities(file)
	if err != nil {
		return nil, &configError{err: err}
	}
	// The shared parts: pools, schema, metrics, the leader layer.
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	fail := func(err error) (*Server, error) {
		s.closePools()
		return nil, err
	}
	s.metrics = metrics.New(s.pool, cfg.Version, cfg.Logger)
	s.elector, err = election.New(election.Config{
		DatabaseURL: cfg.Database.SessionURL, Key: cfg.Leader.Key, Tick: cfg.Leader.Tick, TickTimeout: cfg.Leader.TickTimeout,
		Probe: cfg.Leader.StandbyProbe, Logger: cfg.Logger, Registerer: s.metrics.Registry,
	})
	if err != nil {
		return fail(err)
	}
	queues := queueWorkers(cfg.Queues.Workers, s.outbox.Delivered())

	// The capabilities record what they contribute, in order; the River
	// clients are built from the record.
	s.build = &capability.Build{Ctx: ctx, Pool: s.pool, Sessions: s.sessions, Schema: cfg.Database.Schema, ClientID: s.clientID, Logger: cfg.Logger,
		Kinds: registry, Metrics: s.metrics.Registry, Gatherer: s.metrics.Registry, Elector: s.elector, Queues: queues, Pilot: &pilot.Pilot{}}
	build := s.build
	// The jobs' own middleware: the unique-key middleware makes
	// jobs.WithUniqueKey hold on every insert through this client (the
	// scheduler's, the relay's, Telegram's, an embedder's), as it does
	// through a jobs.Inserter; innermost, the error middleware bounds (or,
	// for kinds with jobs.SensitiveErrors, withholds) an error's message
	// before ferry logs it and River stores it.
	build.Middleware(capability.LayerInsert, jobs.Middleware(nil)...)
	build.Middleware(capability.LayerErrors, jobs.ErrorMiddleware(registry.Sensitive))
	// The election runs beside the workers: whatever it does (an
	// unreachable lock database, a lost lock), jobs keep being worked.
	build.Service(s.elector)
	// The list. The seal's verifier comes before the limits in the admit
	// layer (a job ferry did not seal is refused before it may hold a
	// limit's slot); the metrics middleware wraps the tracing one, which
	// wraps the error middleware, so that a span's status holds the error
	// as River stores it.
	if err := build.Add(
		s.console,
		queuecap.New(cfg.Queues),
		s.broadcast,
		c.locks,
		c.liveness,
		c.seal,
		s.limits,
		s.schedules,
		s.outbox,
		s.telegram,
		s.metrics,
		tracing.NewCapability(cfg.TracerProvider),
		c.retention,
		workflowcap.New(cfg.Workflow),
	); err != nil {
		return fail(configOr(err))
	}
	s.locks = c.locks.Client()
	for _, r := range cfg.Leader.Runnables {
		build.Leader(r.Name, r.Run)
	}
	capability.RegisterLeaders[election.Runnable](build, s.elector)
	if err := s.newRiver(queues); err != nil {
		return fail(err)
	}
	return s, nil
}

// caps are the capabilities New builds that the server does not keep
// (those it reads later are its fields).
type caps struct {
	locks     *lockcap.Capability
	liveness  *liveness.Capability
	seal      *sealcap.Capability
	retention *retention.Capability
}

// capabilities constructs the capabilities of the configuration, each of
// which checks its own section; nothing connects. Telegram's command
// routers are routes of the outbox's.
func (s *Server) capabilities(file config.Loaded) (c caps, err error) {
	cfg := s.cfg
	s.schedules, err = periodic.NewCapability(append(slices.Clone(cfg.Schedules), file.Schedules...))
	if err != nil {
		return c, err
	}
	s.telegram, err = telegram.NewCapability(cfg.Telegram, file.Bots, cfg.Logger)
	if err != nil {
		return c, err
	}
	s.limits, err = limit.NewCapability(file.Limits, cfg.Queues.FetchPollInterval)
	if err != nil {
		return c, err
	}
	c.retention, err = retention.NewCapability(cfg.Retention)
	if err != nil {
		return c, err
	}
	outbox := cfg.Outbox
	outbox.Routes = slices.Concat(outbox.Routes, file.Routes, s.telegram.Routes())
	outbox.MaxAttempts = cmp.Or(outbox.MaxAttempts, file.OutboxMaxAttempts)
	s.outbox, err = outboxcap.New(outbox, cfg.Queues.Workers, tracing.Outbox(cfg.TracerProvider), file.Limits)
	if err != nil {
		return c, err
	}
	c.liveness = liveness.NewCapability(cfg.Liveness, cfg.Database.SessionURL, cfg.Leader.Tick, cfg.Leader.TickTimeout, s.declaredDead)
	c.seal = sealcap.New(cfg.Seal)
	if s.broadcast, err = broadcastcap.New(cfg.Broadcast, cfg.Database.SessionURL, cfg.Leader.Tick); err != nil {
		return c, err
	}
	c.locks = lockcap.New()
	s.console = admin.NewCapability(cfg.Admin, admin.Sources{
		LeaderKey:         cfg.Leader.Key,
		Status:            func() election.Status { return s.elector.Status() },
		Events:            func() admin.Events { return s.broadcast.Broker() },
		OutboxMaxAttempts: s.outbox.MaxAttempts,
		Telegram:          s.telegram.Status,
		Ready:             s.ready,
	})
	return c, nil
}

// inSchema points cfg's connection strings at its schema: a deployment in
// a schema of its own, every session finds its tables first (through a
// transaction pooler, the role's search_path must, which the migrator's
// check makes sure of).
func inSchema(db *DatabaseConfig) (err error) {
	if db.Schema == "" {
		return nil
	}
	if db.Pooler != dburl.PoolerTransaction {
		if db.URL, err = dburl.WithSearchPath(db.URL, db.Schema); err != nil {
			return err
		}
	}
	db.SessionURL, err = dburl.WithSearchPath(db.SessionURL, db.Schema)
	return err
}

// open opens the server's pools (sized for the outbox routes it
// delivers) and checks (or with cfg.Database.Migrate, applies) the migrations.
func (s *Server) open(ctx context.Context) error {
	cfg := &s.cfg
	var err error
	s.clientID = newClientID()
	if s.pool, err = openPool(ctx, cfg.Database.URL, "ferry-worker", poolMaxConns(cfg.Queues.Workers, s.outbox.Delivered()), s.clientID, cfg.Database.Pooler); err != nil {
		return err
	}
	s.sessions = s.pool
	if cfg.Database.Pooler == dburl.PoolerTransaction {
		if s.sessions, err = openPool(ctx, cfg.Database.SessionURL, "ferry-worker-session", 4, "", dburl.PoolerNone); err != nil {
			s.pool.Close()
			return err
		}
	}
	if s.migrator, err = migrations.New(s.sessions, cfg.Logger, migrations.InSchema(cfg.Database.Schema)); err != nil {
		s.closePools()
		return err
	}
	if cfg.Database.Migrate {
		_, err = s.migrator.Up(ctx)
	} else if err = s.migrator.Check(ctx); errors.Is(err, migrations.ErrSchemaBehind) {
		err = fmt.Errorf("%w; run `worker migrate up` (or start with --migrate)", err)
	}
	if err == nil {
		err = migrations.CheckSchema(ctx, s.pool, cfg.Database.Schema)
	}
	if err != nil {
		s.closePools()
	}
	return err
}

// closePools closes what open opened.
func (s *Server) closePools() {
	s.pool.Close()
	if s.sessions != s.pool {
		s.sessions.Close()
	}
}

// newRiver builds the server's River client from what the capabilities
// recorded, working queues (by worker count), and its insert-only sibling,
// and hands both to the capabilities.
func (s *Server) newRiver(queues map[string]int) error {
	cfg, build := s.cfg, s.build
	middleware := build.WorkMiddleware()
	// Every kind registered by now, the capabilities' among them.
	workers, err := s.registry.WorkersWith(build.WrapJobContext())
	if err != nil {
		return err
	}
	riverQueues := make(map[string]river.QueueConfig, len(queues))
	for name, n := range queues {
		riverQueues[name] = river.QueueConfig{MaxWorkers: n}
	}
	s.river, err = river.NewClient(build.Driver(riverpgxv5.New(s.pool)), &river.Config{
		// The id is the worker's identity in attempted_by, in ferry_worker
		// and in the fence on river_job (internal/liveness).
		ID: s.clientID,
		// Through a transaction pooler, LISTEN would hear nothing: River
		// polls every FetchPollInterval instead.
		PollOnly: cfg.Database.Pooler == dburl.PoolerTransaction,
		// River qualifies its tables and names its LISTEN channels after
		// the schema, so two deployments' notifications never cross.
		Schema:               cfg.Database.Schema,
		RescueStuckJobsAfter: rescueStuckJobsAfter(cfg),
		// River's job cleaner; negative is River's -1, keep forever.
		CompletedJobRetentionPeriod: retention.River(cfg.Retention.CompletedJobs),
		CancelledJobRetentionPeriod: retention.River(cfg.Retention.CancelledJobs),
		DiscardedJobRetentionPeriod: retention.River(cfg.Retention.DiscardedJobs),
		FetchCooldown:               cfg.Queues.FetchCooldown,
		FetchPollInterval:           cfg.Queues.FetchPollInterval,
		JobTimeout:                  cfg.Queues.JobTimeout,
		Logger:                      logging.River(cfg.Logger),
		Middleware:                  middleware,
		Queues:                      riverQueues,
		SoftStopTimeout:             cfg.Queues.ShutdownGrace,
		Workers:                     workers,
	})
	if err != nil {
		return fmt.Errorf("ferry: new river client: %w", err)
	}
	// The insert-only client works no queue and carries the same insert
	// middleware (unique keys, seals, trace context). River's client sends
	// an insert notification per queue at most once per FetchCooldown (1
	// ms by default here), in a round trip of its own inside the inserting
	// transaction; the relay sends the same notification in the round
	// trip that records its deliveries (see outbox.RelayConfig.Inserter),
	// so River's would cost each relay transaction one round trip for
	// nothing. With a cooldown of a day it is sent at most once a day per
	// queue.
	insertOnly, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		Schema:            cfg.Database.Schema,
		FetchCooldown:     relayNotifyCooldown,
		FetchPollInterval: relayNotifyCooldown,
		Logger:            logging.River(cfg.Logger),
		Middleware:        middleware,
	})
	if err != nil {
		return fmt.Errorf("ferry: new river client for the relay: %w", err)
	}
	return build.SetRiver(s.river, insertOnly)
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

// Broadcast returns this process's broadcast Broker: publish and subscribe
// on it (package broadcast) rather than opening another LISTEN session.
// Its keys are Config.Broadcast.Keys.
func (s *Server) Broadcast() *broadcast.Broker { return s.broadcast.Broker() }

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
func (s *Server) TelegramStatus() []telegram.BotStatus { return s.telegram.Status() }

// Scheduler is the server's scheduler (NextRun).
func (s *Server) Scheduler() *periodic.Scheduler { return s.schedules.Scheduler() }

// Elector is the server's leader elector (IsLeader, Term, Status, Fence).
func (s *Server) Elector() *election.Elector { return s.elector }

// Started is closed once Run has started the admin server and the River
// client.
func (s *Server) Started() <-chan struct{} { return s.started }

// AdminAddr is the admin server's bound address ("" when disabled); read it
// after Started.
func (s *Server) AdminAddr() string { return s.console.Addr() }

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
		if _, ok := s.cfg.Queues.Workers[k.Queue]; !ok {
			log.Warn("ferry: a kind's queue is not worked by this process", "kind", k.Name, "queue", k.Queue)
		}
	}
	// What the capabilities do before River fetches a job (the admin
	// server, the worker's liveness, the seal's trigger, the limits, the
	// routes it declares), in order; each stops after River has stopped,
	// in reverse order.
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
		"queues", queueSummary(s.cfg.Queues.Workers),
		"pool_max_conns", s.pool.Config().MaxConns,
		"pooler", s.cfg.Database.Pooler,
		"kinds", len(s.registry.Kinds()),
		"capabilities", strings.Join(s.build.Names(), ","),
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
	if cfg.Queues.JobTimeout < 0 {
		return 0
	}
	return cfg.Queues.JobTimeout + cfg.Queues.ShutdownGrace + hardStopBudget + time.Minute
}

// stopRiver gives running jobs the grace period, then cancels them and
// waits for them a little longer.
func (s *Server) stopRiver() {
	log := s.cfg.Logger
	log.Info("ferry: stopping; running jobs have the grace period to finish", "grace", s.cfg.Queues.ShutdownGrace)
	stopCtx, cancel := context.WithTimeout(context.Background(), s.cfg.Queues.ShutdownGrace+hardStopBudget)
	defer cancel()
	err := s.river.Stop(stopCtx)
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
	s.broadcast.Close()
	s.closePools()
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
