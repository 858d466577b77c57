package ferry

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/admin"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/base/schema"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/internal/retention"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/seal"
	"github.com/ferryq/ferry/telegram"
)

// Defaults. The fetch settings were chosen from measurements (see README,
// "Tuning"): River's own defaults (100 ms cooldown, 1 s poll) cap each queue
// at about MaxWorkers jobs per 100 ms and put pickup p99 near 100 ms.
const (
	DefaultAdminAddr = "127.0.0.1:9090"
	DefaultQueues    = "default=1000,outbox=50"
	// DefaultFetchCooldown is River's least (river.FetchCooldownMin): with
	// the inserters' 1 ms notifications (jobs.InsertNotifyCooldown), pickup
	// at 500 jobs/s measured p50 1.5 to 1.6 ms and p99 5.7 to 6.0 ms
	// against 4.5 ms and 9.1 to 9.4 ms at 5 ms, and a backlog ran no slower
	// (README, "Tuning"). It bounds a replica's fetches of a queue at 1,000
	// a second while inserts notify or, under a backlog, workers free up
	// (200 at 5 ms); idle, the poll's 10 a second.
	DefaultFetchCooldown     = river.FetchCooldownMin
	DefaultFetchPollInterval = 100 * time.Millisecond
	DefaultShutdownGrace     = 25 * time.Second
	// DefaultOutboxRetention keeps delivered outbox messages and Go
	// receivers' receive records a week: well past the longest retry
	// schedule (a day of hourly retries by default), so a redelivery is
	// still recognised.
	DefaultOutboxRetention = 7 * 24 * time.Hour
	DefaultJobTimeout      = time.Minute
	// DefaultPoolMaxConns is the least size of the server's connection pool;
	// PoolHeadroom is how many connections it keeps beyond those that
	// workers may hold for as long as their jobs run. See Config.DatabaseURL
	// for the rule.
	DefaultPoolMaxConns = 20
	PoolHeadroom        = 10
	// MaxWorkersPerQueue bounds one queue's workers in one process.
	MaxWorkersPerQueue = 10_000
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

// Config configures a ferry Server. The zero value of every field but
// DatabaseURL is replaced by its default (see WithDefaults).
type Config struct {
	// DatabaseURL is the Postgres connection string (DATABASE_URL). pgx pool
	// settings such as pool_max_conns may be given in it.
	//
	// Unless it sets pool_max_conns (which then wins, whatever its value),
	// the server's pool has max(DefaultPoolMaxConns, held + PoolHeadroom)
	// connections. held counts the workers that may each hold a connection
	// for as long as their job runs: the workers of each route that is a Go
	// handler (each route is delivered from a queue of its own with
	// RouteWorkers workers, and a handler runs inside its delivery's
	// transaction, up to the route's timeout; a Telegram command router is
	// one). The
	// headroom is for everything else that needs a connection meanwhile:
	// River's fetches, completions, notifier and maintenance, the outbox
	// relay, the scheduler, the Telegram pollers, metrics, the admin console
	// and the short queries of other jobs. Without it, as many slow handlers
	// as connections would stall all of those. With the default queues and
	// a Go handler route, that is 30 connections per process.
	DatabaseURL string

	// Queues maps each queue this process works to its worker count
	// (FERRY_QUEUES, DefaultQueues: "default=1000,outbox=50"; see the
	// README's "Tuning" for the measurement behind 1,000). With "outbox",
	// the process delivers its outbox routes, each from a queue of its own
	// with RouteWorkers workers.
	Queues map[string]int

	// QueueMaxLength is the bound of every queue this process works (its
	// Queues and its outbox routes' queues) that MaxLengths does not bound
	// (FERRY_QUEUE_MAX_LENGTH); 0, the default, is unbounded. MaxLengths
	// bounds queues one by one (0 is unbounded); the config file's
	// `queues:` entries add to it. A worker records its bounds in
	// ferry_queue at start, and the last worker started wins (see package
	// jobs, "Bounded queues").
	QueueMaxLength int64
	MaxLengths     map[string]int64

	// FetchCooldown is the least time between two fetches of one queue; it
	// caps a queue at about MaxWorkers jobs per cooldown. FetchPollInterval is
	// the fallback poll when no insert notification arrives.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration

	// JobTimeout is the default time a job may run before its context is
	// cancelled (a kind may set its own).
	JobTimeout time.Duration
	// MaxOrphaned is how many times a job's worker may die running it
	// before ferry's rescuer discards the job as poison
	// (FERRY_MAX_ORPHANED, default 5).
	MaxOrphaned int
	// RescueInterval is how often the leader looks for dead workers and
	// rescues their running jobs (FERRY_RESCUE_INTERVAL, default 1s): one
	// read of ferry_worker, pg_locks and pg_stat_activity a pass.
	RescueInterval time.Duration
	// SettleAfter is how long a job the database shows running on this
	// live worker, which it does not run (a fetch or a completion that
	// River lost), is left to River before the worker settles it
	// (FERRY_SETTLE_AFTER, default 1m; see internal/liveness's Ledger).
	// Under about 40 s it can race River's completer, still retrying.
	SettleAfter time.Duration

	// ShutdownGrace is how long a stopping worker lets running jobs finish
	// before it cancels them. A cancelled job goes back to available, its
	// interrupted attempt uncounted; it is never lost.
	ShutdownGrace time.Duration

	// ElectionDatabaseURL is where the sessions that must last live: the
	// leader lock, each worker's liveness, LISTEN wake-ups, lock waits and
	// the migrations' lock (FERRY_SESSION_DATABASE_URL, or its earlier
	// name FERRY_ELECTION_DATABASE_URL); default DatabaseURL. It must reach
	// Postgres directly or through a session-mode pooler.
	ElectionDatabaseURL string
	// Pooler is what DatabaseURL goes through (FERRY_POOLER): none (the
	// default), session, or transaction (PgBouncer's transaction mode: job
	// traffic only; River polls instead of LISTENing, statements are not
	// kept prepared, and everything that needs a session uses
	// ElectionDatabaseURL, which must then be set apart).
	Pooler string
	// Schema is the Postgres schema of this deployment's tables, River's
	// and ferry's (FERRY_SCHEMA; default "", the search_path's first,
	// usually public): several deployments share a database, each in its
	// own schema, with its own leader, schedules, outbox and workers
	// (internal/base/schema). Every session ferry opens sets search_path to it;
	// through a transaction pooler, which does not pass search_path on,
	// the role's own search_path must lead to it (checked at start).
	Schema string
	// ElectionKey is the leader lock (FERRY_ELECTION_KEY); default
	// election.KeyElection.
	ElectionKey int64
	// LeaderTick is the leader's ownership check interval (FERRY_LEADER_TICK,
	// default 1.5s); LeaderTickTimeout bounds each check
	// (FERRY_LEADER_TICK_TIMEOUT, default a third of the tick, at most 5s);
	// StandbyProbe caps a standby's backoff after a failed wait for the
	// lock (FERRY_STANDBY_PROBE, default 60s). A waiting standby tries the
	// lock at once on a resignation notice and every 250 ms (or tick, when
	// shorter) otherwise, whatever the probe.
	LeaderTick        time.Duration
	LeaderTickTimeout time.Duration
	StandbyProbe      time.Duration
	// LeaderRunnables run on the leader only, cancelled within one tick of a
	// lost lock.
	LeaderRunnables []LeaderRunnable

	// AdminAddr is where the admin console (/admin/, /riverui/), /healthz,
	// /readyz and /metrics listen; "off" disables the admin server.
	// AdminToken protects all but /healthz and /readyz (which tells its
	// reason for not being ready only with the token).
	AdminAddr  string
	AdminToken string

	// Migrate applies pending migrations at start. Without it, New refuses a
	// database whose schema is behind this build.
	Migrate bool

	// ConfigFile is the YAML file of schedules (FERRY_CONFIG); "" for none.
	ConfigFile string
	// Schedules are schedules from Go code, beside the config file's.
	// Local ones (Local: true) run in every process; the rest run on the
	// leader and enqueue a job per tick.
	Schedules []periodic.Schedule

	// OutboxRoutes are outbox routes from Go code (handlers or webhooks),
	// beside the config file's.
	OutboxRoutes []outbox.Route
	// OutboxMaxAttempts bounds each delivery (FERRY_OUTBOX_MAX_ATTEMPTS);
	// 0 takes the config file's outbox.max_attempts, else 24.
	OutboxMaxAttempts int
	// OutboxRouteGrace is how long a message whose topic no live worker
	// routes waits for a route ("waiting for a route") before it is stuck
	// with "no route for topic" (FERRY_OUTBOX_ROUTE_GRACE), and how long a
	// delivery whose route no live worker declares any more waits before
	// it is stuck; default outbox.DefaultRouteGrace, 5m.
	OutboxRouteGrace time.Duration
	// OutboxRetention deletes delivered messages (and Go receivers'
	// receive records) older than it, on the leader
	// (FERRY_OUTBOX_RETENTION); default DefaultOutboxRetention, and a
	// negative value keeps everything.
	OutboxRetention time.Duration
	// TickRetention, TermRetention and TelegramMalformedRetention keep the
	// schedule's ticks, the leader terms and Telegram's malformed updates
	// that long (FERRY_TICK_RETENTION, FERRY_TERM_RETENTION,
	// FERRY_TELEGRAM_MALFORMED_RETENTION; internal/retention): default
	// retention.DefaultKeep, 30 days; negative keeps everything. The newest
	// tick of each schedule and the newest term stay whatever their age.
	TickRetention              time.Duration
	TermRetention              time.Duration
	TelegramMalformedRetention time.Duration
	// CompletedJobRetention, CancelledJobRetention and
	// DiscardedJobRetention are River's job retention
	// (FERRY_COMPLETED_JOB_RETENTION, FERRY_CANCELLED_JOB_RETENTION,
	// FERRY_DISCARDED_JOB_RETENTION): zero is River's default (24h, 24h,
	// 168h), negative keeps those jobs forever.
	CompletedJobRetention time.Duration
	CancelledJobRetention time.Duration
	DiscardedJobRetention time.Duration

	// TelegramAPIURL is the Bot API server (FERRY_TELEGRAM_API_URL); default
	// the public one.
	TelegramAPIURL string
	// TelegramRouters are Go command routers by bot name: each becomes an
	// outbox route (named telegram-<bot>-commands) on the bot's topic, and
	// answers through the bot's client.
	TelegramRouters map[string]*telegram.Router

	// BroadcastKeys sign and verify this process's broadcast messages
	// (FERRY_BROADCAST_KEYS; parse with broadcast.ParseKeys): see
	// Server.Broadcast and package broadcast.
	BroadcastKeys broadcast.Keys

	// SealKeys seal every job this process inserts and verify every job it
	// works (FERRY_SEAL_KEYS; parse with seal.ParseKeys). With keys, a job
	// runs only if ferry sealed it; without, any row written to river_job
	// runs, and the server warns so at start. See package seal.
	SealKeys *seal.Keys
	// SealEncrypt makes this process's seals encrypt the args too
	// (FERRY_SEAL_ENCRYPT): AES-256-GCM, so River UI and `enqueue jobs get`
	// show an envelope, not the args. Workers decrypt whatever was sealed
	// encrypted with one of their keys, whatever this says. Needs SealKeys.
	SealEncrypt bool
	// SealReplayWindow: a sealed job due longer ago than this that never
	// started is refused as stale (FERRY_SEAL_REPLAY_WINDOW); default
	// seal.DefaultReplayWindow, 168h.
	SealReplayWindow time.Duration

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

// LeaderRunnable is named work that runs only while this process leads.
type LeaderRunnable struct {
	Name string
	Run  election.Runnable
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.Queues == nil {
		c.Queues, _ = ParseQueues(DefaultQueues)
	}
	c.FetchCooldown = cmp.Or(c.FetchCooldown, DefaultFetchCooldown)
	c.FetchPollInterval = cmp.Or(c.FetchPollInterval, DefaultFetchPollInterval)
	c.JobTimeout = cmp.Or(c.JobTimeout, DefaultJobTimeout)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, DefaultShutdownGrace)
	c.AdminAddr = cmp.Or(c.AdminAddr, DefaultAdminAddr)
	c.ElectionDatabaseURL = cmp.Or(c.ElectionDatabaseURL, c.DatabaseURL)
	c.Pooler = cmp.Or(c.Pooler, dburl.PoolerNone)
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if s, err := schema.Parse(c.Schema); err == nil {
		c.Schema = s
	}
	c.ElectionKey = cmp.Or(c.ElectionKey, schema.Key64(election.KeyElection, c.Schema))
	c.LeaderTick = cmp.Or(c.LeaderTick, election.DefaultTick)
	c.StandbyProbe = cmp.Or(c.StandbyProbe, election.DefaultProbe)
	c.MaxOrphaned = cmp.Or(c.MaxOrphaned, liveness.DefaultMaxOrphaned)
	c.RescueInterval = cmp.Or(c.RescueInterval, liveness.DefaultRescueInterval)
	c.SettleAfter = cmp.Or(c.SettleAfter, liveness.DefaultSettleAfter)
	c.OutboxRouteGrace = cmp.Or(c.OutboxRouteGrace, outbox.DefaultRouteGrace)
	c.OutboxRetention = cmp.Or(c.OutboxRetention, DefaultOutboxRetention)
	c.TickRetention = cmp.Or(c.TickRetention, retention.DefaultKeep)
	c.TermRetention = cmp.Or(c.TermRetention, retention.DefaultKeep)
	c.TelegramMalformedRetention = cmp.Or(c.TelegramMalformedRetention, retention.DefaultKeep)
	c.SealReplayWindow = cmp.Or(c.SealReplayWindow, seal.DefaultReplayWindow)
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
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("database URL is empty: set DATABASE_URL or --database-url"))
	}
	if len(c.Queues) == 0 {
		errs = append(errs, errors.New("queues: at least one queue is needed"))
	}
	for _, q := range slices.Sorted(maps.Keys(c.Queues)) {
		if err := validateQueue(q, c.Queues[q]); err != nil {
			errs = append(errs, err)
		}
	}
	if c.QueueMaxLength < 0 {
		errs = append(errs, fmt.Errorf("queue max length %d is negative (0 is unbounded)", c.QueueMaxLength))
	}
	for _, q := range slices.Sorted(maps.Keys(c.MaxLengths)) {
		if err := jobs.ValidateQueueName(q); err != nil {
			errs = append(errs, err)
		} else if c.MaxLengths[q] < 0 {
			errs = append(errs, fmt.Errorf("queue %q: max length %d is negative (0 is unbounded)", q, c.MaxLengths[q]))
		}
	}
	if c.FetchCooldown < river.FetchCooldownMin {
		errs = append(errs, fmt.Errorf("fetch cooldown %s is below River's minimum %s", c.FetchCooldown, river.FetchCooldownMin))
	}
	if c.FetchPollInterval < c.FetchCooldown {
		errs = append(errs, fmt.Errorf("fetch poll interval %s is below the fetch cooldown %s", c.FetchPollInterval, c.FetchCooldown))
	}
	if c.JobTimeout < 0 && c.JobTimeout != -1 {
		errs = append(errs, fmt.Errorf("job timeout %s is negative", c.JobTimeout))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("shutdown grace %s is negative", c.ShutdownGrace))
	}
	if c.AdminAddr != "off" {
		if err := admin.ValidateAddr(c.AdminAddr, c.AdminToken); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); c.DatabaseURL != "" && err != nil {
		errs = append(errs, fmt.Errorf("database URL: %s", redact.Postgres(err.Error())))
	}
	if c.ElectionDatabaseURL != c.DatabaseURL {
		if _, err := pgxpool.ParseConfig(c.ElectionDatabaseURL); err != nil {
			errs = append(errs, fmt.Errorf("session database URL: %s", redact.Postgres(err.Error())))
		}
	}
	if _, err := schema.Parse(c.Schema); err != nil {
		errs = append(errs, err)
	}
	if pooler, err := dburl.ParsePooler(c.Pooler); err != nil {
		errs = append(errs, err)
	} else if pooler == dburl.PoolerTransaction && c.ElectionDatabaseURL == c.DatabaseURL {
		errs = append(errs, fmt.Errorf("%s=transaction needs FERRY_SESSION_DATABASE_URL, Postgres itself or a session-mode pool: the leader lock, liveness, LISTEN and the migrations' lock cannot go through a transaction pooler", dburl.EnvPooler))
	}
	if c.OutboxMaxAttempts < 0 || c.OutboxMaxAttempts > 1000 {
		errs = append(errs, fmt.Errorf("outbox max attempts %d is not between 1 and 1000", c.OutboxMaxAttempts))
	}
	if c.OutboxRouteGrace < 0 {
		errs = append(errs, fmt.Errorf("outbox route grace %s is negative", c.OutboxRouteGrace))
	}
	for _, r := range []struct {
		what string
		d    time.Duration
	}{{"outbox", c.OutboxRetention}, {"tick", c.TickRetention}, {"term", c.TermRetention}, {"telegram malformed", c.TelegramMalformedRetention}} {
		if r.d > 0 && r.d < retention.MinKeep {
			errs = append(errs, fmt.Errorf("%s retention %s is under 1h (0 keeps everything)", r.what, r.d))
		}
	}
	if c.TelegramAPIURL != "" {
		if u, err := url.Parse(c.TelegramAPIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("telegram API URL %q: not an absolute http(s) URL", redact.URL(c.TelegramAPIURL)))
		}
	}
	if c.LeaderTick < election.MinTick {
		errs = append(errs, fmt.Errorf("leader tick %s is under %s", c.LeaderTick, election.MinTick))
	}
	if c.LeaderTickTimeout < 0 {
		errs = append(errs, fmt.Errorf("leader tick timeout %s must be above zero", c.LeaderTickTimeout))
	}
	if c.SealEncrypt && c.SealKeys.Len() == 0 {
		errs = append(errs, errors.New("seal encrypt needs seal keys: set FERRY_SEAL_KEYS"))
	}
	if c.SealReplayWindow < time.Minute {
		errs = append(errs, fmt.Errorf("seal replay window %s is under 1m", c.SealReplayWindow))
	}
	if c.MaxOrphaned < 1 {
		errs = append(errs, fmt.Errorf("max orphaned %d is under 1", c.MaxOrphaned))
	}
	if c.RescueInterval < election.MinTick {
		errs = append(errs, fmt.Errorf("rescue interval %s is under %s", c.RescueInterval, election.MinTick))
	}
	if c.SettleAfter < time.Second {
		errs = append(errs, fmt.Errorf("settle after %s is under 1s", c.SettleAfter))
	}
	if c.StandbyProbe < election.MinTick {
		errs = append(errs, fmt.Errorf("standby probe %s is under %s", c.StandbyProbe, election.MinTick))
	}
	return errors.Join(errs...)
}

func validateQueue(name string, workers int) error {
	if err := jobs.ValidateQueueName(name); err != nil {
		return err
	}
	if workers < 1 || workers > MaxWorkersPerQueue {
		return fmt.Errorf("queue %q: workers %d is not between 1 and %d", name, workers, MaxWorkersPerQueue)
	}
	return nil
}

// ParseQueues reads "name=workers,name=workers" (FERRY_QUEUES).
func ParseQueues(s string) (map[string]int, error) {
	out := map[string]int{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, count, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return nil, fmt.Errorf("queues: %q is not name=workers", part)
		}
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if err != nil {
			return nil, fmt.Errorf("queues: %q: workers must be a whole number", part)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("queues: %q is listed twice", name)
		}
		if err := validateQueue(name, n); err != nil {
			return nil, fmt.Errorf("queues: %w", err)
		}
		out[name] = n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("queues: %q names no queue; want e.g. %q", s, DefaultQueues)
	}
	return out, nil
}
