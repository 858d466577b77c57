package ferry

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/admin"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/base/schema"
	"github.com/ferryq/ferry/internal/broadcastcap"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/internal/outboxcap"
	"github.com/ferryq/ferry/internal/queuecap"
	"github.com/ferryq/ferry/internal/retention"
	"github.com/ferryq/ferry/internal/sealcap"
	"github.com/ferryq/ferry/internal/workflowcap"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

// Defaults. Each section's own defaults live beside it; these are their
// names here for a caller of this package.
const (
	DefaultAdminAddr = admin.DefaultAddr
	DefaultQueues    = queuecap.DefaultWorkers
	// DefaultFetchCooldown is River's least (river.FetchCooldownMin),
	// measured in internal/queuecap's DefaultFetchCooldown.
	DefaultFetchCooldown     = queuecap.DefaultFetchCooldown
	DefaultFetchPollInterval = queuecap.DefaultFetchPollInterval
	DefaultShutdownGrace     = queuecap.DefaultShutdownGrace
	DefaultOutboxRetention   = outboxcap.DefaultRetention
	DefaultJobTimeout        = queuecap.DefaultJobTimeout
	// DefaultPoolMaxConns is the least size of the server's connection pool;
	// PoolHeadroom is how many connections it keeps beyond those that
	// workers may hold for as long as their jobs run. See
	// DatabaseConfig.URL for the rule.
	DefaultPoolMaxConns = 20
	PoolHeadroom        = 10
	// MaxWorkersPerQueue bounds one queue's workers in one process.
	MaxWorkersPerQueue = queuecap.MaxWorkersPerQueue
	// DefaultHandlerRouteWorkers is the most workers a Go handler route's
	// queue gets from the outbox queue's count (see RouteWorkers): each of
	// its running deliveries holds a connection of the pool.
	DefaultHandlerRouteWorkers = 20
)

// RouteWorkers is the worker count of route r's queue in a process whose
// outbox queue has outboxWorkers workers: r.Workers when set; else
// outboxWorkers for a webhook, and at most DefaultHandlerRouteWorkers of it
// for a Go handler (a Telegram command router is one), whose deliveries
// each hold a connection while the handler runs.
//
// A webhook's delivery holds no connection during its request, and more
// workers make River's fetches bigger: with 50 workers per route queue
// instead of 20, the ordered bench fetched about 12 delivery jobs a fetch
// instead of 6 in its unordered runs, and delivered 1,497 messages a
// second instead of 1,304 unordered, 1,117 instead of 933 ordered
// (README, "Ordered delivery per key"). A receiver that cannot take that
// many requests at once from each replica gets a route with fewer
// workers.
func RouteWorkers(r outbox.Route, outboxWorkers int) int {
	switch {
	case r.Workers > 0:
		return r.Workers
	case r.Handler != nil:
		return min(outboxWorkers, DefaultHandlerRouteWorkers)
	default:
		return outboxWorkers
	}
}

// Config configures a ferry Server: a section per capability, then what
// only Go gives (kinds, schedules, logger, tracer). The zero value of
// every setting but Database.URL is replaced by its default (see
// WithDefaults).
//
// Each setting declares its environment variable, its flag of `worker
// run` and, where the config file sets it too, its file key, in the tags
// of its field (internal/settings reads them): `worker run` takes its
// flags from there, and the configuration reference is generated from
// there.
type Config struct {
	// ConfigFile is the YAML file of schedules, queues, limits, outbox
	// routes and Telegram bots; "" for none.
	ConfigFile string `env:"FERRY_CONFIG" flag:"config" usage:"YAML file of schedules, queues, limits, outbox routes and Telegram bots (docs/configuration.md)"`
	// Database is where ferry's and River's tables live, and how to reach
	// them.
	Database DatabaseConfig
	// Queues are the queues this process works, their bounds, and how
	// River fetches and times their jobs.
	Queues QueuesConfig
	// Leader is the leader layer: the election's lock and tick, and what
	// runs only on the leader.
	Leader LeaderConfig
	// Liveness is the worker's liveness and the rescue of dead workers'
	// jobs.
	Liveness LivenessConfig
	// Admin is the admin console, /healthz, /readyz and /metrics.
	Admin AdminConfig
	// Outbox is the outbox's relay and deliveries.
	Outbox OutboxConfig
	// Telegram is the Telegram bots' API server and command routers (the
	// bots are the config file's).
	Telegram TelegramConfig
	// Broadcast signs this process's broadcast messages.
	Broadcast BroadcastConfig
	// Seal seals what this process inserts and verifies what it works.
	Seal SealConfig
	// Retention is how long the history tables, ferry's and River's jobs,
	// keep their rows.
	Retention RetentionConfig
	// Workflow is how long a finished workflow is kept with its jobs.
	Workflow WorkflowConfig

	// Schedules are schedules from Go code, beside the config file's.
	// Local ones (Local: true) run in every process; the rest run on the
	// leader and enqueue a job per tick.
	Schedules []periodic.Schedule
	// Kinds are the caller's own job kinds (jobs.Define), worked beside
	// ferry's built-in ones.
	Kinds []jobs.Kind

	// Logger defaults to a JSON logger on stderr.
	Logger *slog.Logger
	// TracerProvider makes the spans of every job ("river.work/<kind>", a
	// child of the span that inserted it), of the outbox relay and of each
	// webhook request (which carries its W3C traceparent). Default: the
	// global provider (otel.GetTracerProvider), which records nothing
	// unless the embedder set one; `worker run` sets one from the OTEL_*
	// variables (internal/tracing.Setup). Its shutdown is the caller's.
	TracerProvider trace.TracerProvider
	// Version is reported in logs and ferry_build_info; defaults to the
	// module version of the binary.
	Version string
}

// DatabaseConfig is where ferry's and River's tables live.
type DatabaseConfig struct {
	// URL is the Postgres connection string. pgx pool settings such as
	// pool_max_conns may be given in it.
	//
	// Unless it sets pool_max_conns (which then wins, whatever its value),
	// the server's pool has max(DefaultPoolMaxConns, held + PoolHeadroom)
	// connections. held counts the workers that may each hold a connection
	// for as long as their job runs: the workers of each route that is a Go
	// handler (each route is delivered from a queue of its own with
	// RouteWorkers workers, and a handler runs inside its delivery's
	// transaction, up to the route's timeout; a Telegram command router is
	// one). The headroom is for everything else that needs a connection
	// meanwhile: River's fetches, completions, notifier and maintenance,
	// the outbox relay, the scheduler, the Telegram pollers, metrics, the
	// admin console and the short queries of other jobs. Without it, as
	// many slow handlers as connections would stall all of those. With the
	// default queues and a Go handler route, that is 30 connections per
	// process.
	URL string `env:"DATABASE_URL" flag:"database-url" secret:"true" usage:"Postgres connection string"`
	// SessionURL is where the sessions that must last live: the leader
	// lock, each worker's liveness, LISTEN wake-ups, lock waits and the
	// migrations' lock; default URL. It must reach Postgres directly or
	// through a session-mode pooler.
	SessionURL string `env:"FERRY_SESSION_DATABASE_URL,FERRY_ELECTION_DATABASE_URL" flag:"session-database-url,election-database-url" secret:"true" default:"--database-url" usage:"Postgres for the sessions that must last (leader lock, liveness, LISTEN, lock waits), direct or session-mode"`
	// Pooler is what URL goes through: none (the default), session, or
	// transaction (PgBouncer's transaction mode: job traffic only; River
	// polls instead of LISTENing, statements are not kept prepared, and
	// everything that needs a session uses SessionURL, which must then be
	// set apart).
	Pooler string `env:"FERRY_POOLER" flag:"pooler" usage:"what --database-url goes through: none, session, or transaction (PgBouncer's transaction mode; needs --session-database-url)"`
	// Schema is the Postgres schema of this deployment's tables, River's
	// and ferry's; default "", the search_path's first, usually public.
	// Several deployments share a database, each in its own schema, with
	// its own leader, schedules, outbox and workers
	// (internal/base/schema). Every session ferry opens sets search_path
	// to it; through a transaction pooler, which does not pass search_path
	// on, the role's own search_path must lead to it (checked at start).
	Schema string `env:"FERRY_SCHEMA" flag:"schema" default:"the search_path's first, usually public" usage:"Postgres schema of this deployment's tables, River's and ferry's, for several deployments in one database"`
	// Migrate applies pending migrations at start. Without it, New refuses
	// a database whose schema is behind this build.
	Migrate bool `env:"FERRY_MIGRATE" flag:"migrate" usage:"apply pending migrations before starting"`
}

// LeaderConfig is the leader layer's configuration.
type LeaderConfig struct {
	// Key is the leader lock; default election.KeyElection, or the
	// schema's own (Database.Schema).
	Key int64 `env:"FERRY_ELECTION_KEY" flag:"election-key" default:"911000001, or FERRY_SCHEMA's own" usage:"advisory lock key of the leader election"`
	// Tick is the leader's ownership check interval.
	Tick time.Duration `env:"FERRY_LEADER_TICK" flag:"leader-tick" usage:"how often the leader proves it still holds the lock"`
	// TickTimeout bounds each check; default a third of the tick, at most
	// 5s.
	TickTimeout time.Duration `env:"FERRY_LEADER_TICK_TIMEOUT" flag:"leader-tick-timeout" default:"a third of the tick, at most 5s" usage:"bound of each ownership check"`
	// StandbyProbe caps a standby's backoff after a failed wait for the
	// lock. A waiting standby tries the lock at once on a resignation
	// notice and every 250 ms (or tick, when shorter) otherwise, whatever
	// the probe.
	StandbyProbe time.Duration `env:"FERRY_STANDBY_PROBE" flag:"standby-probe" usage:"most a standby backs off after a failed wait for the lock (a freed lock is taken within 250 ms)"`
	// Runnables run on the leader only, cancelled within one tick of a
	// lost lock.
	Runnables []LeaderRunnable
}

// The sections below are built by a package of their own, which holds
// their fields, defaults and checks; these are their names here.

// QueuesConfig is the type of Config.Queues.
type QueuesConfig = queuecap.Section

// LivenessConfig is the type of Config.Liveness.
type LivenessConfig = liveness.Section

// AdminConfig is the type of Config.Admin.
type AdminConfig = admin.Section

// OutboxConfig is the type of Config.Outbox.
type OutboxConfig = outboxcap.Section

// TelegramConfig is the type of Config.Telegram.
type TelegramConfig = telegram.Section

// BroadcastConfig is the type of Config.Broadcast.
type BroadcastConfig = broadcastcap.Section

// SealConfig is the type of Config.Seal.
type SealConfig = sealcap.Section

// RetentionConfig is the type of Config.Retention.
type RetentionConfig = retention.Section

// WorkflowConfig is the type of Config.Workflow.
type WorkflowConfig = workflowcap.Section

// QueueWorkers maps queues to their worker counts (FERRY_QUEUES).
type QueueWorkers = queuecap.Workers

// LeaderRunnable is named work that runs only while this process leads.
type LeaderRunnable struct {
	Name string
	Run  election.Runnable
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.Database.SessionURL = cmp.Or(c.Database.SessionURL, c.Database.URL)
	c.Database.Pooler = cmp.Or(c.Database.Pooler, dburl.PoolerNone)
	if s, err := schema.Parse(c.Database.Schema); err == nil {
		c.Database.Schema = s
	}
	c.Queues = c.Queues.WithDefaults()
	c.Leader.Key = cmp.Or(c.Leader.Key, schema.Key64(election.KeyElection, c.Database.Schema))
	c.Leader.Tick = cmp.Or(c.Leader.Tick, election.DefaultTick)
	c.Leader.StandbyProbe = cmp.Or(c.Leader.StandbyProbe, election.DefaultProbe)
	c.Liveness = c.Liveness.WithDefaults()
	c.Admin = c.Admin.WithDefaults()
	c.Outbox = c.Outbox.WithDefaults()
	c.Seal = c.Seal.WithDefaults()
	c.Retention = c.Retention.WithDefaults()
	c.Workflow = c.Workflow.WithDefaults()
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	c.Version = cmp.Or(c.Version, Version())
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ErrConfig marks an invalid Config: bad input, which the CLI reports with
// exit code 2.
var ErrConfig = errors.New("invalid configuration")

// configError wraps err so that errors.Is(err, ErrConfig) holds while the
// message stays err's own.
type configError struct{ err error }

func (e *configError) Error() string   { return e.err.Error() }
func (e *configError) Unwrap() []error { return []error{e.err, ErrConfig} }

func (c Config) validate() error {
	if err := c.check(); err != nil {
		return &configError{err: err}
	}
	return nil
}

func (c Config) check() error {
	return errors.Join(c.Database.check(), c.Queues.Check(), c.Leader.check(), c.Liveness.Check(), c.Admin.Check(),
		c.Outbox.Check(), c.Telegram.Check(), c.Seal.Check(), c.Retention.Check(),
		c.Workflow.Check())
}

func (d DatabaseConfig) check() error {
	var errs []error
	if d.URL == "" {
		errs = append(errs, errors.New("database URL is empty: set DATABASE_URL or --database-url"))
	} else if _, err := pgxpool.ParseConfig(d.URL); err != nil {
		errs = append(errs, fmt.Errorf("database URL: %s", redact.Postgres(err.Error())))
	}
	if d.SessionURL != d.URL {
		if _, err := pgxpool.ParseConfig(d.SessionURL); err != nil {
			errs = append(errs, fmt.Errorf("session database URL: %s", redact.Postgres(err.Error())))
		}
	}
	if _, err := schema.Parse(d.Schema); err != nil {
		errs = append(errs, err)
	}
	if pooler, err := dburl.ParsePooler(d.Pooler); err != nil {
		errs = append(errs, err)
	} else if pooler == dburl.PoolerTransaction && d.SessionURL == d.URL {
		errs = append(errs, fmt.Errorf("%s=transaction needs FERRY_SESSION_DATABASE_URL, Postgres itself or a session-mode pool: the leader lock, liveness, LISTEN and the migrations' lock cannot go through a transaction pooler", dburl.EnvPooler))
	}
	return errors.Join(errs...)
}

func (l LeaderConfig) check() error {
	var errs []error
	if l.Tick < election.MinTick {
		errs = append(errs, fmt.Errorf("leader tick %s is under %s", l.Tick, election.MinTick))
	}
	if l.TickTimeout < 0 {
		errs = append(errs, fmt.Errorf("leader tick timeout %s must be above zero", l.TickTimeout))
	}
	if l.StandbyProbe < election.MinTick {
		errs = append(errs, fmt.Errorf("standby probe %s is under %s", l.StandbyProbe, election.MinTick))
	}
	return errors.Join(errs...)
}

// ParseQueues reads "name=workers,name=workers" (FERRY_QUEUES).
func ParseQueues(s string) (map[string]int, error) { return queuecap.ParseWorkers(s) }
