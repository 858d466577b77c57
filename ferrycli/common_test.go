package ferrycli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// refusingValue is a flag value whose every setting fails with a message
// urfave/cli has never seen.
type refusingValue struct{}

func (refusingValue) String() string   { return "" }
func (refusingValue) Set(string) error { return errors.New("zzz") }

// testApp is an app with one command, `do`, whose flag --x refuses every
// value (also from $CLI_TEST_X), and whose --fail makes it fail.
func testApp() *cli.App {
	app := newApp("test", "a test app")
	app.Commands = []*cli.Command{{
		Name: "do",
		Flags: []cli.Flag{
			&cli.GenericFlag{Name: "x", Value: refusingValue{}, EnvVars: []string{"CLI_TEST_X"}},
			&cli.IntFlag{Name: "n"},
			&cli.BoolFlag{Name: "fail"},
		},
		Subcommands: []*cli.Command{{Name: "sub", Action: func(*cli.Context) error { return nil }}},
		Action: func(c *cli.Context) error {
			if c.Bool("fail") {
				return errors.New("boom")
			}
			return nil
		},
	}}
	return app
}

// run runs app with args and returns the exit code and what it printed on
// stderr.
func run(t *testing.T, app *cli.App, args ...string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	app.Writer, app.ErrWriter = &bytes.Buffer{}, &stderr
	return Run(context.Background(), app, args), stderr.String()
}

// The tests that run an app are not parallel: urfave/cli's apps share its
// global help flag, which each run applies.

func TestRun_ExitCodes(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		code int
	}{
		"success":                {[]string{"test", "do"}, ExitOK},
		"failure":                {[]string{"test", "do", "--fail"}, ExitFailure},
		"flag value refused":     {[]string{"test", "do", "--x", "1"}, ExitUsage},
		"not a number":           {[]string{"test", "do", "--n", "one"}, ExitUsage},
		"flag without its value": {[]string{"test", "do", "--n"}, ExitUsage},
		"unknown flag of a cmd":  {[]string{"test", "do", "--nope"}, ExitUsage},
		"unknown flag of a sub":  {[]string{"test", "do", "sub", "--nope"}, ExitUsage},
		"unknown flag of app":    {[]string{"test", "--nope"}, ExitUsage},
		"unknown command":        {[]string{"test", "nope"}, ExitUsage},
	} {
		t.Run(name, func(t *testing.T) {
			code, stderr := run(t, testApp(), tc.args...)
			require.Equal(t, tc.code, code, stderr)
			if code == ExitOK {
				require.Empty(t, stderr)
				return
			}
			require.True(t, strings.HasPrefix(stderr, "test: "), stderr)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		})
	}
}

// Flags read from the environment are parsed before the command runs;
// their errors take the same hook.
func TestRun_BadEnvironmentVariable(t *testing.T) {
	t.Setenv("CLI_TEST_X", "1")
	code, stderr := run(t, testApp(), "test", "do")
	require.Equal(t, ExitUsage, code, stderr)
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)

	t.Setenv("FERRY_SHUTDOWN_GRACE", "soon")
	code, stderr = run(t, WorkerApp(WorkerOptions{}), "worker", "run")
	require.Equal(t, ExitUsage, code, stderr)
	require.Contains(t, stderr, "FERRY_SHUTDOWN_GRACE")
}

// urfave/cli reports a missing Required flag past the OnUsageError hook,
// as an error of an unexported type: no flag of ferry's apps is Required,
// their actions check what they need and return a *UsageError.
func TestApps_NoRequiredFlags(t *testing.T) {
	t.Parallel()
	var walk func(path string, flags []cli.Flag, cmds []*cli.Command)
	walk = func(path string, flags []cli.Flag, cmds []*cli.Command) {
		for _, f := range flags {
			if r, ok := f.(cli.RequiredFlag); ok {
				require.False(t, r.IsRequired(), "%s --%s", path, f.Names()[0])
			}
		}
		for _, c := range cmds {
			walk(path+" "+c.Name, c.Flags, c.Subcommands)
		}
	}
	for _, app := range []*cli.App{WorkerApp(WorkerOptions{}), EnqueueApp()} {
		walk(app.Name, app.Flags, app.Commands)
	}
}

func TestUsageError(t *testing.T) {
	t.Parallel()
	err := usageErrorf("bad %s", "input")
	var exitCoder cli.ExitCoder
	require.ErrorAs(t, err, &exitCoder)
	require.Equal(t, ExitUsage, exitCoder.ExitCode())
	require.EqualError(t, err, "bad input")
}
