package ferrycli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/base/schema"
	"github.com/ferryq/ferry/internal/logging"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/seal"
)

// Exit codes of Run.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
	// ExitQueueFull is an insert refused because its queue is at its bound
	// (jobs.ErrQueueFull); nothing was inserted.
	ExitQueueFull = 3
)

// UsageError is bad input: a flag, an argument, a file. It exits 2
// (ExitUsage). Run makes every error of urfave/cli's flag parsing one,
// through the OnUsageError hook of the app and of each command.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ExitCode is ExitUsage (cli.ExitCoder).
func (e *UsageError) ExitCode() int { return ExitUsage }

// onUsageError is the OnUsageError hook of the app and of every command:
// urfave/cli calls it with the error of parsing the flags (of the command
// line, and of the environment variables they read).
func onUsageError(_ *cli.Context, err error, _ bool) error { return &UsageError{Err: err} }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Run runs app with args (os.Args: the program name first) under ctx,
// which main cancels on SIGINT/SIGTERM, and returns the process exit code:
// ExitOK, ExitUsage for bad input (a *UsageError, a flag's error, any
// cli.ExitCoder, a bad FERRY_SEAL_KEYS or FERRY_SEAL_ENCRYPT),
// ExitQueueFull for an insert or a retry into a full queue
// (jobs.ErrQueueFull, or the database's SQLSTATE FR002),
// ExitFailure for anything else. A failure is printed as one line on the
// app's ErrWriter, after the app's name, with database
// passwords redacted; when the command line has --json, that line is a
// JSON object, {"error": "…", "exit_code": 1}. app may be one of this
// package's or an app of one's own; Run installs the usage-error hook on
// it and on all its commands.
func Run(ctx context.Context, app *cli.App, args []string) int {
	app.ExitErrHandler = func(*cli.Context, error) {} // exit codes are ours
	app.OnUsageError = onUsageError
	for _, c := range app.Commands {
		setUsageHandler(c)
	}
	err := app.RunContext(ctx, interspersed(app, args))
	if err == nil {
		return ExitOK
	}
	code := ExitFailure
	// A *UsageError, or urfave/cli's own (cli.Exit: "No help topic for
	// …"): bad input either way.
	var exitCoder cli.ExitCoder
	if errors.As(err, &exitCoder) || errors.Is(err, seal.ErrBadKeys) {
		code = ExitUsage
	}
	// A command's own exit code (`lock run`); without an error, silent.
	var exitErr *exitError
	if errors.As(err, &exitErr) {
		code = exitErr.Code
		if exitErr.Err == nil {
			return code
		}
	}
	// However the refusal came: ferry's inserts translate it, River's
	// JobRetry (`jobs retry`, `dead retry`) passes the database's FR002 on.
	if errors.Is(jobs.AsQueueFull(err), jobs.ErrQueueFull) {
		code = ExitQueueFull
	}
	msg := redact.Postgres(strings.Join(strings.Fields(err.Error()), " "))
	if wantsJSON(args) {
		writeJSONLine(app.ErrWriter, jsonError{Error: msg, ExitCode: code})
	} else {
		fmt.Fprintf(app.ErrWriter, "%s: %s\n", app.Name, msg)
	}
	return code
}

// jsonError is how Run reports a failure under --json: one line on stderr.
type jsonError struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// wantsJSON reports whether the command line asks for JSON (--json before
// any "--").
func wantsJSON(args []string) bool {
	for _, a := range args[min(1, len(args)):] {
		switch {
		case a == "--":
			return false
		case a == "--json", a == "-json", a == "--json=true", a == "-json=true":
			return true
		}
	}
	return false
}

// writeJSONLine writes v as one line of JSON, HTML characters unescaped.
func writeJSONLine(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// warnf writes a warning on stderr: one line after the app's name, or a
// JSON object {"warning": …} under --json. A warning never changes the exit
// code.
func warnf(c *cli.Context, format string, args ...any) {
	msg := redact.Postgres(fmt.Sprintf(format, args...))
	if c.Bool("json") {
		writeJSONLine(c.App.ErrWriter, map[string]string{"warning": msg})
		return
	}
	fmt.Fprintf(c.App.ErrWriter, "%s: warning: %s\n", c.App.Name, msg)
}

func setUsageHandler(c *cli.Command) {
	c.OnUsageError = onUsageError
	for _, sub := range c.Subcommands {
		setUsageHandler(sub)
	}
}

func newApp(name, usage string) *cli.App {
	return &cli.App{
		Name:                 name,
		Usage:                usage,
		Writer:               os.Stdout,
		ErrWriter:            os.Stderr,
		EnableBashCompletion: false,
		HideHelpCommand:      true,
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return cli.ShowAppHelp(c)
			}
			return usageErrorf("unknown command %q; see %s --help", c.Args().First(), c.App.Name)
		},
	}
}

// Flags shared by several commands.

// durationFlag is a duration flag whose error on a bad value says what a
// duration is (urfave's DurationFlag says "parse error"); c.Duration reads
// it as it reads a DurationFlag.
func durationFlag(name, usage string, value time.Duration, defaultText string) cli.Flag {
	v := durationValue(value)
	return &cli.GenericFlag{Name: name, Usage: usage, Value: &v, DefaultText: defaultText}
}

func databaseURLFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "database-url",
		Usage:   "Postgres connection string",
		EnvVars: []string{"DATABASE_URL"},
	}
}

// globalDatabaseURLFlag is --database-url before the command: it reads no
// variable, so that one given before the command is told from DATABASE_URL
// (databaseURL).
func globalDatabaseURLFlag() cli.Flag {
	return &cli.StringFlag{Name: "database-url", Usage: "Postgres connection string, for every command (default: DATABASE_URL)"}
}

func electionKeyFlag() cli.Flag {
	return &cli.Int64Flag{Name: "election-key", Usage: "advisory lock key of the leader election", DefaultText: "911000001, or FERRY_SCHEMA's own", EnvVars: []string{"FERRY_ELECTION_KEY"}}
}

// electionKey is --election-key when set, else the election key of the
// deployment in FERRY_SCHEMA (election.KeyElection in the default one).
func electionKey(c *cli.Context) (int64, error) {
	if c.IsSet("election-key") {
		return c.Int64("election-key"), nil
	}
	s, err := schema.FromEnv()
	if err != nil {
		return 0, &UsageError{Err: err}
	}
	return schema.Key64(election.KeyElection, s), nil
}

func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print JSON for machines instead of a table"}
}

func logFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-format", Value: logging.FormatAuto, Usage: "auto (text on a terminal, JSON otherwise), text or json", EnvVars: []string{"FERRY_LOG_FORMAT"}},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: []string{"FERRY_LOG_LEVEL"}},
	}
}

func loggerFrom(c *cli.Context) (*slog.Logger, error) {
	l, err := logging.New(c.App.ErrWriter, c.String("log-format"), c.String("log-level"))
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	return l, nil
}

// needSession refuses a command that holds Postgres session state (a
// LISTEN, a lock renewed across transactions) when FERRY_POOLER says
// DATABASE_URL is a transaction pooler, where that state would not stay
// with the command.
func needSession(what string) error {
	if os.Getenv(dburl.EnvPooler) == dburl.PoolerTransaction {
		return usageErrorf("%s needs a Postgres session of its own (LISTEN, a session lock), which a transaction pooler does not keep (%s=transaction): point DATABASE_URL at Postgres or a session-mode pooler for this command", what, dburl.EnvPooler)
	}
	return nil
}

// databaseURL is --database-url as given to the command, or before it
// (enqueue --database-url URL jobs list: the app's flag, which reads no
// variable), or DATABASE_URL.
func databaseURL(c *cli.Context) (string, error) {
	u := c.String("database-url") // given to the command, or DATABASE_URL
	if u == os.Getenv("DATABASE_URL") {
		for _, ctx := range c.Lineage()[1:] {
			if slices.Contains(ctx.LocalFlagNames(), "database-url") {
				u = ctx.String("database-url")
				break
			}
		}
	}
	if u == "" {
		return "", usageErrorf("no database: set DATABASE_URL or --database-url")
	}
	return u, nil
}

// output writes either JSON or a table.
type output struct {
	w    io.Writer
	json bool
}

func outputFrom(c *cli.Context) output { return output{w: c.App.Writer, json: c.Bool("json")} }

func (o output) JSON(v any) error {
	enc := json.NewEncoder(o.w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Table prints rows under a header, aligned.
func (o output) Table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(o.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// signalContext is the context commands run under; main cancels it on
// SIGINT/SIGTERM.
func signalContext(c *cli.Context) context.Context {
	if c.Context != nil {
		return c.Context
	}
	return context.Background()
}

// isTerminal reports whether v (a reader or writer of the app) is a
// terminal: progress bars and confirmation prompts are for people.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// readList reads a list with read and, under --json, prints it ([] for
// none); printed says it did, and the caller prints its table otherwise.
func readList[T any](c *cli.Context, read func(context.Context, *pgxpool.Pool) ([]T, error)) (list []T, out output, printed bool, err error) {
	err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		var err error
		list, err = read(ctx, pool)
		return err
	})
	out = outputFrom(c)
	if err != nil || !out.json {
		return list, out, false, err
	}
	if list == nil {
		list = []T{}
	}
	return list, out, true, out.JSON(list)
}
