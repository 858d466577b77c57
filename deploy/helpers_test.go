package deploy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
	"go.yaml.in/yaml/v3"

	"github.com/ferryq/ferry/ferrycli"
)

// installMu serialises the package installs of parallel tests: apt-get
// takes a lock of its own and fails rather than wait for it.
var installMu sync.Mutex

// requireTool returns the path of bin, installing Debian's package pkg
// (as root, or with sudo -n) when bin is missing. It fails the test with
// apt-get's output when that does not work: a check that cannot run is a
// failure, never a skip.
func requireTool(t *testing.T, bin, pkg string) string {
	t.Helper()
	installMu.Lock()
	defer installMu.Unlock()
	if path, err := exec.LookPath(bin); err == nil {
		return path
	}
	var sudo []string
	if os.Geteuid() != 0 {
		sudo = []string{"sudo", "-n"}
	}
	env := []string{"env", "DEBIAN_FRONTEND=noninteractive"}
	for _, args := range [][]string{
		{"apt-get", "update", "-qq"},
		{"apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg},
	} {
		argv := append(append(append([]string{}, sudo...), env...), args...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s is missing and installing Debian's %s failed (%s: %v):\n%s", bin, pkg, strings.Join(argv, " "), err, out)
		}
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("%s is still missing after installing Debian's %s: %v", bin, pkg, err)
	}
	return path
}

// run runs a command in dir and returns its combined output and exit code;
// a command that cannot start fails the test.
func run(t *testing.T, dir string, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	}
	t.Fatalf("run %s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	return "", -1
}

// readYAML decodes every document of a YAML file into maps.
func readYAML(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "decode %s", path)
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	return docs
}

// at walks v by map keys and list indexes (ints) and fails the test when
// the path does not exist.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for i, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			require.True(t, ok, "%v: not a map at %v", path, path[:i])
			v, ok = m[k]
			require.True(t, ok, "%v: no key %q", path, k)
		case int:
			l, ok := v.([]any)
			require.True(t, ok, "%v: not a list at %v", path, path[:i])
			require.Less(t, k, len(l), "%v: list too short", path)
			v = l[k]
		}
	}
	return v
}

func str(t *testing.T, v any, path ...any) string {
	t.Helper()
	s, ok := at(t, v, path...).(string)
	require.True(t, ok, "%v: not a string", path)
	return s
}

func list(t *testing.T, v any, path ...any) []any {
	t.Helper()
	l, ok := at(t, v, path...).([]any)
	require.True(t, ok, "%v: not a list", path)
	return l
}

func strs(t *testing.T, v any, path ...any) []string {
	t.Helper()
	var out []string
	for _, e := range list(t, v, path...) {
		s, ok := e.(string)
		require.True(t, ok, "%v: %v is not a string", path, e)
		out = append(out, s)
	}
	return out
}

// command is a command of one of ferry's apps (`worker`, `enqueue`), as
// its binary parses it: the flags it reads and their environment
// variables.
type command struct {
	path  []string
	flags []cli.Flag
}

// apps are ferry's binaries, as ferrycli builds them.
func apps() map[string]*cli.App {
	return map[string]*cli.App{
		"worker":  ferrycli.WorkerApp(ferrycli.WorkerOptions{}),
		"enqueue": ferrycli.EnqueueApp(),
	}
}

// findCommand returns the command that args (a binary's arguments, flags
// excluded) run in app, with the app's flags and those of the command and
// its parents. It fails the test when args name no command.
func findCommand(t *testing.T, app *cli.App, args ...string) command {
	t.Helper()
	c := command{flags: append([]cli.Flag{}, app.Flags...)}
	cmds := app.Commands
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		var found *cli.Command
		for _, cmd := range cmds {
			if cmd.HasName(a) {
				found = cmd
			}
		}
		if found == nil {
			if len(c.path) > 0 && len(cmds) == 0 {
				break // an argument of the command
			}
			t.Fatalf("%s %s: no command %q", app.Name, strings.Join(args, " "), a)
		}
		c.path = append(c.path, found.Name)
		c.flags = append(c.flags, found.Flags...)
		cmds = found.Subcommands
	}
	require.NotEmpty(t, c.path, "%s %v: no command", app.Name, args)
	require.Empty(t, cmds, "%s %v: a command group, not a command", app.Name, args)
	return c
}

// envVars are the environment variables the command reads through its
// flags.
func (c command) envVars() map[string]bool {
	out := map[string]bool{}
	for _, f := range c.flags {
		if ef, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, e := range ef.GetEnvVars() {
				out[e] = true
			}
		}
	}
	return out
}

// flagForEnv returns the flag that reads the environment variable name.
func (c command) flagForEnv(t *testing.T, name string) cli.Flag {
	t.Helper()
	for _, f := range c.flags {
		if ef, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, e := range ef.GetEnvVars() {
				if e == name {
					return f
				}
			}
		}
	}
	t.Fatalf("%v: no flag reads %s", c.path, name)
	return nil
}

// requireEnvDeclared requires every name in env to be read by a flag of c;
// extra names (the config file's secret variables) are allowed too.
func requireEnvDeclared(t *testing.T, where string, c command, env map[string]string, extra ...string) {
	t.Helper()
	declared := c.envVars()
	for _, e := range extra {
		declared[e] = true
	}
	require.NotEmpty(t, declared)
	for name := range env {
		require.True(t, declared[name], "%s: %s is not an environment variable of `%s`", where, name, strings.Join(c.path, " "))
	}
}

// shutdownGrace is the worker's shutdown grace for env: its
// FERRY_SHUTDOWN_GRACE, else the flag's default.
func shutdownGrace(t *testing.T, run command, env map[string]string) time.Duration {
	t.Helper()
	// A duration setting's flag is a GenericFlag whose value gets a
	// time.Duration (ferrycli's durationValue).
	f, ok := run.flagForEnv(t, "FERRY_SHUTDOWN_GRACE").(*cli.GenericFlag)
	require.True(t, ok, "FERRY_SHUTDOWN_GRACE is not a duration flag")
	getter, ok := f.Value.(interface{ Get() any })
	require.True(t, ok, "FERRY_SHUTDOWN_GRACE's flag value has no Get")
	def, ok := getter.Get().(time.Duration)
	require.True(t, ok, "FERRY_SHUTDOWN_GRACE's flag value is not a duration")
	if v, set := env["FERRY_SHUTDOWN_GRACE"]; set {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "FERRY_SHUTDOWN_GRACE")
		return d
	}
	return def
}

// repoRoot is the module's root, the parent of this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	return root
}
