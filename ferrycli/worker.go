package ferrycli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/base/schema"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/internal/retention"
	"github.com/ferryq/ferry/internal/tracing"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/migrations"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/seal"
	"github.com/ferryq/ferry/telegram"
)

// WorkerOptions are what a worker binary of one's own adds to the
// configuration its flags and environment give: its job kinds, schedules,
// outbox routes, Telegram command routers and leader runnables. Each goes
// into the ferry.Config field of the same name, beside ferry's built-in
// kinds and the config file's entries (FERRY_CONFIG).
type WorkerOptions struct {
	Kinds           []jobs.Kind
	Schedules       []periodic.Schedule
	OutboxRoutes    []outbox.Route
	TelegramRouters map[string]*telegram.Router
	LeaderRunnables []ferry.LeaderRunnable
}

// addTo adds o's parts to cfg.
func (o WorkerOptions) addTo(cfg *ferry.Config) {
	cfg.Kinds = append(cfg.Kinds, o.Kinds...)
	cfg.Schedules = append(cfg.Schedules, o.Schedules...)
	cfg.OutboxRoutes = append(cfg.OutboxRoutes, o.OutboxRoutes...)
	cfg.LeaderRunnables = append(cfg.LeaderRunnables, o.LeaderRunnables...)
	if len(o.TelegramRouters) > 0 {
		if cfg.TelegramRouters == nil {
			cfg.TelegramRouters = make(map[string]*telegram.Router, len(o.TelegramRouters))
		}
		maps.Copy(cfg.TelegramRouters, o.TelegramRouters)
	}
}

// WorkerMain is the whole main of a worker binary: WorkerApp(opts), named
// after the binary, run with os.Args until SIGINT or SIGTERM stops it
// gracefully, then os.Exit with Run's exit code. A service that embeds
// ferry's worker gets, through this one call, the same commands, FERRY_*
// flags and environment variables, config file and exit codes as ferry's
// own worker, with its kinds, schedules, routes and leader runnables added
// (see examples/embedded).
func WorkerMain(opts WorkerOptions) {
	app := WorkerApp(opts)
	app.Name = filepath.Base(os.Args[0])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, app, os.Args)
	stop()
	os.Exit(code)
}

// WorkerApp returns the `worker` app: run, migrate, version. `run` works
// ferry's built-in kinds and those of opts (the zero WorkerOptions for
// ferry's own binary). Set the app's Name to the binary's.
func WorkerApp(opts WorkerOptions) *cli.App {
	app := newApp("worker", "run ferry's job workers, and migrate its schema")
	app.Description = `A worker works River jobs from every queue it is given, on as many replicas as
you like: start the same command on each host, all pointing at one Postgres.

Examples:
   worker migrate up
   DATABASE_URL=postgres://ferry:ferry@127.0.0.1:5432/ferry worker run
   worker run --queues default=1000,outbox=50 --shutdown-grace 60s`
	app.Commands = []*cli.Command{workerRun(opts), workerMigrate(), versionCommand()}
	return app
}

// WorkerFlags returns the flags of `worker run`, each with its environment
// variable (DATABASE_URL, FERRY_*), for a command of one's own that builds
// its ferry.Config with WorkerConfig.
func WorkerFlags() []cli.Flag {
	return append([]cli.Flag{
		databaseURLFlag(),
		&cli.StringFlag{Name: "config", Usage: "YAML file of schedules, outbox routes and Telegram bots (see README)", EnvVars: []string{"FERRY_CONFIG"}},
		&cli.StringFlag{Name: "queues", Value: ferry.DefaultQueues, Usage: "queues to work and their worker counts, name=workers,…", EnvVars: []string{"FERRY_QUEUES"}},
		&cli.Int64Flag{Name: "queue-max-length", Usage: "the bound of every queue this process works that the config file's queues: does not bound; 0 is unbounded", EnvVars: []string{"FERRY_QUEUE_MAX_LENGTH"}},
		&cli.DurationFlag{Name: "fetch-cooldown", Value: ferry.DefaultFetchCooldown, Usage: "least time between two fetches of one queue", EnvVars: []string{"FERRY_FETCH_COOLDOWN"}},
		&cli.DurationFlag{Name: "fetch-poll-interval", Value: ferry.DefaultFetchPollInterval, Usage: "fallback poll of each queue when no insert notification arrives", EnvVars: []string{"FERRY_FETCH_POLL_INTERVAL"}},
		&cli.DurationFlag{Name: "job-timeout", Value: ferry.DefaultJobTimeout, Usage: "default time a job may run before its context is cancelled", EnvVars: []string{"FERRY_JOB_TIMEOUT"}},
		&cli.IntFlag{Name: "max-orphaned", Value: liveness.DefaultMaxOrphaned, Usage: "times a job's worker may die running it before the job is discarded as poison", EnvVars: []string{"FERRY_MAX_ORPHANED"}},
		&cli.DurationFlag{Name: "rescue-interval", Value: liveness.DefaultRescueInterval, Usage: "how often the leader looks for dead workers and rescues their running jobs", EnvVars: []string{"FERRY_RESCUE_INTERVAL"}},
		&cli.DurationFlag{Name: "settle-after", Value: liveness.DefaultSettleAfter, Usage: "time a job shown running on this live worker, which it does not run (a fetch or completion River lost), is left to River before the worker settles it", EnvVars: []string{"FERRY_SETTLE_AFTER"}},
		&cli.DurationFlag{Name: "shutdown-grace", Value: ferry.DefaultShutdownGrace, Usage: "time running jobs get to finish on stop before they are cancelled (and retried)", EnvVars: []string{"FERRY_SHUTDOWN_GRACE"}},
		&cli.StringFlag{Name: "admin-addr", Value: ferry.DefaultAdminAddr, Usage: "address of the admin console (/admin/, /riverui/), /healthz, /readyz and /metrics, or off", EnvVars: []string{"FERRY_ADMIN_ADDR"}},
		&cli.StringFlag{Name: "admin-token", Usage: "token required on the admin surface (all but /healthz, and /readyz without its reason)", EnvVars: []string{"FERRY_ADMIN_TOKEN"}},
		&cli.BoolFlag{Name: "migrate", Usage: "apply pending migrations before starting", EnvVars: []string{"FERRY_MIGRATE"}},
		&cli.IntFlag{Name: "outbox-max-attempts", Usage: "attempts of each outbox delivery before it is stuck", DefaultText: "the config file's, else 24", EnvVars: []string{"FERRY_OUTBOX_MAX_ATTEMPTS"}},
		&cli.DurationFlag{Name: "outbox-route-grace", Value: outbox.DefaultRouteGrace, Usage: "how long a message whose topic no live worker routes, or a delivery whose route none declares, waits for one before it is stuck", EnvVars: []string{"FERRY_OUTBOX_ROUTE_GRACE"}},
		&cli.DurationFlag{Name: "outbox-retention", Value: ferry.DefaultOutboxRetention, Usage: "delete delivered outbox messages, and Go receivers' receive records, older than this (0 keeps everything)", EnvVars: []string{"FERRY_OUTBOX_RETENTION"}},
		&cli.DurationFlag{Name: "tick-retention", Value: retention.DefaultKeep, Usage: "delete the schedule's ticks older than this, the newest of each schedule excepted (0 keeps everything)", EnvVars: []string{"FERRY_TICK_RETENTION"}},
		&cli.DurationFlag{Name: "term-retention", Value: retention.DefaultKeep, Usage: "delete leader terms older than this, the newest excepted (0 keeps everything)", EnvVars: []string{"FERRY_TERM_RETENTION"}},
		&cli.DurationFlag{Name: "telegram-malformed-retention", Value: retention.DefaultKeep, Usage: "delete Telegram's malformed updates older than this (0 keeps everything)", EnvVars: []string{"FERRY_TELEGRAM_MALFORMED_RETENTION"}},
		&cli.DurationFlag{Name: "completed-job-retention", Value: 24 * time.Hour, Usage: "River deletes completed jobs older than this (0 keeps them)", EnvVars: []string{"FERRY_COMPLETED_JOB_RETENTION"}},
		&cli.DurationFlag{Name: "cancelled-job-retention", Value: 24 * time.Hour, Usage: "River deletes cancelled jobs older than this (0 keeps them)", EnvVars: []string{"FERRY_CANCELLED_JOB_RETENTION"}},
		&cli.DurationFlag{Name: "discarded-job-retention", Value: 7 * 24 * time.Hour, Usage: "River deletes discarded jobs (dead letters) older than this (0 keeps them)", EnvVars: []string{"FERRY_DISCARDED_JOB_RETENTION"}},
		&cli.StringFlag{Name: "broadcast-keys", Usage: "keys that sign (the first) and verify (all) broadcast messages: comma-separated base64, each at least 32 bytes (set it in the environment, not on the command line)", EnvVars: []string{broadcast.EnvKeys}},
		&cli.StringFlag{Name: "seal-keys", Usage: "keys that seal and verify jobs: comma-separated base64, each at least 32 bytes; the first seals, all verify (set it in the environment, not on the command line)", EnvVars: []string{seal.EnvKeys}},
		&cli.BoolFlag{Name: "seal-encrypt", Usage: "seals also encrypt the args (AES-256-GCM): River UI then shows an envelope, not the args", EnvVars: []string{seal.EnvEncrypt}},
		&cli.DurationFlag{Name: "seal-replay-window", Value: seal.DefaultReplayWindow, Usage: "a sealed job due longer ago than this that never started is refused as stale", EnvVars: []string{"FERRY_SEAL_REPLAY_WINDOW"}},
		&cli.StringFlag{Name: "telegram-api-url", Usage: "Telegram Bot API server (default the public one); tests and air-gapped setups point elsewhere", EnvVars: []string{"FERRY_TELEGRAM_API_URL"}},
		&cli.StringFlag{Name: "session-database-url", Aliases: []string{"election-database-url"}, Usage: "Postgres for the sessions that must last (leader lock, liveness, LISTEN, lock waits), direct or session-mode (default: --database-url)", EnvVars: []string{"FERRY_SESSION_DATABASE_URL", "FERRY_ELECTION_DATABASE_URL"}},
		&cli.StringFlag{Name: "schema", Usage: "Postgres schema of this deployment's tables, River's and ferry's, for several deployments in one database (default: the search_path's first, usually public)", EnvVars: []string{"FERRY_SCHEMA"}},
		&cli.StringFlag{Name: "pooler", Value: dburl.PoolerNone, Usage: "what --database-url goes through: none, session, or transaction (PgBouncer's transaction mode; needs --session-database-url)", EnvVars: []string{dburl.EnvPooler}},
		electionKeyFlag(),
		&cli.DurationFlag{Name: "leader-tick", Value: election.DefaultTick, Usage: "how often the leader proves it still holds the lock", EnvVars: []string{"FERRY_LEADER_TICK"}},
		&cli.DurationFlag{Name: "leader-tick-timeout", Usage: "bound of each ownership check", DefaultText: "a third of the tick, at most 5s", EnvVars: []string{"FERRY_LEADER_TICK_TIMEOUT"}},
		&cli.DurationFlag{Name: "standby-probe", Value: election.DefaultProbe, Usage: "most a standby backs off after a failed wait for the lock (a freed lock is taken within 250 ms)", EnvVars: []string{"FERRY_STANDBY_PROBE"}},
	}, logFlags()...)
}

// WorkerConfig returns the ferry.Config that the flags of WorkerFlags give,
// as c parsed them (from the command line or the environment), with its
// Logger built from --log-format and --log-level. Bad input (no database
// URL, a bad queue list or log setting) is a *UsageError. The Config has
// no kinds, schedules, routes or runnables of its own: add yours, then
// call ferry.New.
func WorkerConfig(c *cli.Context) (ferry.Config, error) {
	logger, err := loggerFrom(c)
	if err != nil {
		return ferry.Config{}, err
	}
	url, err := databaseURL(c)
	if err != nil {
		return ferry.Config{}, err
	}
	queues, err := ferry.ParseQueues(c.String("queues"))
	if err != nil {
		return ferry.Config{}, &UsageError{Err: err}
	}
	broadcastKeys, err := broadcast.ParseKeys(c.String("broadcast-keys"))
	if err != nil {
		return ferry.Config{}, &UsageError{Err: err}
	}
	sealKeys, err := seal.ParseKeys(c.String("seal-keys"))
	if err != nil {
		return ferry.Config{}, &UsageError{Err: err}
	}
	return ferry.Config{
		DatabaseURL:                url,
		Queues:                     queues,
		QueueMaxLength:             c.Int64("queue-max-length"),
		FetchCooldown:              c.Duration("fetch-cooldown"),
		FetchPollInterval:          c.Duration("fetch-poll-interval"),
		JobTimeout:                 c.Duration("job-timeout"),
		MaxOrphaned:                c.Int("max-orphaned"),
		SettleAfter:                c.Duration("settle-after"),
		RescueInterval:             c.Duration("rescue-interval"),
		ShutdownGrace:              c.Duration("shutdown-grace"),
		AdminAddr:                  c.String("admin-addr"),
		AdminToken:                 c.String("admin-token"),
		Migrate:                    c.Bool("migrate"),
		ConfigFile:                 c.String("config"),
		OutboxMaxAttempts:          c.Int("outbox-max-attempts"),
		OutboxRouteGrace:           c.Duration("outbox-route-grace"),
		OutboxRetention:            keepFlag(c, "outbox-retention"),
		TickRetention:              keepFlag(c, "tick-retention"),
		TermRetention:              keepFlag(c, "term-retention"),
		TelegramMalformedRetention: keepFlag(c, "telegram-malformed-retention"),
		CompletedJobRetention:      keepFlag(c, "completed-job-retention"),
		CancelledJobRetention:      keepFlag(c, "cancelled-job-retention"),
		DiscardedJobRetention:      keepFlag(c, "discarded-job-retention"),
		BroadcastKeys:              broadcastKeys,
		SealKeys:                   sealKeys,
		SealEncrypt:                c.Bool("seal-encrypt"),
		SealReplayWindow:           c.Duration("seal-replay-window"),
		TelegramAPIURL:             c.String("telegram-api-url"),
		ElectionDatabaseURL:        c.String("session-database-url"),
		Pooler:                     c.String("pooler"),
		ElectionKey:                electionKeyIfSet(c),
		Schema:                     c.String("schema"),
		LeaderTick:                 c.Duration("leader-tick"),
		LeaderTickTimeout:          c.Duration("leader-tick-timeout"),
		StandbyProbe:               c.Duration("standby-probe"),
		Logger:                     logger,
	}, nil
}

// tracingFlushTimeout bounds the export of the last spans on stop.
const tracingFlushTimeout = 5 * time.Second

func workerRun(opts WorkerOptions) *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "work jobs until SIGINT or SIGTERM, then stop gracefully",
		Description: `On SIGINT or SIGTERM the worker stops fetching, lets running jobs finish within
--shutdown-grace, then cancels the rest: River puts an interrupted job back to
available without counting the attempt. It is never lost.

The worker refuses to start on a schema behind its build unless --migrate is
given.`,
		Flags: WorkerFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("run takes no arguments, got %q", c.Args().First())
			}
			cfg, err := WorkerConfig(c)
			if err != nil {
				return err
			}
			opts.addTo(&cfg)
			ctx := signalContext(c)
			// Traces, when the OTEL_* variables ask for them; flushed on
			// the way out.
			tp, shutdownTracing, err := tracing.Setup(ctx, cmp.Or(cfg.Version, ferry.Version()), c.App.Writer, cfg.Logger)
			if err != nil {
				return &UsageError{Err: err}
			}
			defer func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
				defer cancel()
				if err := shutdownTracing(sctx); err != nil {
					cfg.Logger.Warn("tracing: flush on stop", "error", err)
				}
			}()
			if tp != nil {
				cfg.TracerProvider = tp
			}
			srv, err := ferry.New(ctx, cfg)
			if errors.Is(err, ferry.ErrConfig) {
				return &UsageError{Err: err}
			}
			if err != nil {
				return err
			}
			return srv.Run(ctx)
		},
	}
}

func workerMigrate() *cli.Command {
	flags := []cli.Flag{databaseURLFlag(), jsonFlag()}
	return &cli.Command{
		Name:  "migrate",
		Usage: "apply, revert or list River's and ferry's migrations",
		Description: `Runs hold the session advisory lock 8110731, so concurrent runs take turns.

Examples:
   worker migrate up
   worker migrate status --json
   worker migrate down --steps 1`,
		Subcommands: []*cli.Command{
			{
				Name:  "up",
				Usage: "apply every pending migration (River's, then ferry's)",
				Flags: flags,
				Action: func(c *cli.Context) error {
					return withMigrator(c, func(ctx context.Context, m *migrations.Migrator) error {
						applied, err := m.Up(ctx)
						if err != nil {
							return err
						}
						return printApplied(c, "applied", applied)
					})
				},
			},
			{
				Name:  "down",
				Usage: "revert the newest migrations (ferry's first, then River's)",
				Flags: append([]cli.Flag{
					&cli.IntFlag{Name: "steps", Value: 1, Usage: "how many migrations to revert"},
					&cli.BoolFlag{Name: "all", Usage: "revert every migration: drops ferry's and River's tables and their data"},
				}, flags...),
				Action: func(c *cli.Context) error {
					steps := c.Int("steps")
					if c.Bool("all") {
						steps = -1
					} else if steps < 1 {
						return usageErrorf("--steps must be at least 1, got %d", steps)
					}
					return withMigrator(c, func(ctx context.Context, m *migrations.Migrator) error {
						reverted, err := m.Down(ctx, steps)
						if err != nil {
							return err
						}
						return printApplied(c, "reverted", reverted)
					})
				},
			},
			{
				Name:  "status",
				Usage: "list every migration of this build and whether it is applied",
				Flags: flags,
				Action: func(c *cli.Context) error {
					return withMigrator(c, func(ctx context.Context, m *migrations.Migrator) error {
						status, err := m.Status(ctx)
						if err != nil {
							return err
						}
						out := outputFrom(c)
						if out.json {
							return out.JSON(status)
						}
						rows := make([][]string, 0, len(status))
						for _, s := range status {
							at := "pending"
							if s.AppliedAt != nil {
								at = s.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
							} else if s.Applied {
								at = "applied"
							}
							rows = append(rows, []string{s.Line, fmt.Sprintf("%03d", s.Version), s.Name, at})
						}
						return out.Table([]string{"LINE", "VERSION", "NAME", "APPLIED"}, rows)
					})
				},
			},
		},
	}
}

func withMigrator(c *cli.Context, fn func(context.Context, *migrations.Migrator) error) error {
	if c.NArg() > 0 {
		return usageErrorf("%s takes no arguments, got %q", c.Command.Name, c.Args().First())
	}
	// Its lock (8110731) is a session's.
	if err := needSession("worker migrate"); err != nil {
		return err
	}
	return withDatabase(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		// The command prints what it applied; no log lines besides.
		s, err := schema.FromEnv()
		if err != nil {
			return &UsageError{Err: err}
		}
		m, err := migrations.New(pool, nil, migrations.InSchema(s))
		if err != nil {
			return err
		}
		return fn(ctx, m)
	})
}

func printApplied(c *cli.Context, verb string, applied []migrations.Applied) error {
	out := outputFrom(c)
	if out.json {
		if applied == nil {
			applied = []migrations.Applied{}
		}
		return out.JSON(applied)
	}
	if len(applied) == 0 {
		_, err := fmt.Fprintln(out.w, "nothing to do")
		return err
	}
	for _, a := range applied {
		fmt.Fprintf(out.w, "%s %s/%03d %s (%s)\n", verb, a.Line, a.Version, a.Name, a.Duration.Round(1e5))
	}
	return nil
}

// withPool connects to the command's database and runs fn under the
// command's context. An error of a table, column or type that does not
// exist is a schema not migrated to this build: it says to run `worker
// migrate up`.
func withPool(c *cli.Context, fn func(context.Context, *pgxpool.Pool) error) error {
	err := withDatabase(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		// connect has checked FERRY_SCHEMA; its sessions must find it.
		s, _ := schema.FromEnv()
		if err := migrations.CheckSchema(ctx, pool, s); err != nil {
			return err
		}
		return fn(ctx, pool)
	})
	if pgErr := schemaError(err); pgErr != nil {
		return &notMigratedError{err: pgErr}
	}
	return err
}

// schemaError returns the error in err's chain of a query on a table,
// column or type that does not exist, or nil.
func schemaError(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "42703", "42704", "42883": // undefined table, column, object (a type), function
			return pgErr
		}
	}
	return nil
}

// keepFlag is a retention flag as ferry.Config takes it: 0 on the command
// line keeps everything, which the Config says with a negative value (its
// zero is the default).
func keepFlag(c *cli.Context, name string) time.Duration {
	if d := c.Duration(name); d != 0 {
		return d
	}
	return -1
}

// electionKeyIfSet is --election-key when set, else 0: the Config's
// default, which follows --schema.
func electionKeyIfSet(c *cli.Context) int64 {
	if c.IsSet("election-key") {
		return c.Int64("election-key")
	}
	return 0
}

// withDatabase is withPool without the advice (for migrate itself).
func withDatabase(c *cli.Context, fn func(context.Context, *pgxpool.Pool) error) error {
	url, err := databaseURL(c)
	if err != nil {
		return err
	}
	ctx := signalContext(c)
	pool, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(ctx, pool)
}

// notMigratedError is a query's error on a database whose schema is
// missing or behind this build.
type notMigratedError struct{ err *pgconn.PgError }

func (e *notMigratedError) Error() string {
	return fmt.Sprintf("the database is not migrated to this build (%s): run `worker migrate up` first", e.err.Message)
}

func (e *notMigratedError) Unwrap() error { return e.err }

func connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageErrorf("database URL: %s", redact.Postgres(err.Error()))
	}
	pooler, err := dburl.ParsePooler(os.Getenv(dburl.EnvPooler))
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	dburl.ApplyPooler(cfg.ConnConfig, pooler)
	// FERRY_SCHEMA: the sessions find that deployment's tables first.
	s, err := schema.FromEnv()
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	if s != "" && pooler != dburl.PoolerTransaction {
		cfg.ConnConfig.RuntimeParams["search_path"] = s
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "ferry-cli"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %s", redact.Postgres(err.Error()))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database %s: %s", net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))),
			redact.PostgresConnect(err))
	}
	return pool, nil
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the build's version",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("version takes no arguments, got %q", c.Args().First())
			}
			out := outputFrom(c)
			if out.json {
				return out.JSON(map[string]string{"version": ferry.Version()})
			}
			_, err := fmt.Fprintln(out.w, ferry.Version())
			return err
		},
	}
}
