package ferrycli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/base/schema"
	"github.com/ferryq/ferry/internal/settings"
	"github.com/ferryq/ferry/internal/tracing"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/migrations"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

// WorkerOptions are what a worker binary of one's own adds to the
// configuration its flags and environment give: its job kinds, schedules,
// outbox routes, Telegram command routers and leader runnables. Each goes
// into its place in ferry.Config (Kinds, Schedules, Outbox.Routes,
// Telegram.Routers, Leader.Runnables), beside ferry's built-in kinds and
// the config file's entries (FERRY_CONFIG).
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
	cfg.Outbox.Routes = append(cfg.Outbox.Routes, o.OutboxRoutes...)
	cfg.Leader.Runnables = append(cfg.Leader.Runnables, o.LeaderRunnables...)
	if len(o.TelegramRouters) > 0 {
		if cfg.Telegram.Routers == nil {
			cfg.Telegram.Routers = make(map[string]*telegram.Router, len(o.TelegramRouters))
		}
		maps.Copy(cfg.Telegram.Routers, o.TelegramRouters)
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

// workerSettings are the settings of ferry.Config, as its fields' tags
// declare them (internal/settings), with their defaults.
var workerSettings = sync.OnceValue(func() []settings.Setting { return settings.Of(ferry.Config{}.WithDefaults()) })

// WorkerFlags returns the flags of `worker run`, each with its environment
// variable (DATABASE_URL, FERRY_*), for a command of one's own that builds
// its ferry.Config with WorkerConfig. They are the settings that
// ferry.Config's fields declare, in the Config's order, then the log
// flags.
func WorkerFlags() []cli.Flag {
	var flags []cli.Flag
	for _, s := range workerSettings() {
		if len(s.Flag) > 0 {
			flags = append(flags, settingFlag(s))
		}
	}
	return append(flags, logFlags()...)
}

// settingFlag is the flag of setting s: typed by its field, with its
// default as the flag's value when it is one, as words otherwise.
func settingFlag(s settings.Setting) cli.Flag {
	name, aliases, env := s.Flag[0], s.Flag[1:], s.Env
	words := s.Default
	switch s.Type.Kind() {
	case reflect.Bool:
		return &cli.BoolFlag{Name: name, Aliases: aliases, Usage: s.Usage, EnvVars: env}
	case reflect.Int, reflect.Int64:
		if s.Type == reflect.TypeFor[time.Duration]() {
			v := new(durationValue)
			if d, err := time.ParseDuration(words); err == nil {
				*v, words = durationValue(d), ""
			}
			return &cli.GenericFlag{Name: name, Aliases: aliases, Usage: s.Usage, EnvVars: env, Value: v, DefaultText: words}
		}
		n, err := strconv.ParseInt(words, 10, 64)
		if err == nil {
			words = ""
		}
		if s.Type.Kind() == reflect.Int {
			return &cli.IntFlag{Name: name, Aliases: aliases, Usage: s.Usage, EnvVars: env, Value: int(n), DefaultText: words}
		}
		return &cli.Int64Flag{Name: name, Aliases: aliases, Usage: s.Usage, EnvVars: env, Value: n, DefaultText: words}
	}
	f := &cli.StringFlag{Name: name, Aliases: aliases, Usage: s.Usage, EnvVars: env}
	if s.Described {
		f.DefaultText = words
	} else {
		f.Value = words
	}
	return f
}

// durationValue is a duration flag's value, whose error says what a
// duration is (River's and urfave's say "parse error").
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("not a duration such as 90s, 1m30s or 1h (of at most %dh)", math.MaxInt64/int64(time.Hour))
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

// Get is the flag's value, a time.Duration (flag.Getter).
func (d *durationValue) Get() any { return time.Duration(*d) }

// WorkerConfig returns the ferry.Config that the flags of WorkerFlags give,
// as c parsed them (from the command line or the environment), with its
// Logger built from --log-format and --log-level. A setting given neither
// way stays unset, for ferry.New to default. Bad input (no database URL,
// a bad queue list, key or log setting) is a *UsageError. The Config has
// no kinds, schedules, routes or runnables of its own: add yours, then
// call ferry.New.
func WorkerConfig(c *cli.Context) (ferry.Config, error) {
	logger, err := loggerFrom(c)
	if err != nil {
		return ferry.Config{}, err
	}
	if _, err := databaseURL(c); err != nil {
		return ferry.Config{}, err
	}
	cfg := ferry.Config{Logger: logger}
	for _, s := range workerSettings() {
		if len(s.Flag) == 0 || !c.IsSet(s.Flag[0]) {
			continue
		}
		if err := s.SetValue(&cfg, c.Value(s.Flag[0])); err != nil {
			return ferry.Config{}, &UsageError{Err: err}
		}
	}
	return cfg, nil
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
